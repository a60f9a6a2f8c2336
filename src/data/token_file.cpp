#include "data/token_file.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"

namespace agoq {

// Token payloads are stored little-endian and read with memcpy; agoq targets little-endian x86/ARM hosts.
static_assert(std::endian::native == std::endian::little, "token files assume a little-endian host");

namespace {

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Layout: magic[8] version@8 vocab@12 dtype@16 window@20 count@24 checksum@32.
void header_encode(const TokenFileHeader& h, unsigned char* b) {
  std::memcpy(b, kTokenFileMagic, 8);
  put_le(b + 8, h.version, 4);
  put_le(b + 12, h.vocab_size, 4);
  put_le(b + 16, h.dtype, 4);
  put_le(b + 20, h.window, 4);
  put_le(b + 24, h.count, 8);
  put_le(b + 32, h.checksum, 8);
}

constexpr size_t kChunkTokens = 1 << 20;

}  // namespace

uint32_t token_dtype_for_vocab(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void token_file_write(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                      std::span<const uint8_t> flags, uint32_t window) {
  AGOQ_CHECK(vocab_size > 0, "token file ", path, ": vocab size must be positive");
  AGOQ_CHECK(flags.empty() || flags.size() == tokens.size(), "token file ", path, ": ", flags.size(), " flags for ",
             tokens.size(), " tokens");
  AGOQ_CHECK(window == 0 || (flags.size() == tokens.size() && tokens.size() % window == 0), "token file ", path, ": ",
             tokens.size(), " tokens do not fill windows of ", window);
  const bool with_flags = !flags.empty() || window > 0;  // packed examples always carry flags, even none of them
  TokenFileHeader h{.version = with_flags ? kTokenFileVersionFlags : kTokenFileVersion,
                    .vocab_size = vocab_size,
                    .dtype = token_dtype_for_vocab(vocab_size),
                    .window = window,
                    .count = tokens.size(),
                    .checksum = 0};
  AtomicFile f(path);
  unsigned char header[kTokenFileHeaderBytes];
  header_encode(h, header);
  f.write(header, sizeof header);  // rewritten below with the checksum
  // Convert and hash in chunks so writing never doubles the token memory.
  std::vector<unsigned char> buf(kChunkTokens * h.dtype);
  uint64_t sum = kHashFnv1a64Basis;
  for (size_t i0 = 0; i0 < tokens.size(); i0 += kChunkTokens) {
    const size_t n = std::min(kChunkTokens, tokens.size() - i0);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = tokens[i0 + i];
      AGOQ_CHECK(t >= 0 && uint32_t(t) < vocab_size, "token file ", path, ": token ", t, " at position ", i0 + i,
                 " is outside the vocabulary (size ", vocab_size, ")");
      if (h.dtype == 2) {
        const auto v = uint16_t(t);
        std::memcpy(&buf[i * 2], &v, 2);
      } else {
        std::memcpy(&buf[i * 4], &t, 4);
      }
    }
    sum = hash_fnv1a64(buf.data(), n * h.dtype, sum);
    f.write(buf.data(), n * h.dtype);
  }
  if (!flags.empty()) {
    sum = hash_fnv1a64(flags.data(), flags.size(), sum);
    f.write(flags.data(), flags.size());
  }
  h.checksum = sum;
  header_encode(h, header);
  f.write_at(0, header, sizeof header);
  f.commit();
}

TokenFileHeader token_file_read_header(const std::string& path) {
  std::error_code ec;
  AGOQ_CHECK(std::filesystem::is_regular_file(path, ec), "token file ", path, ": no such file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  AGOQ_CHECK(!ec, "token file ", path, ": cannot stat: ", ec.message());
  std::ifstream f(path, std::ios::binary);
  AGOQ_CHECK(f, "token file ", path, ": cannot open");
  AGOQ_CHECK(size >= kTokenFileHeaderBytes, "token file ", path, ": short header (", size, " bytes, need ",
             kTokenFileHeaderBytes, ")");
  unsigned char b[kTokenFileHeaderBytes];
  f.read(reinterpret_cast<char*>(b), sizeof b);
  AGOQ_CHECK(f, "token file ", path, ": cannot read header");
  AGOQ_CHECK(std::memcmp(b, kTokenFileMagic, 8) == 0, "token file ", path,
             ": wrong magic (not an agoq token file; expected \"AGOQTOK\")");
  TokenFileHeader h{.version = uint32_t(get_le(b + 8, 4)),
                    .vocab_size = uint32_t(get_le(b + 12, 4)),
                    .dtype = uint32_t(get_le(b + 16, 4)),
                    .window = uint32_t(get_le(b + 20, 4)),
                    .count = get_le(b + 24, 8),
                    .checksum = get_le(b + 32, 8)};
  AGOQ_CHECK(h.version == kTokenFileVersion || h.version == kTokenFileVersionFlags, "token file ", path,
             ": unsupported version ", h.version, " (this build reads versions ", kTokenFileVersion, " and ",
             kTokenFileVersionFlags, ")");
  AGOQ_CHECK(h.window == 0 || (h.has_flags() && h.window >= 2 && h.count % h.window == 0), "token file ", path,
             ": window ", h.window, " does not divide its ", h.count, " tokens into packed examples");
  AGOQ_CHECK(h.dtype == 2 || h.dtype == 4, "token file ", path, ": unsupported token dtype ", h.dtype,
             " (expected 2 = uint16 or 4 = uint32)");
  AGOQ_CHECK(h.vocab_size > 0, "token file ", path, ": vocab size is 0");
  AGOQ_CHECK(h.dtype == 4 || h.vocab_size <= 65536, "token file ", path, ": vocab size ", h.vocab_size,
             " does not fit uint16 tokens");
  const uint64_t payload = size - kTokenFileHeaderBytes, per_token = h.dtype + (h.has_flags() ? 1 : 0);
  AGOQ_CHECK(h.count <= payload / per_token, "token file ", path, ": truncated payload (header says ", h.count,
             " tokens = ", h.count * per_token, " bytes, file has ", payload, " bytes after the header)");
  AGOQ_CHECK(h.count * per_token == payload, "token file ", path, ": size mismatch (header says ", h.count,
             " tokens = ", h.count * per_token, " bytes, file has ", payload, " bytes after the header)");
  return h;
}

void token_file_read_payload(const std::string& path, const TokenFileHeader& h, void* dst, uint8_t* flags) {
  AGOQ_CHECK(!h.has_flags() || flags, "token file ", path, ": its flags have nowhere to go (internal)");
  std::ifstream f(path, std::ios::binary);
  AGOQ_CHECK(f, "token file ", path, ": cannot open");
  f.seekg(std::streamoff(kTokenFileHeaderBytes));
  uint64_t sum = kHashFnv1a64Basis, at = kTokenFileHeaderBytes;
  auto read_hashed = [&](char* out, uint64_t total) {
    for (uint64_t done = 0; done < total;) {
      const uint64_t n = std::min<uint64_t>(total - done, kChunkTokens * 4);
      f.read(out + done, std::streamsize(n));
      AGOQ_CHECK(f, "token file ", path, ": read failed at byte ", at + done);
      sum = hash_fnv1a64(out + done, n, sum);
      done += n;
    }
    at += total;
  };
  read_hashed(static_cast<char*>(dst), h.count * h.dtype);
  if (h.has_flags()) read_hashed(reinterpret_cast<char*>(flags), h.count);
  AGOQ_CHECK(sum == h.checksum, "token file ", path, ": checksum mismatch (header ", h.checksum, ", data ", sum,
             "): the file is corrupt");
}

std::vector<int32_t> token_file_read(const std::string& path, TokenFileHeader* header, std::vector<uint8_t>* flags) {
  const TokenFileHeader h = token_file_read_header(path);
  std::vector<int32_t> out(h.count);
  std::vector<uint8_t> flag_bytes(h.has_flags() ? h.count : 0);
  if (h.dtype == 4) {
    token_file_read_payload(path, h, out.data(), flag_bytes.data());
  } else {
    std::vector<uint16_t> raw(h.count);
    token_file_read_payload(path, h, raw.data(), flag_bytes.data());
    std::copy(raw.begin(), raw.end(), out.begin());
  }
  if (header) *header = h;
  if (flags) *flags = std::move(flag_bytes);
  return out;
}

}  // namespace agoq

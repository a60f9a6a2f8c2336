// Binary token files (train.bin / val.bin), format in docs/data-format.md: a 40-byte little-endian header
// (magic "AGOQTOK\0", version 1, vocab_size, dtype 2|4, reserved, count, FNV-1a 64 checksum of the token bytes:
// core/hash.h) followed by `count` tokens of `dtype` bytes each.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace agoq {

constexpr char kTokenFileMagic[8] = {'A', 'G', 'O', 'Q', 'T', 'O', 'K', '\0'};
constexpr uint32_t kTokenFileVersion = 1;
constexpr size_t kTokenFileHeaderBytes = 40;

struct TokenFileHeader {
  uint32_t version = kTokenFileVersion;
  uint32_t vocab_size = 0;
  uint32_t dtype = 2;  // bytes per token: 2 (uint16) or 4 (uint32)
  uint64_t count = 0;
  uint64_t checksum = 0;
};

// uint16 when every id fits (vocab <= 65536), else uint32.
uint32_t token_dtype_for_vocab(uint32_t vocab_size);

// Writes `tokens` (each in [0, vocab_size)) atomically (core/atomic_file.h).
void token_file_write(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size);

// Reads and validates the header and the file size (missing file, short header, wrong magic, unsupported
// version or dtype, truncated or overlong payload); errors name the file and the problem.
TokenFileHeader token_file_read_header(const std::string& path);

// Reads the payload of a validated file into `dst` (header.count * header.dtype bytes) and verifies the checksum.
void token_file_read_payload(const std::string& path, const TokenFileHeader& header, void* dst);

// Whole file as int32 (tests, tools; training uses TokenDataset, which keeps the compact dtype).
std::vector<int32_t> token_file_read(const std::string& path, TokenFileHeader* header = nullptr);

}  // namespace agoq

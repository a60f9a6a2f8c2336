// Binary token files (train.bin / val.bin), format in docs/data-format.md: a 40-byte little-endian header
// (magic "AGOQTOK\0", version, vocab_size, dtype 2|4, window, count, FNV-1a 64 checksum of the payload:
// core/hash.h) followed by `count` tokens of `dtype` bytes each. Version 1 is a stream of tokens (window 0).
// Version 2 (prompt/completion examples, `prepare --format prompt-completion`) adds one flag byte per token after
// the tokens (kTokenFlag*), and its examples are packed into windows of `window` tokens (0: not packed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace agoq {

constexpr char kTokenFileMagic[8] = {'A', 'G', 'O', 'Q', 'T', 'O', 'K', '\0'};
constexpr uint32_t kTokenFileVersion = 1;       // tokens only
constexpr uint32_t kTokenFileVersionFlags = 2;  // tokens, then a flag byte per token
constexpr size_t kTokenFileHeaderBytes = 40;

// A token's flags (version 2).
constexpr uint8_t kTokenFlagLoss = 1;      // predicting this token counts in the loss (a completion token)
constexpr uint8_t kTokenFlagDocStart = 2;  // the first token of an example: attention does not look before it

struct TokenFileHeader {
  uint32_t version = kTokenFileVersion;
  uint32_t vocab_size = 0;
  uint32_t dtype = 2;   // bytes per token: 2 (uint16) or 4 (uint32)
  uint32_t window = 0;  // examples packed into windows of this many tokens (count a multiple of it); 0: a stream
  uint64_t count = 0;
  uint64_t checksum = 0;
  bool has_flags() const { return version == kTokenFileVersionFlags; }
};

// uint16 when every id fits (vocab <= 65536), else uint32.
uint32_t token_dtype_for_vocab(uint32_t vocab_size);

// Writes `tokens` (each in [0, vocab_size)) atomically (core/atomic_file.h): version 1, or version 2 when `flags`
// (one per token) or a window are given.
void token_file_write(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                      std::span<const uint8_t> flags = {}, uint32_t window = 0);

// Reads and validates the header and the file size (missing file, short header, wrong magic, unsupported
// version or dtype, truncated or overlong payload); errors name the file and the problem.
TokenFileHeader token_file_read_header(const std::string& path);

// Reads the payload of a validated file into `dst` (header.count * header.dtype bytes) and, for version 2, its
// flags into `flags` (header.count bytes; required then), and verifies the checksum.
void token_file_read_payload(const std::string& path, const TokenFileHeader& header, void* dst,
                             uint8_t* flags = nullptr);

// Whole file as int32 (tests, tools; training uses TokenDataset, which keeps the compact dtype).
// `flags`: a version 2 file's flags (empty for version 1).
std::vector<int32_t> token_file_read(const std::string& path, TokenFileHeader* header = nullptr,
                                     std::vector<uint8_t>* flags = nullptr);

}  // namespace agoq

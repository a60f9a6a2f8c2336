// GPT-2's byte-to-unicode alphabet (byte-level BPE vocabularies spell each byte as one of these characters), for
// tests and fuzz targets that build a BpeSpec by hand.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace agoq {

// Each byte's character, as UTF-8.
inline std::vector<std::string> bpe_byte_chars() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
    out[b] = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return out;
}

}  // namespace agoq

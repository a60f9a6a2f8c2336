// UTF-8 checks for the byte-level BPE engine. Invalid input is replaced, not refused: each maximal invalid subpart
// becomes one U+FFFD, as Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do (the
// Unicode standard's recommended practice), so agoq's ids for bad bytes equal tokenizers' ids for the string
// Python would have made of them. Private to src/data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agoq {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one; *subpart is how many bytes one
// replacement character stands for (at least 1).
inline size_t utf8_sequence(std::string_view s, size_t i, size_t* subpart) {
  const auto at = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0u; };
  const unsigned b = at(0);
  *subpart = 1;
  if (b < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b >= 0xC2 && b <= 0xDF) need = 1;
  else if (b == 0xE0) need = 2, lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
  else if (b == 0xED) need = 2, hi = 0x9F;  // no surrogates
  else if (b == 0xF0) need = 3, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) need = 3;
  else if (b == 0xF4) need = 3, hi = 0x8F;
  else return 0;
  for (size_t k = 1; k <= need; ++k) {
    const unsigned c = at(k);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      *subpart = k;
      return 0;
    }
  }
  return need + 1;
}

// The offset of the first byte that is not valid UTF-8, or s.size() when all is.
inline size_t utf8_invalid_at(std::string_view s) {
  size_t sub;
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(s, i, &sub);
    if (!n) return i;
    i += n;
  }
  return s.size();
}

inline bool utf8_valid(std::string_view s) { return utf8_invalid_at(s) == s.size(); }

// `s` with every maximal invalid subpart replaced by U+FFFD.
inline std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t sub;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i, &sub);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += sub;
    }
  }
  return out;
}

// Unicode's White_Space, which Rust's char::is_whitespace tests (tokenizers' Strip, and lstrip/rstrip's \s).
inline bool utf8_is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The start of the character (valid UTF-8) that holds byte i.
inline size_t utf8_char_start(std::string_view s, size_t i) {
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// The code point at s[i] (valid UTF-8), and its length in *len.
inline uint32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto b = uint8_t(s[i]);
  if (b < 0x80) return *len = 1, b;
  if (b < 0xE0) return *len = 2, uint32_t(b & 0x1F) << 6 | (uint8_t(s[i + 1]) & 0x3F);
  if (b < 0xF0)
    return *len = 3, uint32_t(b & 0x0F) << 12 | uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6 | (uint8_t(s[i + 2]) & 0x3F);
  return *len = 4, uint32_t(b & 0x07) << 18 | uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12 |
                       uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6 | (uint8_t(s[i + 3]) & 0x3F);
}

inline void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace agoq

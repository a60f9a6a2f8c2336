// Bitwise equality of two buffers (floats compared as bits: -0 vs 0 and NaN payloads count). Unlike a bare
// memcmp it accepts empty buffers, whose data() may be null (UBSan's nonnull check).
#pragma once
#include <cstddef>
#include <cstring>

namespace agoq {

inline bool bits_equal(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

}  // namespace agoq

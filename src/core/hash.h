// FNV-1a 64: a fast, stable hash of bytes, for file checksums (data/token_file.h) and for comparing descriptions
// across ranks (comm/comm_check.h). Not cryptographic. Continuing from `h` hashes a stream in pieces.
#pragma once
#include <cstddef>
#include <cstdint>

namespace agoq {

constexpr uint64_t kHashFnv1a64Basis = 0xcbf29ce484222325ull;

inline uint64_t hash_fnv1a64(const void* data, size_t bytes, uint64_t h = kHashFnv1a64Basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace agoq

// Philox4x32-10 (Salmon et al. 2011), the counter-based generator behind every random number in agoq: a value
// depends only on (key, counter). Shared by the CPU (core/rng.h, the quantizers) and the CUDA kernels.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace agoq {

struct PhiloxWords {
  uint32_t w[4];
};

// Four 32-bit random words for counter (ctr_hi, ctr_lo) under a 64-bit key.
AGOQ_HD PhiloxWords philox4x32_words(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo) {
  uint32_t c0 = uint32_t(ctr_lo), c1 = uint32_t(ctr_lo >> 32), c2 = uint32_t(ctr_hi), c3 = uint32_t(ctr_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0, c1 = uint32_t(p1), c2 = n2, c3 = uint32_t(p0);
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

}  // namespace agoq

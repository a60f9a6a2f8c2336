#include "quant/simd.h"

#include <atomic>

#include "quant/simd_avx2.h"

namespace agoq {

namespace {
std::atomic<bool> g_simd{AGOQ_QUANT_AVX2 != 0};
}

bool quant_simd_enabled() { return AGOQ_QUANT_AVX2 && g_simd.load(std::memory_order_relaxed); }
void quant_set_simd(bool on) { g_simd.store(on, std::memory_order_relaxed); }

void quant_uniform_chunks_scalar(const QuantSeed& s, uint64_t chunk, size_t chunks, float* out) {
  for (size_t c = 0; c < chunks; ++c, out += 32)
    for (int lane = 0; lane < 8; ++lane) {
      const auto w = philox4x32(s.seed, s.tensor_id, (chunk + c) * 8 + lane);
      for (int k = 0; k < 4; ++k) out[8 * k + lane] = rng_unit_float(w[k]);
    }
}

#if AGOQ_QUANT_AVX2
void quant_uniform_chunks_avx2(const QuantSeed& s, uint64_t chunk, size_t chunks, float* out) {
  const simd::PhiloxKey8 key(s.seed, s.tensor_id);
  __m256i w[4];
  for (size_t c = 0; c < chunks; ++c, out += 32) {
    simd::philox8(key, (chunk + c) * 8, w);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, simd::unit_float8(w[k]));
  }
}
#endif

const float* quant_uniforms(const QuantSeed& s, uint64_t first, size_t n, float* tmp, bool simd) {
  const uint64_t c0 = first >> 5, c1 = (first + n + 31) >> 5;
#if AGOQ_QUANT_AVX2
  if (simd) {
    quant_uniform_chunks_avx2(s, c0, c1 - c0, tmp);
    return tmp + (first & 31);
  }
#endif
  quant_uniform_chunks_scalar(s, c0, c1 - c0, tmp);
  return tmp + (first & 31);
}

}  // namespace agoq

#include "quant/keep.h"

#include <cmath>
#include <cstring>

#include "quant/half.h"
#include "quant/simd.h"
#include "quant/quant_avx2.h"

namespace agoq {

namespace {
#if AGOQ_AVX2
// bf16 RNE of 8 values as 32-bit lanes (the scalar f32_to_bf16, lane-wise).
inline __m256i bf16_rne8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}
inline int count_nonfinite8(__m256 x) { return __builtin_popcount(unsigned(_mm256_movemask_ps(simd::nonfinite8(x)))); }
#endif
}  // namespace

size_t keep_encode_fp32(const float* x, size_t n, float* out, bool simd) {
  size_t bad = 0, j = 0;
#if AGOQ_AVX2
  if (simd)
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      _mm256_storeu_ps(out + j, v);
      bad += count_nonfinite8(v);
    }
#endif
  for (; j < n; ++j) {
    bad += !std::isfinite(x[j]);
    std::memcpy(out + j, x + j, sizeof(float));
  }
  return bad;
}

size_t keep_encode_bf16(const float* x, size_t n, uint16_t* out, bool simd) {
  size_t bad = 0, j = 0;
#if AGOQ_AVX2
  if (simd)
    for (; j + 16 <= n; j += 16) {
      const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + 8);
      // packus interleaves 128-bit halves; the permute restores element order.
      const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_rne8(a), bf16_rne8(b)), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), p);
      bad += count_nonfinite8(a) + count_nonfinite8(b);
    }
#endif
  for (; j < n; ++j) {
    bad += !std::isfinite(x[j]);
    out[j] = f32_to_bf16(x[j]);
  }
  return bad;
}

void keep_decode_bf16(const uint16_t* in, size_t n, float* out, bool simd) {
  size_t j = 0;
#if AGOQ_AVX2
  if (simd)
    for (; j + 8 <= n; j += 8) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j)));
      _mm256_storeu_ps(out + j, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
#endif
  for (; j < n; ++j) out[j] = bf16_to_f32(in[j]);
}

}  // namespace agoq

// The AVX2 lane helpers every kernel shares (empty unless AGOQ_AVX2): absolute value, the non-finite mask and the
// horizontal sum and maximum, in a fixed order so a vector body always gives the same bits. The kernels' own
// helpers build on these: model/ops_simd.h (exp8), quant/quant_avx2.h (Philox, code packing). Private: only .cpp files
// and those headers include it, so <immintrin.h> stays out of the public headers (core/isa.h).
#pragma once
#include <cmath>

#include "core/isa.h"
#if AGOQ_AVX2
// GCC 12 warns that the AVX-512 intrinsics' own "undefined" vectors (self-initialised on purpose) are uninitialised
// wherever the AVX-512 kernels inline them (GCC bug 105593, fixed in 13); the state at the header's lines decides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace agoq::simd {

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }
// All ones in the lanes that hold an infinity or a NaN.
inline __m256 nonfinite8(__m256 v) { return _mm256_cmp_ps(abs8(v), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ); }
// Sum of the 8 lanes, in a fixed order.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
// Maximum of the 8 lanes (of finite values: a NaN lane's result is unspecified).
inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace agoq::simd
#endif

// AVX2 (+FMA, F16C) helpers for the quantization kernels; include only where AGOQ_QUANT_AVX2 is 1. Each mirrors a
// scalar helper in simd.h bit for bit.
#pragma once
#include "quant/simd.h"

#if AGOQ_QUANT_AVX2
#include <cstring>

namespace agoq::simd {

// 32x32 -> 64-bit products of 8 lanes with a constant: _mm256_mul_epu32 multiplies the even lanes; the odd lanes
// are swapped into even position (a shuffle, off the multiply ports) for the second product.
inline void mulhilo8(__m256i m, __m256i a, __m256i& hi, __m256i& lo) {
  const __m256i pe = _mm256_mul_epu32(a, m);
  const __m256i po = _mm256_mul_epu32(_mm256_shuffle_epi32(a, 0xB1), m);
  lo = _mm256_blend_epi32(pe, _mm256_shuffle_epi32(po, 0xB1), 0xAA);
  hi = _mm256_blend_epi32(_mm256_shuffle_epi32(pe, 0xB1), po, 0xAA);
}

// Philox4x32-10 on 8 counters (ctr + lane, ctr a multiple of 8 so the low word never carries) and 2 such batches
// interleaved for instruction-level parallelism: w[b][k] lane l = word k of philox4x32(key, ctr_hi, ctr[b] + l).
inline void philox8x2(uint64_t key, uint64_t ctr_hi, uint64_t ctr_a, uint64_t ctr_b, __m256i wa[4], __m256i wb[4]) {
  const __m256i m0 = _mm256_set1_epi32(int(0xD2511F53u)), m1 = _mm256_set1_epi32(int(0xCD9E8D57u));
  const __m256i w0 = _mm256_set1_epi32(int(0x9E3779B9u)), w1 = _mm256_set1_epi32(int(0xBB67AE85u));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i a0 = _mm256_add_epi32(_mm256_set1_epi32(int(uint32_t(ctr_a))), lane);
  __m256i b0 = _mm256_add_epi32(_mm256_set1_epi32(int(uint32_t(ctr_b))), lane);
  __m256i a1 = _mm256_set1_epi32(int(uint32_t(ctr_a >> 32))), b1 = _mm256_set1_epi32(int(uint32_t(ctr_b >> 32)));
  __m256i a2 = _mm256_set1_epi32(int(uint32_t(ctr_hi))), b2 = a2;
  __m256i a3 = _mm256_set1_epi32(int(uint32_t(ctr_hi >> 32))), b3 = a3;
  __m256i k0 = _mm256_set1_epi32(int(uint32_t(key))), k1 = _mm256_set1_epi32(int(uint32_t(key >> 32)));
  for (int round = 0; round < 10; ++round) {
    __m256i ahi0, alo0, ahi1, alo1, bhi0, blo0, bhi1, blo1;
    mulhilo8(m0, a0, ahi0, alo0);
    mulhilo8(m1, a2, ahi1, alo1);
    mulhilo8(m0, b0, bhi0, blo0);
    mulhilo8(m1, b2, bhi1, blo1);
    a0 = _mm256_xor_si256(_mm256_xor_si256(ahi1, a1), k0), a2 = _mm256_xor_si256(_mm256_xor_si256(ahi0, a3), k1);
    b0 = _mm256_xor_si256(_mm256_xor_si256(bhi1, b1), k0), b2 = _mm256_xor_si256(_mm256_xor_si256(bhi0, b3), k1);
    a1 = alo1, a3 = alo0, b1 = blo1, b3 = blo0;
    k0 = _mm256_add_epi32(k0, w0), k1 = _mm256_add_epi32(k1, w1);
  }
  wa[0] = a0, wa[1] = a1, wa[2] = a2, wa[3] = a3;
  wb[0] = b0, wb[1] = b1, wb[2] = b2, wb[3] = b3;
}

// 24-bit uniform in [0,1), as rng_unit_float.
inline __m256 unit_float8(__m256i w) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)), _mm256_set1_ps(0x1p-24f));
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline float hmin8(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }
// All-ones lanes where v is NaN or +-Inf.
inline __m256 nonfinite8(__m256 v) {
  return _mm256_cmp_ps(abs8(v), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ);
}

// 8 codes (int32 lanes, each < 2^B) -> 8*B bits, code j at bits [j*B, (j+1)*B), little-endian; stored as B bytes.
template <int B>
inline void pack8(__m256i q, uint8_t* out) {
  if constexpr (B == 8) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, pick), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
  } else {
    // The shifted codes occupy disjoint bits, so a horizontal OR of the lanes is the packed word.
    const __m256i s = _mm256_sllv_epi32(q, _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B));
    __m128i v = _mm_or_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    v = _mm_or_si128(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_or_si128(v, _mm_shuffle_epi32(v, 0xB1));
    const uint32_t w = uint32_t(_mm_cvtsi128_si32(v));
    std::memcpy(out, &w, B);  // little-endian: the low B bytes
  }
}

// Inverse of pack8: B bytes -> 8 codes as floats.
template <int B>
inline __m256 unpack8(const uint8_t* in) {
  if constexpr (B == 8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in))));
  } else {
    uint32_t w = 0;
    std::memcpy(&w, in, B);
    const __m256i s = _mm256_srlv_epi32(_mm256_set1_epi32(int(w)),
                                        _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B));
    return _mm256_cvtepi32_ps(_mm256_and_si256(s, _mm256_set1_epi32((1 << B) - 1)));
  }
}

inline uint16_t f32_to_f16_up_f16c(float x) {
  return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC), 0));
}
inline float f16_to_f32_f16c(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

}  // namespace agoq::simd
#endif

// AVX-512 (F, BW, VL, DQ) helpers for the quantization kernels' AVX-512 variants (empty unless AGOQ_AVX512; core/isa.h
// says how they are compiled and chosen). Private, like quant/quant_avx2.h, whose AVX2 helpers these extend: each
// gives the bits of its scalar twin. Only code inside AGOQ_AVX512_BEGIN ... END may call them.
#pragma once
#include "quant/quant_avx2.h"

#if AGOQ_AVX512
AGOQ_AVX512_BEGIN
namespace agoq::simd512 {

// ---- Philox4x32-10, 8 instances per zmm (one per 64-bit lane, each word in the lane's low 32 bits, as simd::Philox4)

// The key schedule and tensor-id words as scalars: the rounds take them as broadcast memory operands.
struct PhiloxKey16 {
  uint32_t k0[10], k1[10], t0, t1;
  PhiloxKey16(uint64_t key, uint64_t ctr_hi) : t0(uint32_t(ctr_hi)), t1(uint32_t(ctr_hi >> 32)) {
    uint32_t a = uint32_t(key), b = uint32_t(key >> 32);
    for (int r = 0; r < 10; ++r, a += 0x9E3779B9u, b += 0xBB67AE85u) k0[r] = a, k1[r] = b;
  }
};

struct Philox8 {
  __m512i c0, c1, c2, c3;
};

// One chunk (counters ctr .. ctr + 7, ctr % 8 == 0): lane L runs the counter of the 4-byte unit u = (L >> 1) |
// ((L & 1) << 2) of each 32-byte block, rev3(u), so the lanes' words come out in quant_random_slot512 order.
inline Philox8 philox_init(const PhiloxKey16& key, uint64_t ctr) {
  const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(ctr))),
                                      _mm512_setr_epi32(0, 0, 1, 0, 4, 0, 5, 0, 2, 0, 3, 0, 6, 0, 7, 0));
  return {lo, _mm512_set1_epi32(int(uint32_t(ctr >> 32))), _mm512_set1_epi32(int(key.t0)),
          _mm512_set1_epi32(int(key.t1))};
}

// A round in 6 operations on the two ports that execute 512-bit work: the products' high words are moved down by a
// dword shuffle (port 5) rather than a shift (port 0, with the multiplies), and each new word is one three-way xor.
inline void philox_round(Philox8& s, __m512i m0, __m512i m1, __m512i k0, __m512i k1) {
  const __m512i p0 = _mm512_mul_epu32(s.c0, m0), p1 = _mm512_mul_epu32(s.c2, m1);
  s.c0 = _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), s.c1, k0, 0x96);
  s.c2 = _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), s.c3, k1, 0x96);
  s.c1 = p1, s.c3 = p0;
}

// The chunk's 128 bytes: word k of the 8 lanes is block k (32 bytes); one permute takes the low dwords of two words.
inline void store_chunk(const Philox8& s, uint8_t* out) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  _mm512_storeu_si512(out, _mm512_permutex2var_epi32(s.c0, even, s.c1));
  _mm512_storeu_si512(out + 64, _mm512_permutex2var_epi32(s.c2, even, s.c3));
}

// Chunks [chunk, chunk + n) into out (128 bytes each), two chains at a time so their multiply latencies overlap.
inline void philox_chunks(const PhiloxKey16& key, uint64_t chunk, size_t n, uint8_t* out) {
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  for (size_t c = 0; c < n; c += 2, out += 256) {
    Philox8 a = philox_init(key, (chunk + c) * 8), b = philox_init(key, (chunk + c + 1) * 8);
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const __m512i k0 = _mm512_set1_epi32(int(key.k0[r])), k1 = _mm512_set1_epi32(int(key.k1[r]));
      philox_round(a, m0, m1, k0, k1);
      if (c + 1 < n) philox_round(b, m0, m1, k0, k1);
    }
    store_chunk(a, out);
    if (c + 1 < n) store_chunk(b, out + 128);
  }
}

// ---- Codes: 32 or 64 values as 16-bit lanes, then bytes in order

// Units of 4 bytes of packs(packs(a, b), packs(c, d)) (a..d: 16 int32 values each) into value order: lane k of the
// pack holds units k, 4 + k, 8 + k, 12 + k.
inline __m512i units_in_order(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
}

// 16-bit codes of 32 values, a (values 0-15) and b (16-31) holding int32 codes or, for stochastic rounding,
// T = round(256 t): quant_sr_round with the 32 random bytes r (quant_random_slot512 order: the order of these lanes).
// Unsigned (activation formats): as simd::pack32_sr. Signed (gradients): as simd::pack32_i8_sr.
inline __m512i random16(const uint8_t* r) {
  return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)));
}
inline __m512i codes16(__m512i a, __m512i b) { return _mm512_packs_epi32(a, b); }
inline __m512i codes16_sr(__m512i a, __m512i b, const uint8_t* r) {
  return _mm512_srli_epi16(_mm512_adds_epu16(_mm512_packus_epi32(a, b), random16(r)), 8);
}
inline __m512i codes16_i8_sr(__m512i a, __m512i b, const uint8_t* r) {
  return _mm512_srai_epi16(_mm512_adds_epi16(_mm512_packs_epi32(a, b), random16(r)), 8);
}

// 64 codes (16-bit lanes of values 0-31 and 32-63) as bytes in order, clamped as simd::pack32 (activation formats,
// then packed to B bits) or simd::pack32_i8 (gradients, [-127, 127]). The 32-value versions take one half.
template <int B>
inline void store_codes64(__m512i ab, __m512i cd, uint8_t* out) {
  const __m512i v = _mm512_min_epu8(units_in_order(_mm512_packus_epi16(ab, cd)), _mm512_set1_epi8(char((1 << B) - 1)));
  if constexpr (B == 8) {
    _mm512_storeu_si512(out, v);
  } else if constexpr (B == 4) {
    const __m512i m = _mm512_maddubs_epi16(v, _mm512_set1_epi16(0x1001));  // v[2i] + 16 v[2i+1]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(m));
  } else {
    simd::store_code_bytes<B>(_mm512_castsi512_si256(v), out);
    simd::store_code_bytes<B>(_mm512_extracti64x4_epi64(v, 1), out + 4 * B);
  }
}
template <int B>
inline void store_codes32(__m512i ab, uint8_t* out) {
  simd::store_code_bytes<B>(_mm512_castsi512_si256(units_in_order(_mm512_packus_epi16(ab, ab))), out);
}
inline __m512i codes64_i8(__m512i ab, __m512i cd) {
  return _mm512_max_epi8(units_in_order(_mm512_packs_epi16(ab, cd)), _mm512_set1_epi8(-127));
}
inline void store_codes64_i8(__m512i ab, __m512i cd, int8_t* out) { _mm512_storeu_si512(out, codes64_i8(ab, cd)); }
inline void store_codes32_i8(__m512i ab, int8_t* out) {
  const __m256i v = _mm512_castsi512_si256(units_in_order(_mm512_packs_epi16(ab, ab)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_max_epi8(v, _mm256_set1_epi8(-127)));
}

// 16 codes (2 B bytes, as the packers lay them out) -> floats.
template <int B>
inline __m512 unpack16(const uint8_t* in) {
  if constexpr (B == 8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
  } else if constexpr (B == 4) {  // each byte twice, the low nibble from the first copy, the high from the second
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
    const __m512i v = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)),
                                        _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
  } else {
    return _mm512_insertf32x8(_mm512_castps256_ps512(simd::unpack8<B>(in)), simd::unpack8<B>(in + B), 1);
  }
}

}  // namespace agoq::simd512
AGOQ_AVX512_END
#endif

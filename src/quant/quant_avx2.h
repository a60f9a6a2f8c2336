// AVX2 (+FMA, F16C) helpers for the quantization kernels (empty unless AGOQ_AVX2). Private: only the kernels'
// .cpp files include it, so <immintrin.h> stays out of the public headers. Each helper mirrors a scalar one in
// simd.h or half.h bit for bit.
#pragma once
#include "core/simd_avx2.h"
#include "quant/simd.h"

#if AGOQ_AVX2
#include <immintrin.h>

#include <cstring>

namespace agoq::simd {

// Four Philox4x32 instances, one per 64-bit lane, each word in the lane's low 32 bits. _mm256_mul_epu32 reads
// only those low halves and returns the full 64-bit product, so hi and lo need one shift and no shuffles or blends;
// the high halves carry junk that is never read.
struct Philox4 {
  __m256i c0, c1, c2, c3;
};

// The key is xored into the previous low words first, off the critical path, so a round's chain is multiply,
// shift and one xor (5 cycles, not 6). The empty asm keeps the compiler from reassociating the xors back into a
// chain behind the shift.
inline void philox_round(Philox4& s, __m256i m0, __m256i m1, __m256i k0, __m256i k1) {
  __m256i x1 = _mm256_xor_si256(s.c1, k0), x3 = _mm256_xor_si256(s.c3, k1);
  asm("" : "+x"(x1), "+x"(x3));
  const __m256i p0 = _mm256_mul_epu32(s.c0, m0), p1 = _mm256_mul_epu32(s.c2, m1);
  s.c0 = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), x1);
  s.c2 = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), x3);
  s.c1 = p1, s.c3 = p0;
}

// The Philox key schedule and the tensor-id words, broadcast once per batch of chunks (not per call).
struct PhiloxKey8 {
  __m256i k0[10], k1[10], t0, t1;
  PhiloxKey8(uint64_t key, uint64_t ctr_hi) {
    uint32_t a = uint32_t(key), b = uint32_t(key >> 32);
    for (int r = 0; r < 10; ++r, a += 0x9E3779B9u, b += 0xBB67AE85u)
      k0[r] = _mm256_set1_epi32(int(a)), k1[r] = _mm256_set1_epi32(int(b));
    t0 = _mm256_set1_epi32(int(uint32_t(ctr_hi))), t1 = _mm256_set1_epi32(int(uint32_t(ctr_hi >> 32)));
  }
};

// Initial state of a chain of 4 instances on counters ctr + 0, 2, 4, 6 (the low word never carries: ctr % 8 < 2).
inline Philox4 philox_init(const PhiloxKey8& key, uint64_t ctr) {
  const __m256i lo = _mm256_set1_epi32(int(uint32_t(ctr))), hi = _mm256_set1_epi32(int(uint32_t(ctr >> 32)));
  return {_mm256_add_epi32(lo, _mm256_setr_epi32(0, 0, 2, 0, 4, 0, 6, 0)), hi, key.t0, key.t1};
}

// Philox4x32-10 on one chunk's 8 counters ctr + 0..7 (ctr % 8 == 0): even counters in one chain of 4 instances,
// odd ones in another, leaving word k of counter ctr + 2j (+1) in the low half of 64-bit lane j of even.ck
// (odd.ck). Two chains of 8 operations per round; the out-of-order core overlaps consecutive chunks. (Three or four
// chains would need more than the 16 ymm registers; the compiler's spills made them slower, not faster.)
inline void philox_chunk(const PhiloxKey8& key, uint64_t ctr, Philox4& even, Philox4& odd) {
  const __m256i m0 = _mm256_set1_epi32(int(0xD2511F53u)), m1 = _mm256_set1_epi32(int(0xCD9E8D57u));
  even = philox_init(key, ctr), odd = philox_init(key, ctr + 1);
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    philox_round(even, m0, m1, key.k0[round], key.k1[round]);
    philox_round(odd, m0, m1, key.k0[round], key.k1[round]);
  }
}

// The 128 random bytes of chunk c (Philox counters 8c .. 8c + 7) from its even (8c + 0, 2, 4, 6) and odd chain, in
// slot order: word k of all 8 counters is one vector, the counters' words in the order 0 2 1 3 | 4 6 5 7 (the low
// halves of even and odd picked by one shuffle); slot s of that order holds element unit rotl3(s), whose counter is
// rev3(rotl3(s)) = that order (simd.h).
inline void store_chunk(const Philox4& even, const Philox4& odd, uint8_t* out) {
  auto merge = [](__m256i e, __m256i o) {
    return _mm256_castps_si256(
        _mm256_shuffle_ps(_mm256_castsi256_ps(e), _mm256_castsi256_ps(o), _MM_SHUFFLE(2, 0, 2, 0)));
  };
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), merge(even.c0, odd.c0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), merge(even.c1, odd.c1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64), merge(even.c2, odd.c2));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 96), merge(even.c3, odd.c3));
}

// Fetches the cache line 8 KiB past p for writing: a kernel that writes fp32 (4 bytes per value) is bound by its
// stores' reads for ownership, which the hardware prefetchers do not start early. Measured on the Xeon, 1 thread,
// 64 MiB of AVX-512 stores: 7.1-8.6 GB/s plain, 10.6-11.6 with this (4 KiB ahead: 9.3-10.8). PREFETCHW in asm: the
// AVX2 target does not include it (-mprfchw), and CPUs without it execute it as a NOP.
inline void prefetch_for_write(const float* p) {
  asm volatile("prefetchw %0" : : "m"(*reinterpret_cast<const char*>(p + 2048)));
}

// 32 codes in order (4 vectors of 8 int32 lanes, each in [-1, 2^B]: the stochastic rounding of a value at the
// edge of the range can land one step outside) -> 4*B bytes, code j at bits [j*B, (j+1)*B) little-endian. The
// saturating packs clamp below at 0, min_epu8 above at 2^B - 1, as the scalar kernel's clamp does.
template <int B>
inline void store_code_bytes(__m256i v, uint8_t* out);

template <int B>
inline void pack32(__m256i a, __m256i b, __m256i c, __m256i d, uint8_t* out) {
  // packs/packus work within 128-bit halves: the bytes come out in 4-byte units a0 b0 c0 d0 a1 b1 c1 d1.
  __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  store_code_bytes<B>(v, out);
}

// The random bytes of 32 values in slot order (simd.h), widened to 16 bits in the order of packs_epi32(a, b) and
// packs_epi32(c, d): values 0-3, 8-11 | 4-7, 12-15 and 16-19, 24-27 | 20-23, 28-31, which are bytes 0-7 | 16-23
// and 8-15 | 24-31 of the slot order: one in-lane unpack each.
inline void bytes16x2(const uint8_t* r, __m256i& ab, __m256i& cd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)), z = _mm256_setzero_si256();
  ab = _mm256_unpacklo_epi8(v, z), cd = _mm256_unpackhi_epi8(v, z);
}

// Stochastic rounding and packing of 32 values in one: a..d hold T = round(256 t) (int32, 8 consecutive values
// each), r the 32 random bytes (slot order). quant_sr_round in 16-bit lanes: T saturated to [0, 65535] (exact for
// a valid code, T <= 256 (2^B - 1)), plus the byte with unsigned saturation, shifted right by 8. Then clamped and
// packed as pack32; the same codes as quant_sr_round followed by the clamp to [0, 2^B - 1].
template <int B>
inline void pack32_sr(__m256i a, __m256i b, __m256i c, __m256i d, const uint8_t* r, uint8_t* out) {
  __m256i rab, rcd;
  bytes16x2(r, rab, rcd);
  const __m256i ab = _mm256_srli_epi16(_mm256_adds_epu16(_mm256_packus_epi32(a, b), rab), 8);
  const __m256i cd = _mm256_srli_epi16(_mm256_adds_epu16(_mm256_packus_epi32(c, d), rcd), 8);
  __m256i v = _mm256_packus_epi16(ab, cd);  // 4-byte units a0 b0 c0 d0 a1 b1 c1 d1, as in pack32
  v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  store_code_bytes<B>(v, out);
}

// 32 codes as bytes in order, clamped above to 2^B - 1 and packed to 4*B bytes.
template <int B>
inline void store_code_bytes(__m256i v, uint8_t* out) {
  v = _mm256_min_epu8(v, _mm256_set1_epi8(char((1 << B) - 1)));
  if constexpr (B == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
  } else if constexpr (B == 4) {
    const __m256i m = _mm256_maddubs_epi16(v, _mm256_set1_epi16(0x1001));  // v[2i] + 16 v[2i+1]
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(m, m), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  } else if constexpr (B == 2) {
    const __m256i m = _mm256_maddubs_epi16(v, _mm256_set1_epi16(0x0401));   // 2 codes in 4 bits
    const __m256i q = _mm256_madd_epi16(m, _mm256_set1_epi32(0x00100001));  // 4 codes in 8 bits per int32
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i p =
        _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, pick), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  } else {
    static_assert(B == 3);
    const __m256i m = _mm256_maddubs_epi16(v, _mm256_set1_epi16(0x0801));  // 2 codes in 6 bits
    __m256i q = _mm256_madd_epi16(m, _mm256_set1_epi32(0x00400001));       // 4 codes in 12 bits per int32
    q = _mm256_or_si256(q, _mm256_srli_epi64(q, 20));                      // 8 codes in 24 bits per int64
    const __m256i pick = _mm256_setr_epi8(0, 1, 2, 8, 9, 10, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 1, 2, 8, 9, 10, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i p = _mm256_shuffle_epi8(q, pick);
    const uint64_t lo = uint64_t(_mm256_extract_epi64(p, 0)), hi = uint64_t(_mm256_extract_epi64(p, 2));
    std::memcpy(out, &lo, 6);
    std::memcpy(out + 6, &hi, 6);
  }
}

// 32 int32 codes in [-128, 127] -> 32 int8 clamped to [-127, 127] (the gradient format).
inline void pack32_i8(__m256i a, __m256i b, __m256i c, __m256i d, int8_t* out) {
  __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_max_epi8(v, _mm256_set1_epi8(-127)));
}

// Stochastic rounding for the gradient format: a..d hold T = round(256 t) (int32, |T| <= 127 * 256), r the 32
// random bytes (slot order). quant_sr_round in signed 16-bit lanes (T + byte <= 32767: no overflow), then as
// pack32_i8.
inline void pack32_i8_sr(__m256i a, __m256i b, __m256i c, __m256i d, const uint8_t* r, int8_t* out) {
  __m256i rab, rcd;
  bytes16x2(r, rab, rcd);
  const __m256i ab = _mm256_srai_epi16(_mm256_adds_epi16(_mm256_packs_epi32(a, b), rab), 8);
  const __m256i cd = _mm256_srai_epi16(_mm256_adds_epi16(_mm256_packs_epi32(c, d), rcd), 8);
  __m256i v = _mm256_packs_epi16(ab, cd);
  v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_max_epi8(v, _mm256_set1_epi8(-127)));
}

// 8 codes (B bytes, as pack32 lays them out) -> floats.
template <int B>
inline __m256 unpack8(const uint8_t* in) {
  if constexpr (B == 8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in))));
  } else {
    // Assembled in a register: a 3-byte memcpy into a stack word would stall on store forwarding.
    uint32_t w = uint32_t(in[0]) | (B > 1 ? uint32_t(in[1]) << 8 : 0u) | (B > 2 ? uint32_t(in[2]) << 16 : 0u) |
                 (B > 3 ? uint32_t(in[3]) << 24 : 0u);
    const __m256i s =
        _mm256_srlv_epi32(_mm256_set1_epi32(int(w)), _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B));
    return _mm256_cvtepi32_ps(_mm256_and_si256(s, _mm256_set1_epi32((1 << B) - 1)));
  }
}

}  // namespace agoq::simd
#endif

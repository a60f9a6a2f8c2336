#include "quant/group_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/half.h"
#include "quant/simd.h"
#include "quant/quant_avx2.h"
#include "quant/quant_avx512.h"

namespace agoq {
namespace {

constexpr uint16_t kF16NaN = 0x7E00;

// The group's scale, encoder constants and codes come from quant/quant_math.h (shared with the CUDA kernels).
using GroupParams = QuantGroupParams;

// The scalar quantizer of one value (the reference the AVX2 kernel reproduces bit for bit).
template <bool Stoch>
inline uint8_t quantize_one(float x, const GroupParams& p, float qmax, uint8_t r) {
  return Stoch ? quant_code_stochastic(x, p, qmax, r) : quant_code_nearest(x, p, qmax);
}

// Codes q[0..n) -> ceil(n * B / 8) bytes, code j at bits [j*B, (j+1)*B) of the little-endian bit stream.
template <int B>
void pack_scalar(const uint8_t* q, size_t n, uint8_t* out) {
  for (size_t j = 0; j < n; j += 8) {
    const size_t m = std::min<size_t>(8, n - j);
    uint64_t w = 0;
    for (size_t k = 0; k < m; ++k) w |= uint64_t(q[j + k]) << (k * B);
    const size_t bytes = (m * B + 7) / 8;
    for (size_t k = 0; k < bytes; ++k) out[j / 8 * B + k] = uint8_t(w >> (8 * k));
  }
}

template <int B>
void unpack_scalar(const uint8_t* in, size_t n, uint8_t* q) {
  for (size_t j = 0; j < n; j += 8) {
    const size_t m = std::min<size_t>(8, n - j), bytes = (m * B + 7) / 8;
    uint64_t w = 0;
    for (size_t k = 0; k < bytes; ++k) w |= uint64_t(in[j / 8 * B + k]) << (8 * k);
    for (size_t k = 0; k < m; ++k) q[j + k] = uint8_t((w >> (k * B)) & ((1u << B) - 1));
  }
}

// A group that cannot be represented: zero codes and NaN scale/min, so it decodes to NaN, never to plausible values.
QuantStatus mark_bad_group(const float* x, size_t n, int bits, uint8_t* codes, uint16_t* scale, float* min) {
  std::memset(codes, 0, (n * bits + 7) / 8);
  *scale = kF16NaN;
  if (min) *min = NAN;
  QuantStatus st;
  for (size_t j = 0; j < n; ++j) st.nonfinite += !std::isfinite(x[j]);
  st.overflow_groups = st.nonfinite == 0;
  return st;
}

template <int B, bool Stoch>
QuantStatus encode_group_scalar(const float* x, size_t n, bool sym, const uint8_t* r, uint8_t* codes, uint16_t* scale,
                                float* min) {
  float lo = INFINITY, hi = -INFINITY;
  bool bad = false;
  for (size_t j = 0; j < n; ++j) {
    bad |= !std::isfinite(x[j]);
    lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  }
  GroupParams p;
  if (bad || !quant_group_params(B, sym, lo + 0.f, hi + 0.f, p)) return mark_bad_group(x, n, B, codes, scale, min);
  const float qmax = float((1 << B) - 1);
  uint8_t q[256];
  for (size_t j = 0; j < n; ++j) q[j] = quantize_one<Stoch>(x[j], p, qmax, Stoch ? r[quant_random_slot(j)] : 0);
  pack_scalar<B>(q, n, codes);
  *scale = p.h;
  if (min) *min = p.offset;
  return {};
}

template <int B>
void decode_group_scalar(const uint8_t* codes, size_t n, float scale, float offset, float* out) {
  uint8_t q[256];
  unpack_scalar<B>(codes, n, q);
  for (size_t j = 0; j < n; ++j) out[j] = quant_code_decode(q[j], scale, offset);
}

#if AGOQ_AVX2
// Pass 1's integer extrema of a group (group_extrema_bits below), per lane.
struct LaneBits {
  __m256i smax, umax, umin;
};

namespace avx2 {

using RandomKey = simd::PhiloxKey8;  // the key schedule is 20 broadcasts: built once per row
constexpr QuantRandomLayout kLayout = QuantRandomLayout::avx2;
constexpr size_t kPrefetchAhead = 4096 / sizeof(float);  // group_quant_batch.h's prefetch_group
inline void random_chunks(const RandomKey& key, uint64_t chunk, size_t n, uint8_t* out) {
  for (size_t c = 0; c < n; ++c, out += kQuantRandomChunk) {
    simd::Philox4 even, odd;
    simd::philox_chunk(key, (chunk + c) * 8, even, odd);
    simd::store_chunk(even, odd, out);
  }
}

// Pass 1, symmetric: max |x| as integer max of the bit patterns with the sign cleared (monotone for non-negative
// floats), which also flags NaN/Inf (patterns >= 0x7F800000) for free. Two accumulators (one chain would be bound
// by latency, not by loads). Returns the per-lane maxima (reduced across groups later).
inline __m256 group_amax_bits(const float* x, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  auto bits8 = [&](size_t k) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k)), abs_mask);
  };
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) m0 = _mm256_max_epi32(m0, bits8(j)), m1 = _mm256_max_epi32(m1, bits8(j + 8));
  for (; j + 8 <= n; j += 8) m0 = _mm256_max_epi32(m0, bits8(j));
  uint32_t tail = 0;
  for (; j < n; ++j) tail = std::max(tail, std::bit_cast<uint32_t>(x[j]) & 0x7FFFFFFFu);
  return _mm256_castsi256_ps(_mm256_max_epi32(_mm256_max_epi32(m0, m1), _mm256_set1_epi32(int(tail))));
}

// Pass 1, asymmetric: min and max from integer extrema of the bit patterns, two operations per vector where float
// min and max need a third for the non-finite check (measured: stochastic int4/int8 asym 4-5% faster per value in
// cache, 1 thread, on mixed-sign data). Read as signed, the floats >= +0 are in order and above all negative ones: if
// the group has a value
// >= +0, its max is smax. Read as unsigned, the negative floats (sign bit set) are in order of magnitude and above
// all others: if the group has a negative value, its min is umax. So a group with both signs (most activation
// groups) needs two integer maxima per vector, like the symmetric pass. A group of one sign has its other extreme at
// the unsigned minimum umin (non-negative: both readings agree; negative: the smallest magnitude); Umin adds it
// (batch_stats decides when). NaN patterns rank above everything of their sign, so a NaN becomes the min or max, as
// does an Inf: either makes the range non-finite, which marks the group bad.
template <bool Umin>
inline LaneBits group_extrema_bits(const float* x, size_t n) {
  __m256i s0 = _mm256_set1_epi32(INT32_MIN), s1 = s0, u0 = _mm256_setzero_si256(), u1 = u0, m0 = _mm256_set1_epi32(-1),
          m1 = m0;
  auto add = [&](__m256i& s, __m256i& u, __m256i& m, __m256i v) {
    s = _mm256_max_epi32(s, v), u = _mm256_max_epu32(u, v);
    if constexpr (Umin) m = _mm256_min_epu32(m, v);
  };
  auto bits8 = [&](size_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k)); };
  size_t j = 0;
  for (; j + 16 <= n; j += 16) add(s0, u0, m0, bits8(j)), add(s1, u1, m1, bits8(j + 8));
  for (; j + 8 <= n; j += 8) add(s0, u0, m0, bits8(j));
  for (; j < n; ++j) add(s0, u0, m0, _mm256_set1_epi32(std::bit_cast<int32_t>(x[j])));
  return {_mm256_max_epi32(s0, s1), _mm256_max_epu32(u0, u1), _mm256_min_epu32(m0, m1)};
}

// Pass 2: quantize and pack one group (its values are still in L1 from pass 1). Sub: p.sub != 0 (else the
// subtraction is skipped: x - 0 = x).
template <int B, bool Stoch, bool Sub>
void quantize_group(const float* x, size_t n, const GroupParams& p, const uint8_t* r, uint8_t* codes) {
  const __m256 sub = _mm256_set1_ps(p.sub), inv = _mm256_set1_ps(Stoch ? p.inv256 : p.inv),
               add = _mm256_set1_ps(Stoch ? p.add256 : p.add);
  // Codes before clamping; pack32 clamps to [0, 2^B - 1] exactly like quantize_one. cvtps rounds to nearest even
  // (the default MXCSR mode, as rintf).
  auto code8 = [&](size_t k) {
    __m256 v = _mm256_loadu_ps(x + k);
    if constexpr (Sub) v = _mm256_sub_ps(v, sub);
    return _mm256_cvtps_epi32(_mm256_fmadd_ps(v, inv, add));
  };
  size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    uint8_t* out = codes + j / 8 * B;
    if constexpr (Stoch) simd::pack32_sr<B>(code8(j), code8(j + 8), code8(j + 16), code8(j + 24), r + j, out);
    else simd::pack32<B>(code8(j), code8(j + 8), code8(j + 16), code8(j + 24), out);
  }
  if (j < n) {  // the short last group of a row whose length is not a multiple of 32
    uint8_t q[32];
    const float qmax = float((1 << B) - 1);
    for (size_t k = j; k < n; ++k) q[k - j] = quantize_one<Stoch>(x[k], p, qmax, Stoch ? r[quant_random_slot(k)] : 0);
    pack_scalar<B>(q, n - j, codes + j / 8 * B);
  }
}

template <int B>
void decode_group(const uint8_t* codes, size_t n, float scale, float offset, float* out) {
  const __m256 s = _mm256_set1_ps(scale), o = _mm256_set1_ps(offset);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    if (j % 16 == 0) simd::prefetch_for_write(out + j);
    _mm256_storeu_ps(out + j, _mm256_fmadd_ps(simd::unpack8<B>(codes + j / 8 * B), s, o));
  }
  if (j < n) decode_group_scalar<B>(codes + j / 8 * B, n - j, scale, offset, out + j);
}

#include "quant/group_quant_batch.h"

}  // namespace avx2
#endif

#if AGOQ_AVX512
AGOQ_AVX512_BEGIN
namespace avx512 {

using RandomKey = simd512::PhiloxKey16;
constexpr QuantRandomLayout kLayout = QuantRandomLayout::avx512;
constexpr size_t kPrefetchAhead = 4096 / sizeof(float);
inline void random_chunks(const RandomKey& key, uint64_t chunk, size_t n, uint8_t* out) {
  simd512::philox_chunks(key, chunk, n, out);
}

// Pass 1 as avx2::group_amax_bits, 16 values per vector; the last values (< 16) by the AVX2 pass.
inline __m256 group_amax_bits(const float* x, size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  auto bits16 = [&](size_t k) { return _mm512_and_si512(_mm512_loadu_si512(x + k), abs_mask); };
  __m512i m0 = _mm512_setzero_si512(), m1 = m0;
  size_t j = 0;
  for (; j + 32 <= n; j += 32) m0 = _mm512_max_epi32(m0, bits16(j)), m1 = _mm512_max_epi32(m1, bits16(j + 16));
  for (; j + 16 <= n; j += 16) m0 = _mm512_max_epi32(m0, bits16(j));
  const __m512i m = _mm512_max_epi32(m0, m1);
  const __m256i m8 = _mm256_max_epi32(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
  return _mm256_castsi256_ps(_mm256_max_epi32(m8, _mm256_castps_si256(avx2::group_amax_bits(x + j, n - j))));
}

// Pass 1 as avx2::group_extrema_bits, 16 values per vector.
template <bool Umin>
inline LaneBits group_extrema_bits(const float* x, size_t n) {
  __m512i s0 = _mm512_set1_epi32(INT32_MIN), s1 = s0, u0 = _mm512_setzero_si512(), u1 = u0, m0 = _mm512_set1_epi32(-1),
          m1 = m0;
  auto add = [&](__m512i& s, __m512i& u, __m512i& m, __m512i v) {
    s = _mm512_max_epi32(s, v), u = _mm512_max_epu32(u, v);
    if constexpr (Umin) m = _mm512_min_epu32(m, v);
  };
  auto bits16 = [&](size_t k) { return _mm512_loadu_si512(x + k); };
  size_t j = 0;
  for (; j + 32 <= n; j += 32) add(s0, u0, m0, bits16(j)), add(s1, u1, m1, bits16(j + 16));
  for (; j + 16 <= n; j += 16) add(s0, u0, m0, bits16(j));
  const LaneBits t = avx2::group_extrema_bits<Umin>(x + j, n - j);
  const __m512i s = _mm512_max_epi32(s0, s1), u = _mm512_max_epu32(u0, u1), m = _mm512_min_epu32(m0, m1);
  auto lo = [](__m512i v) { return _mm512_castsi512_si256(v); };
  auto hi = [](__m512i v) { return _mm512_extracti64x4_epi64(v, 1); };
  return {_mm256_max_epi32(_mm256_max_epi32(lo(s), hi(s)), t.smax),
          _mm256_max_epu32(_mm256_max_epu32(lo(u), hi(u)), t.umax),
          _mm256_min_epu32(_mm256_min_epu32(lo(m), hi(m)), t.umin)};
}

// Pass 2 as avx2::quantize_group, 64 values per step; the random bytes in quant_random_slot512 order.
template <int B, bool Stoch, bool Sub>
void quantize_group(const float* x, size_t n, const GroupParams& p, const uint8_t* r, uint8_t* codes) {
  const __m512 sub = _mm512_set1_ps(p.sub), inv = _mm512_set1_ps(Stoch ? p.inv256 : p.inv),
               add = _mm512_set1_ps(Stoch ? p.add256 : p.add);
  auto code16 = [&](size_t k) {
    __m512 v = _mm512_loadu_ps(x + k);
    if constexpr (Sub) v = _mm512_sub_ps(v, sub);
    return _mm512_cvtps_epi32(_mm512_fmadd_ps(v, inv, add));
  };
  auto codes32 = [&](size_t k) {  // values k .. k + 31 as 16-bit lanes
    if constexpr (Stoch) return simd512::codes16_sr(code16(k), code16(k + 16), r + k);
    else return simd512::codes16(code16(k), code16(k + 16));
  };
  size_t j = 0;
  for (; j + 64 <= n; j += 64) simd512::store_codes64<B>(codes32(j), codes32(j + 32), codes + j / 8 * B);
  if (j + 32 <= n) simd512::store_codes32<B>(codes32(j), codes + j / 8 * B), j += 32;
  if (j < n) {  // the short last group of a row whose length is not a multiple of 32
    uint8_t q[32];
    const float qmax = float((1 << B) - 1);
    for (size_t k = j; k < n; ++k)
      q[k - j] = quantize_one<Stoch>(x[k], p, qmax, Stoch ? r[quant_random_slot512(k)] : 0);
    pack_scalar<B>(q, n - j, codes + j / 8 * B);
  }
}

template <int B>
void decode_group(const uint8_t* codes, size_t n, float scale, float offset, float* out) {
  const __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset);
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    simd::prefetch_for_write(out + j);
    _mm512_storeu_ps(out + j, _mm512_fmadd_ps(simd512::unpack16<B>(codes + j / 8 * B), s, o));
  }
  if (j < n) avx2::decode_group<B>(codes + j / 8 * B, n - j, scale, offset, out + j);
}

#include "quant/group_quant_batch.h"

}  // namespace avx512
AGOQ_AVX512_END
#endif

template <int B, bool Stoch>
QuantStatus encode_row(const QuantFormat& f, const float* x, size_t cols, const QuantView& row, const QuantSeed& seed,
                       uint64_t first, bool simd) {
#if AGOQ_AVX512
  if (simd && quant_avx512_enabled())
    return f.symmetric ? avx512::encode_row_simd<B, Stoch, true>(f, x, cols, row, seed, first)
                       : avx512::encode_row_simd<B, Stoch, false>(f, x, cols, row, seed, first);
#endif
#if AGOQ_AVX2
  if (simd)
    return f.symmetric ? avx2::encode_row_simd<B, Stoch, true>(f, x, cols, row, seed, first)
                       : avx2::encode_row_simd<B, Stoch, false>(f, x, cols, row, seed, first);
#endif
  QuantStatus st;
  QuantRandomBytes rb(seed, false);
  uint8_t tmp[256];
  const size_t G = size_t(f.group);
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    const uint8_t* r = Stoch ? rb.get(first + c, n, tmp) : nullptr;
    st += encode_group_scalar<B, Stoch>(x + c, n, f.symmetric, r, row.codes + c / 8 * B, row.scales + g,
                                        f.symmetric ? nullptr : row.mins + g);
  }
  return st;
}

template <int B>
void decode_row(const QuantFormat& f, const QuantConstView& row, size_t cols, float* out, bool simd) {
  const size_t G = size_t(f.group);
  const bool avx512 = simd && quant_avx512_enabled();
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    // The scale is decoded by the same routine on both paths (F16C and portable agree; tested).
    const float scale = f16_to_f32(row.scales[g]);
    const float offset = quant_int_offset(B, f.symmetric, scale, f.symmetric ? 0.f : row.mins[g]);
#if AGOQ_AVX512
    if (avx512) {
      avx512::decode_group<B>(row.codes + c / 8 * B, n, scale, offset, out + c);
      continue;
    }
#endif
#if AGOQ_AVX2
    if (simd) {
      avx2::decode_group<B>(row.codes + c / 8 * B, n, scale, offset, out + c);
      continue;
    }
#endif
    decode_group_scalar<B>(row.codes + c / 8 * B, n, scale, offset, out + c);
  }
}

}  // namespace

QuantStatus quant_int_encode_row(const QuantFormat& f, const float* x, size_t cols, const QuantView& row,
                                 const QuantSeed& seed, uint64_t first, bool simd) {
  const bool sr = f.rounding == QuantRounding::stochastic;
  switch (f.bits) {
    case 2:
      return sr ? encode_row<2, true>(f, x, cols, row, seed, first, simd)
                : encode_row<2, false>(f, x, cols, row, seed, first, simd);
    case 3:
      return sr ? encode_row<3, true>(f, x, cols, row, seed, first, simd)
                : encode_row<3, false>(f, x, cols, row, seed, first, simd);
    case 4:
      return sr ? encode_row<4, true>(f, x, cols, row, seed, first, simd)
                : encode_row<4, false>(f, x, cols, row, seed, first, simd);
    case 8:
      return sr ? encode_row<8, true>(f, x, cols, row, seed, first, simd)
                : encode_row<8, false>(f, x, cols, row, seed, first, simd);
  }
  fail("quant_int_encode_row: bad bits ", f.bits);
}

void quant_int_decode_row(const QuantFormat& f, const QuantConstView& row, size_t cols, float* out, bool simd) {
  switch (f.bits) {
    case 2: return decode_row<2>(f, row, cols, out, simd);
    case 3: return decode_row<3>(f, row, cols, out, simd);
    case 4: return decode_row<4>(f, row, cols, out, simd);
    case 8: return decode_row<8>(f, row, cols, out, simd);
  }
  fail("quant_int_decode_row: bad bits ", f.bits);
}

}  // namespace agoq

#include "quant/group_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/half.h"
#include "quant/simd.h"
#include "quant/simd_avx2.h"

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
// The AVX2 encoder works on batches of up to 8 groups: pass 1 (statistics) for each group, the 8 groups' scales in
// one vector computation (one chain of divisions and fp16 conversions per batch instead of per group), then pass 2
// (quantize and pack) for each group, its values still in L1.

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
struct LaneBits {
  __m256i smax, umax, umin;
};
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

// Horizontal reduction of 8 vectors at once: lane g of the result = op over the 8 lanes of v[g]. Lanes of
// different inputs never mix, so a NaN in one group stays in its lane.
template <class Op>
inline __m256 reduce8x8(const __m256* v, Op op) {
  auto pair = [&](__m256 a, __m256 b) { return op(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); };
  const __m256 a01 = pair(v[0], v[1]), a23 = pair(v[2], v[3]), a45 = pair(v[4], v[5]), a67 = pair(v[6], v[7]);
  auto quad = [&](__m256 a, __m256 b) {
    return op(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  };
  const __m256 b0 = quad(a01, a23), b1 = quad(a45, a67);  // [g0..g3 | g0..g3] halves, [g4..g7 | g4..g7]
  return op(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

// The scales and encoder constants of up to 8 groups, as quant_group_params computes them one by one (same
// operations, F16C for the fp16 rounding; tested to agree with the portable conversion).
struct BatchParams {
  alignas(32) float lo[8], range[8], inv[8];
  alignas(16) uint16_t h[8];
  int ok;  // bit g: group g is representable (finite, scale fits fp16)
};

template <int B, bool Sym>
inline void batch_params(__m256 lo, __m256 hi, __m256 bad_or_amax, BatchParams& bp) {
  const __m256 zero = _mm256_setzero_ps(), qmax = _mm256_set1_ps(float((1 << B) - 1));
  __m256 range, bad;
  if constexpr (Sym) {  // bad_or_amax: max |x| bit patterns
    range = _mm256_mul_ps(_mm256_set1_ps(2.f), bad_or_amax);
    bad = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(bad_or_amax), _mm256_set1_epi32(0x7F7FFFFF)));
  } else {
    lo = _mm256_add_ps(lo, zero), hi = _mm256_add_ps(hi, zero);  // -0 -> +0, as the scalar kernel
    range = _mm256_sub_ps(hi, lo);
    bad = _mm256_cmp_ps(bad_or_amax, bad_or_amax, _CMP_UNORD_Q);
  }
  const __m256 d = _mm256_add_ps(_mm256_div_ps(range, qmax), zero);
  const __m128i h = _mm256_cvtps_ph(d, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  const __m256 scale = _mm256_cvtph_ps(h);
  bad = _mm256_or_ps(bad, simd::nonfinite8(scale));  // h >= 0x7C00: the step does not fit fp16
  const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.f), scale), _mm256_cmp_ps(scale, zero, _CMP_GT_OQ));
  _mm_store_si128(reinterpret_cast<__m128i*>(bp.h), h);
  _mm256_store_ps(bp.inv, inv);
  if constexpr (!Sym) _mm256_store_ps(bp.lo, lo), _mm256_store_ps(bp.range, range);
  bp.ok = ~_mm256_movemask_ps(bad) & 0xFF;
}

// Pass 2: quantize and pack one group (its values are still in L1 from pass 1). Sub: p.sub != 0 (else the
// subtraction is skipped: x - 0 = x).
template <int B, bool Stoch, bool Sub>
void quantize_group_avx2(const float* x, size_t n, const GroupParams& p, const uint8_t* r, uint8_t* codes) {
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

// Stochastic rounding: pass 1 prefetches (into L1) the input this far ahead of the group it scans. Its loads come
// in short bursts (one group) between Philox chunks, too sparse for the hardware prefetchers to keep L1 ahead, so
// without this each burst waited on L2/memory: `agoq bench quant` (2 threads, 64 MiB) takes 15-20% longer without
// it; 2-3 KiB ahead measured best (4-6 KiB: worse; with the earlier pipelined batch loop also 1 KiB: no gain, into
// L2 only: half the gain). The nearest kernel streams without it (there the prefetches only cost issue slots).
constexpr size_t kPrefetchAhead = 2048 / sizeof(float);

inline void prefetch_group(const float* x, size_t n) {
  for (size_t j = 0; j < n; j += 64 / sizeof(float))
    _mm_prefetch(reinterpret_cast<const char*>(x + j + kPrefetchAhead), _MM_HINT_T0);  // never faults
}

// Pass 1 and the scales of the batch of groups [g0, g0 + 8) (fewer at the end of the row). after_group(k) runs
// after group k's pass 1 (the stochastic kernel generates its random bytes there; measured 1-2% faster per value in
// cache than before it). Asymmetric: one_sign says whether the previous batch had groups of one sign; if so this one
// computes umin in pass 1 (the next groups are likely alike: all-positive tensors such as softmax outputs), else it
// computes umin afterwards for such groups only, in a second pass (L1 hits).
template <int B, bool Sym, bool Prefetch, class F>
void batch_stats(const float* x, size_t cols, size_t G, size_t g0, size_t ng, BatchParams& bp, bool& one_sign,
                 F&& after_group) {
  __m256 a[8], b[8], c[8];
  for (size_t k = 0; k < 8; ++k) {
    const size_t c0 = (g0 + k) * G, n = k < ng ? std::min(G, cols - c0) : 0;
    if (Prefetch) prefetch_group(x + c0, n);
    if constexpr (Sym) {
      a[k] = group_amax_bits(x + c0, n);
    } else {
      const LaneBits lb = one_sign ? group_extrema_bits<true>(x + c0, n) : group_extrema_bits<false>(x + c0, n);
      a[k] = _mm256_castsi256_ps(lb.smax), b[k] = _mm256_castsi256_ps(lb.umax), c[k] = _mm256_castsi256_ps(lb.umin);
    }
    if (k < ng) after_group(k);
  }
  auto op = [](auto f) {
    return [f](__m256 u, __m256 v) { return _mm256_castsi256_ps(f(_mm256_castps_si256(u), _mm256_castps_si256(v))); };
  };
  const auto smax_op = op([](__m256i u, __m256i v) { return _mm256_max_epi32(u, v); });
  if constexpr (Sym) {
    const __m256 amax = reduce8x8(a, smax_op);
    batch_params<B, true>(amax, amax, amax, bp);
  } else {
    const __m256 smax = reduce8x8(a, smax_op);
    const __m256 umax = reduce8x8(b, op([](__m256i u, __m256i v) { return _mm256_max_epu32(u, v); }));
    // Sign bits: smax's is clear iff the group has a value >= +0, umax's set iff it has a negative one.
    const int one_signed = ~_mm256_movemask_ps(_mm256_andnot_ps(smax, umax)) & ((1 << ng) - 1);
    if (!one_signed) {
      one_sign = false;
      return batch_params<B, false>(umax, smax, _mm256_setzero_ps(), bp);  // lo, hi
    }
    if (!one_sign)  // umin not computed: a second pass over the groups of one sign
      for (size_t k = 0; k < ng; ++k) {
        const size_t c0 = (g0 + k) * G;
        if (one_signed >> k & 1)
          c[k] = _mm256_castsi256_ps(group_extrema_bits<true>(x + c0, std::min(G, cols - c0)).umin);
      }
    one_sign = true;
    const __m256 umin = reduce8x8(c, op([](__m256i u, __m256i v) { return _mm256_min_epu32(u, v); }));
    batch_params<B, false>(_mm256_blendv_ps(umin, umax, umax), _mm256_blendv_ps(smax, umin, smax), _mm256_setzero_ps(),
                           bp);
  }
}

// The random bytes of one batch of groups (stochastic rounding): the whole Philox chunks that cover it, in slot
// order, generated straight into a fixed buffer, so there is no sliding window to manage: no calls, no moves, no
// bounds checks in the loop.
struct BatchRandom {
  // 8 groups of at most 256 values, plus a partial chunk at each end when the batch does not start on a chunk.
  static constexpr size_t kBytes = 8 * 256 + 2 * kQuantRandomChunk;
  uint64_t base = 0, next = 0;  // element index of bytes[0] and of the first byte not yet generated (chunk multiples)
  alignas(32) uint8_t bytes[kBytes];

  void start(uint64_t first) { base = next = first / kQuantRandomChunk * kQuantRandomChunk; }
  // Generates the chunks up to element `end` (exclusive).
  void generate(const simd::PhiloxKey8& key, uint64_t end) {
    for (; next < end; next += kQuantRandomChunk) {
      simd::Philox4 even, odd;
      simd::philox_chunk(key, next / kQuantRandomChunk * 8, even, odd);
      simd::store_chunk(even, odd, bytes + (next - base));
    }
  }
  // The bytes of group [i, i + n) as a block (quant_random_block; tmp: 256 bytes).
  const uint8_t* block(uint64_t i, size_t n, uint8_t* tmp) const { return quant_random_block(bytes, base, i, n, tmp); }
};

// Batch by batch: pass 1 and the scales of a batch, then its pass 2. (Issuing pass 1 and the scales of batch b + 1
// before pass 2 of batch b, so that the scale chain overlaps pass 2, measured no faster in cache, 1 thread, and
// 10-15% slower for stochastic rounding in `agoq bench quant` (2 threads, 64 MiB), with two random buffers in flight.)
// Stochastic rounding: each group's random bytes are generated just after its pass 1, whose few loads and integer
// operations fill the issue slots that Philox's latency-bound multiply chains leave idle.
template <int B, bool Stoch, bool Sym>
QuantStatus encode_row_avx2(const QuantFormat& f, const float* x, size_t cols, const QuantView& row,
                            const QuantSeed& seed, uint64_t first) {
  QuantStatus st;
  const size_t G = size_t(f.group), groups = (cols + G - 1) / G;
  BatchParams p8;
  bool one_sign = true;  // asymmetric: the last batch had groups of one sign (batch_stats); assumed for the first
  // Only the stochastic kernel touches these (the key schedule is 20 broadcasts: built once per row).
  BatchRandom rnd;
  alignas(32) uint8_t misaligned[Stoch ? 256 : 1];  // a group's bytes when the row does not start on 32 elements
  const simd::PhiloxKey8 key(Stoch ? seed.seed : 0, Stoch ? seed.tensor_id : 0);
  for (size_t g0 = 0; g0 < groups; g0 += 8) {
    const size_t ng = std::min<size_t>(8, groups - g0);
    batch_stats<B, Sym, Stoch>(x, cols, G, g0, ng, p8, one_sign, [&](size_t k) {  // after pass 1 of group g0 + k
      if constexpr (Stoch) {
        if (k == 0) rnd.start(first + g0 * G);
        rnd.generate(key, first + std::min(cols, (g0 + k + 1) * G));  // its random bytes
      }
    });
    for (size_t k = 0; k < ng; ++k) {
      const size_t g = g0 + k, c0 = g * G, n = std::min(G, cols - c0);
      uint8_t* codes = row.codes + c0 / 8 * B;
      float* min = Sym ? nullptr : row.mins + g;
      if (!(p8.ok >> k & 1)) {
        st += mark_bad_group(x + c0, n, B, codes, row.scales + g, min);
        continue;
      }
      GroupParams p;
      quant_group_encoder(B, Sym, Sym ? 0.f : p8.lo[k], Sym ? 0.f : p8.range[k], p8.inv[k], p);
      const uint8_t* r = Stoch ? rnd.block(first + c0, n, misaligned) : nullptr;
      if (Sym || p.sub == 0.f) quantize_group_avx2<B, Stoch, false>(x + c0, n, p, r, codes);
      else quantize_group_avx2<B, Stoch, true>(x + c0, n, p, r, codes);
      row.scales[g] = p8.h[k];
      if (min) *min = p8.lo[k];
    }
  }
  return st;
}

template <int B>
void decode_group_avx2(const uint8_t* codes, size_t n, float scale, float offset, float* out) {
  const __m256 s = _mm256_set1_ps(scale), o = _mm256_set1_ps(offset);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, _mm256_fmadd_ps(simd::unpack8<B>(codes + j / 8 * B), s, o));
  if (j < n) decode_group_scalar<B>(codes + j / 8 * B, n - j, scale, offset, out + j);
}
#endif

template <int B, bool Stoch>
QuantStatus encode_row(const QuantFormat& f, const float* x, size_t cols, const QuantView& row, const QuantSeed& seed,
                       uint64_t first, bool simd) {
#if AGOQ_AVX2
  if (simd)
    return f.symmetric ? encode_row_avx2<B, Stoch, true>(f, x, cols, row, seed, first)
                       : encode_row_avx2<B, Stoch, false>(f, x, cols, row, seed, first);
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
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    // The scale is decoded by the same routine on both paths (F16C and portable agree; tested).
    const float scale = f16_to_f32(row.scales[g]);
    const float offset = quant_int_offset(B, f.symmetric, scale, f.symmetric ? 0.f : row.mins[g]);
#if AGOQ_AVX2
    if (simd) {
      decode_group_avx2<B>(row.codes + c / 8 * B, n, scale, offset, out + c);
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

#include "quant/group_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/simd.h"
#include "quant/simd_avx2.h"

namespace agoq {
namespace {

constexpr uint16_t kF16NaN = 0x7E00;

struct GroupParams {
  uint16_t h;  // fp16 scale as stored
  float scale, offset, inv;
};

// Step Δ = range / (2^b - 1), rounded *up* to fp16 so that every value maps into [0, 2^b - 1] (error <= Δ_h / 2
// with Δ_h < Δ (1 + 2^-10) + 2^-24). False when Δ does not fit fp16. lo/hi are the group's finite min/max.
template <bool F16C>
bool group_params(int bits, bool sym, float lo, float hi, GroupParams& p) {
  const float qmax = float((1 << bits) - 1);
  const float range = sym ? 2.f * std::max(-lo, hi) : hi - lo;
  const float d = range / qmax + 0.f;  // + 0: -0 -> +0 (F16C would keep the sign bit)
#if AGOQ_QUANT_AVX2
  p.h = F16C ? simd::f32_to_f16_up_f16c(d) : f32_to_f16_up(d);
  p.scale = F16C ? simd::f16_to_f32_f16c(p.h) : f16_to_f32(p.h);
#else
  p.h = f32_to_f16_up(d);
  p.scale = f16_to_f32(p.h);
#endif
  if (p.h >= 0x7C00) return false;
  p.offset = quant_int_offset(bits, sym, p.scale, lo);
  p.inv = p.scale > 0 ? 1.f / p.scale : 0.f;
  return true;
}

// The scalar quantizer of one value (the reference the AVX2 kernel reproduces). The fma is explicit in both so
// that compiler contraction cannot make the two paths differ.
template <bool Stoch>
inline uint8_t quantize_one(float x, const GroupParams& p, float qmax, float r) {
  float t = Stoch ? std::floor(std::fma(x - p.offset, p.inv, r)) : std::nearbyint((x - p.offset) * p.inv);
  t = t < 0.f ? 0.f : (t > qmax ? qmax : t);
  return uint8_t(t);
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
QuantStatus encode_group_scalar(const float* x, size_t n, bool sym, const float* r, uint8_t* codes, uint16_t* scale,
                                float* min) {
  float lo = INFINITY, hi = -INFINITY;
  bool bad = false;
  for (size_t j = 0; j < n; ++j) {
    bad |= !std::isfinite(x[j]);
    lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  }
  GroupParams p;
  if (bad || !group_params<false>(B, sym, lo + 0.f, hi + 0.f, p)) return mark_bad_group(x, n, B, codes, scale, min);
  const float qmax = float((1 << B) - 1);
  uint8_t q[256];
  for (size_t j = 0; j < n; ++j) q[j] = quantize_one<Stoch>(x[j], p, qmax, Stoch ? r[j] : 0.f);
  pack_scalar<B>(q, n, codes);
  *scale = p.h;
  if (min) *min = p.offset;
  return {};
}

template <int B>
void decode_group_scalar(const uint8_t* codes, size_t n, float scale, float offset, float* out) {
  uint8_t q[256];
  unpack_scalar<B>(codes, n, q);
  for (size_t j = 0; j < n; ++j) out[j] = std::fma(float(q[j]), scale, offset);
}

#if AGOQ_QUANT_AVX2
struct GroupStats {
  float lo, hi;
  bool bad;
};

// Pass 1: min, max and non-finite over one group. Two accumulators each (one chain would be bound by the
// min/max/fma latency, not by loads); named variables, as arrays of vectors may be kept on the stack.
inline GroupStats group_stats_avx2(const float* x, size_t n) {
  const __m256 inf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
  __m256 lo0 = inf, lo1 = inf, hi0 = ninf, hi1 = ninf, bad0 = _mm256_setzero_ps(), bad1 = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
    lo0 = _mm256_min_ps(lo0, v0), hi0 = _mm256_max_ps(hi0, v0), bad0 = simd::nonfinite_acc8(bad0, v0);
    lo1 = _mm256_min_ps(lo1, v1), hi1 = _mm256_max_ps(hi1, v1), bad1 = simd::nonfinite_acc8(bad1, v1);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 v0 = _mm256_loadu_ps(x + j);
    lo0 = _mm256_min_ps(lo0, v0), hi0 = _mm256_max_ps(hi0, v0), bad0 = simd::nonfinite_acc8(bad0, v0);
  }
  GroupStats st{simd::hmin8(_mm256_min_ps(lo0, lo1)), simd::hmax8(_mm256_max_ps(hi0, hi1)),
                simd::any_nan8(_mm256_add_ps(bad0, bad1))};
  for (; j < n; ++j) {
    st.bad |= !std::isfinite(x[j]);
    st.lo = std::min(st.lo, x[j]), st.hi = std::max(st.hi, x[j]);
  }
  return st;
}

// Pass 2: quantize and pack one group (its values are still in L1 from pass 1).
template <int B, bool Stoch>
void quantize_group_avx2(const float* x, size_t n, const GroupParams& p, const float* r, uint8_t* codes) {
  const __m256 off = _mm256_set1_ps(p.offset), inv = _mm256_set1_ps(p.inv);
  // Codes before clamping; pack32 clamps to [0, 2^B - 1] exactly like quantize_one.
  auto code8 = [&](size_t k) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + k), off);
    return _mm256_cvttps_epi32(Stoch ? _mm256_floor_ps(_mm256_fmadd_ps(d, inv, _mm256_loadu_ps(r + k)))
                                     : _mm256_round_ps(_mm256_mul_ps(d, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  size_t j = 0;
  for (; j + 32 <= n; j += 32) simd::pack32<B>(code8(j), code8(j + 8), code8(j + 16), code8(j + 24), codes + j / 8 * B);
  if (j < n) {  // the short last group of a row whose length is not a multiple of 32
    uint8_t q[32];
    const float qmax = float((1 << B) - 1);
    for (size_t k = j; k < n; ++k) q[k - j] = quantize_one<Stoch>(x[k], p, qmax, Stoch ? r[k] : 0.f);
    pack_scalar<B>(q, n - j, codes + j / 8 * B);
  }
}

// Software-pipelined over groups: the next group's pass 1 is issued while the current group's scale (a chain of
// divisions and fp16 conversions, ~50 cycles) resolves, so the out-of-order core overlaps them.
template <int B, bool Stoch>
QuantStatus encode_row_avx2(const QuantFormat& f, const float* x, size_t cols, const QuantView& row,
                            const QuantSeed& seed, uint64_t first) {
  QuantStatus st;
  alignas(32) float tmp[kQuantUniformMax + 64];
  const size_t G = size_t(f.group);
  GroupStats next = cols ? group_stats_avx2(x, std::min(G, cols)) : GroupStats{};
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    const GroupStats cur = next;
    GroupParams p;
    const bool ok = !cur.bad && group_params<true>(B, f.symmetric, cur.lo + 0.f, cur.hi + 0.f, p);
    if (c + G < cols) next = group_stats_avx2(x + c + G, std::min(G, cols - c - G));
    uint8_t* codes = row.codes + c / 8 * B;
    float* min = f.symmetric ? nullptr : row.mins + g;
    if (!ok) {
      st += mark_bad_group(x + c, n, B, codes, row.scales + g, min);
      continue;
    }
    quantize_group_avx2<B, Stoch>(x + c, n, p, Stoch ? quant_uniforms(seed, first + c, n, tmp, true) : nullptr, codes);
    row.scales[g] = p.h;
    if (min) *min = p.offset;
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
#if AGOQ_QUANT_AVX2
  if (simd) return encode_row_avx2<B, Stoch>(f, x, cols, row, seed, first);
#endif
  QuantStatus st;
  alignas(32) float tmp[kQuantUniformMax + 64];
  const size_t G = size_t(f.group);
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    const float* r = Stoch ? quant_uniforms(seed, first + c, n, tmp, false) : nullptr;
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
#if AGOQ_QUANT_AVX2
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
    case 2: return sr ? encode_row<2, true>(f, x, cols, row, seed, first, simd) : encode_row<2, false>(f, x, cols, row, seed, first, simd);
    case 3: return sr ? encode_row<3, true>(f, x, cols, row, seed, first, simd) : encode_row<3, false>(f, x, cols, row, seed, first, simd);
    case 4: return sr ? encode_row<4, true>(f, x, cols, row, seed, first, simd) : encode_row<4, false>(f, x, cols, row, seed, first, simd);
    case 8: return sr ? encode_row<8, true>(f, x, cols, row, seed, first, simd) : encode_row<8, false>(f, x, cols, row, seed, first, simd);
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

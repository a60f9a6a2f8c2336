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
template <int B, bool Stoch>
QuantStatus encode_group_avx2(const float* x, size_t n, bool sym, const float* r, uint8_t* codes, uint16_t* scale,
                              float* min) {
  // Pass 1 (min, max, non-finite) and pass 2 (quantize + pack) read the same G values; the second pass hits L1.
  __m256 vlo = _mm256_set1_ps(INFINITY), vhi = _mm256_set1_ps(-INFINITY), vbad = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    vlo = _mm256_min_ps(vlo, v), vhi = _mm256_max_ps(vhi, v);
    vbad = _mm256_or_ps(vbad, simd::nonfinite8(v));
  }
  float lo = simd::hmin8(vlo), hi = simd::hmax8(vhi);
  bool bad = _mm256_movemask_ps(vbad) != 0;
  for (; j < n; ++j) {
    bad |= !std::isfinite(x[j]);
    lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  }
  GroupParams p;
  if (bad || !group_params<true>(B, sym, lo + 0.f, hi + 0.f, p)) return mark_bad_group(x, n, B, codes, scale, min);
  const float qmax = float((1 << B) - 1);
  const __m256 off = _mm256_set1_ps(p.offset), inv = _mm256_set1_ps(p.inv), vmax = _mm256_set1_ps(qmax);
  const __m256 zero = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), off);
    __m256 t = Stoch ? _mm256_floor_ps(_mm256_fmadd_ps(d, inv, _mm256_loadu_ps(r + j)))
                     : _mm256_round_ps(_mm256_mul_ps(d, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm256_min_ps(_mm256_max_ps(t, zero), vmax);
    simd::pack8<B>(_mm256_cvttps_epi32(t), codes + j / 8 * B);
  }
  if (j < n) {
    uint8_t q[8];
    for (size_t k = j; k < n; ++k) q[k - j] = quantize_one<Stoch>(x[k], p, qmax, Stoch ? r[k] : 0.f);
    pack_scalar<B>(q, n - j, codes + j / 8 * B);
  }
  *scale = p.h;
  if (min) *min = p.offset;
  return {};
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
  QuantStatus st;
  alignas(32) float tmp[kQuantUniformMax + 64];
  const size_t G = size_t(f.group);
  for (size_t g = 0, c = 0; c < cols; ++g, c += G) {
    const size_t n = std::min(G, cols - c);
    const float* r = Stoch ? quant_uniforms(seed, first + c, n, tmp, simd) : nullptr;
    uint8_t* codes = row.codes + c / 8 * B;
    float* min = f.symmetric ? nullptr : row.mins + g;
#if AGOQ_QUANT_AVX2
    if (simd) {
      st += encode_group_avx2<B, Stoch>(x + c, n, f.symmetric, r, codes, row.scales + g, min);
      continue;
    }
#endif
    st += encode_group_scalar<B, Stoch>(x + c, n, f.symmetric, r, codes, row.scales + g, min);
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

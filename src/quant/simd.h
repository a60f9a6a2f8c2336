// Small building blocks shared by the quantization kernels: fp16/bf16 conversions, the Philox uniforms for
// stochastic rounding, and the AVX2 versions of both. Every AVX2 helper has a scalar twin that gives the same bits;
// quant_set_simd(false) makes all kernels take the scalar path (tests compare the two).
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/rng.h"
#include "quant/format.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AGOQ_QUANT_AVX2 1
#include <immintrin.h>
#else
#define AGOQ_QUANT_AVX2 0
#endif

namespace agoq {

// True when the AVX2 kernels are compiled in and not switched off. Process-wide; flip only between calls.
bool quant_simd_enabled();
void quant_set_simd(bool on);

// ---- scalar conversions (portable) ----

// fp32 -> fp16 rounding toward +inf, for x >= 0 (scales: rounding up keeps every code in range). NaN -> NaN,
// anything above 65504 -> +inf (the caller reports it as overflow).
inline uint16_t f32_to_f16_up(float x) {
  if (std::isnan(x)) return 0x7E00;
  if (!(x > 0)) return 0;
  if (x > 65504.f) return 0x7C00;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const int e = int(u >> 23) - 127;
  if (e < -14) return uint16_t(std::ceil(x * 0x1p24f));  // fp16 subnormal: units of 2^-24 (exact scaling)
  const uint32_t m = u & 0x7FFFFFu;
  const uint16_t h = uint16_t(((e + 15) << 10) | (m >> 13));
  return uint16_t(h + ((m & 0x1FFFu) != 0));  // a carry into the exponent is the correct next fp16
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(m) * 0x1p-24f));
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | ((m ? m | 0x200u : 0u) << 13));  // NaN: quiet, as F16C
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN, overflow rounds to Inf as RNE does.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// ---- Philox uniforms for stochastic rounding ----
// Element i of a tensor uses word (i/8)%4 of philox4x32(seed, tensor_id, (i/32)*8 + i%8), as a 24-bit uniform in
// [0,1). So one chunk of 32 consecutive elements (starting at a multiple of 32) is exactly 8 Philox calls on
// consecutive counters, and 8 AVX2 lanes produce it in order without a transpose. Depends only on (seed, id, i).
inline float quant_uniform_at(const QuantSeed& s, uint64_t i) {
  return rng_unit_float(philox4x32(s.seed, s.tensor_id, (i >> 5) * 8 + (i & 7))[(i >> 3) & 3]);
}

// Uniforms for elements [32 * chunk, 32 * (chunk + chunks)) into out[0 .. 32 * chunks).
void quant_uniform_chunks_scalar(const QuantSeed& s, uint64_t chunk, size_t chunks, float* out);
#if AGOQ_QUANT_AVX2
void quant_uniform_chunks_avx2(const QuantSeed& s, uint64_t chunk, size_t chunks, float* out);
#endif

// Uniforms of elements [first, first + n) (n <= kQuantUniformMax): fills tmp (kQuantUniformMax + 64 floats) with
// whole chunks and returns the pointer to element `first` inside it.
constexpr size_t kQuantUniformMax = 256;
const float* quant_uniforms(const QuantSeed& s, uint64_t first, size_t n, float* tmp, bool simd);

}  // namespace agoq

// The per-element arithmetic of AdamW's 8-bit states (optim/adam_q8.h), one small function per operation; the
// update itself is opmath/adamw_math.h's. The AVX2 kernel in adam_q8.cpp performs exactly these fp32 operations in
// the same order (std::fma where it uses _mm256_fmadd_ps), so both paths give the same bits; tests/optim compares
// them and a float64 reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "opmath/adamw_math.h"

namespace agoq {

// ---- the state mappings: a value x is stored as the code round(r(x) * Q / s) with r(x) = sign(x) |x|^(1/root),
// s the block's max |r(x)| (the block scale) and Q = 127 (m, signed) or 255 (v, unsigned). Decoding: r = code * s /
// Q, then x = sign(r) |r|^root. root 1 is linear; 2 stores sqrt|x| linearly (fine steps near zero, where v spans
// decades); 4 stores the fourth root. ----

// |r|^root * sign(r), root in {1, 2, 4}.
inline float q8_power(float r, int root) {
  if (root == 1) return r;
  const float r2 = r * std::fabs(r);
  return root == 2 ? r2 : r2 * std::fabs(r2);
}
// The stored root of m (signed) from m.
inline float q8_m_root(float m, int root) {
  if (root == 1) return m;
  const float a = std::sqrt(std::fabs(m));
  return std::copysign(root == 2 ? a : std::sqrt(a), m);
}
// The stored root of v from sqrt(v) (which the update computes anyway): root 2 costs nothing extra.
inline float q8_v_root_of_sqrt(float sqrt_v, int root) {
  return root == 2 ? sqrt_v : root == 4 ? std::sqrt(sqrt_v) : sqrt_v * sqrt_v;
}

// Code multipliers of a block: Q / s, or 0 for a block whose scale is below 2^-100 (stored as zeros: moments that
// small change no weight, and Q / s would overflow).
inline float q8_inverse_step(float scale, float q) { return scale >= 0x1p-100f ? q / scale : 0.f; }
inline float q8_step(float scale, float q) { return scale >= 0x1p-100f ? scale / q : 0.f; }

// Nearest rounding (to even at ties, as _mm256_cvtps_epi32), clamped to the code range.
inline int8_t q8_code_m(float root, float inv) { return int8_t(std::clamp(std::nearbyint(root * inv), -127.f, 127.f)); }
inline uint8_t q8_code_v(float root, float inv) { return uint8_t(std::clamp(std::nearbyint(root * inv), 0.f, 255.f)); }
// Stochastic rounding with the element's random byte (quant/quant_math.h, quant_sr_round): floor(t + u), E = t.
inline int32_t q8_code_stochastic(float root, float inv, uint8_t byte) {
  return (int32_t(std::nearbyint(root * inv * 256.f)) + int32_t(byte)) >> 8;
}

}  // namespace agoq

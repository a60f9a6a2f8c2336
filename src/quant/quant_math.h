// The per-value math of agoq's quantizers, written once for the CPU kernels (the scalar references in
// group_quant.cpp and grad_q8.cpp call these; the AVX2 kernels reproduce them bit for bit) and the CUDA kernels
// (src/cuda/, built with -fmad=false so no product is fused behind our back). Every rounding is explicit: fmaf where
// a product and a sum round once, rintf (round to nearest even) where a code is chosen, IEEE division.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>

#include "core/hd.h"
#include "core/philox.h"
#include "quant/format.h"
#include "quant/half.h"

namespace agoq {

// ---- Stochastic rounding's random bytes (quant/simd.h explains the layout) ----

// Position of element j's byte in a buffer that starts at an element index that is a multiple of 32: bits 2-4 of
// j rotated right by one (the 4-byte units of a 32-byte block in the order 0 2 4 6 1 3 5 7 of their elements).
AGOQ_HD constexpr size_t quant_random_slot(size_t j) { return (j & ~size_t(0x1C)) | ((j >> 1) & 0xC) | ((j & 4) << 2); }

// Element i's byte: byte i % 4 of word (i / 32) % 4 of philox(seed, tensor_id, (i / 128) * 8 + rev3((i / 4) % 8)).
// The word holds the bytes of the 4 elements 4 (i / 4) .. 4 (i / 4) + 3 (a kernel may draw it once for them).
AGOQ_HD uint32_t quant_random_word_at(const QuantSeed& s, uint64_t i) {
  const uint64_t u = (i >> 2) & 7, rev = ((u & 1) << 2) | (u & 2) | (u >> 2);
  return philox4x32_words(s.seed, s.tensor_id, (i >> 7) * 8 + rev).w[(i >> 5) & 3];
}
AGOQ_HD uint8_t quant_random_byte_at(const QuantSeed& s, uint64_t i) {
  return uint8_t(quant_random_word_at(s, i) >> (8 * (i & 3)));
}
// The uniform that byte stands for, (byte + 1/2) / 256 in (0, 1) (for tests and documentation).
AGOQ_HD float quant_uniform_at(const QuantSeed& s, uint64_t i) {
  return (float(quant_random_byte_at(s, i)) + 0.5f) * (1.f / 256);
}

// Stochastic rounding of t = T / 256, given T = round_to_nearest_even(256 t) and the element's random byte:
// floor(T / 256) plus 1 iff the 8 fractional bits of T plus the byte carry out. The same as
// floor(t + (byte + 1/2) / 256) except at exact ties of 256 t. E[result] = T / 256 over the byte, so the bias is
// |T / 256 - t| <= 1/512 of a step. Arithmetic shift: a floor for negative T too (the gradient format is signed).
AGOQ_HD int32_t quant_sr_round(int32_t T, uint8_t byte) { return (T + int32_t(byte)) >> 8; }

// ---- Activation groups: b-bit codes, one fp16 scale per group of G values ----

// The decoding of a code u in a group with fp16 scale s: value = fma(u, s, offset), offset = the stored min
// (asymmetric) or -s * (2^b - 1) / 2 (symmetric: codes are offset-binary, levels at (k + 1/2) * s).
AGOQ_HD float quant_int_offset(int bits, bool symmetric, float scale, float min) {
  return symmetric ? -0.5f * float((1 << bits) - 1) * scale : min;
}
AGOQ_HD float quant_code_decode(uint32_t code, float scale, float offset) { return fmaf(float(code), scale, offset); }

struct QuantGroupParams {
  uint16_t h;  // fp16 scale as stored
  float scale, offset, inv;
  // The encoder's map to code units, t = fma(x - sub, inv, add): symmetric sub = 0, add = qmax / 2 (so t = x/s +
  // qmax/2, one rounding). Asymmetric, when |lo| <= range: sub = 0, add = -lo * inv (rounded: an error of at most
  // 2^-24 qmax steps, since |lo * inv| <= qmax); otherwise (values far from zero relative to their range, where
  // that rounding would matter) sub = lo, add = 0, and x - lo is exact or nearly. The "256" versions scale t by 256
  // (exactly: powers of two) for stochastic rounding.
  float sub, add, inv256, add256;
};

AGOQ_HD void quant_group_encoder(int bits, bool sym, float lo, float range, float inv, QuantGroupParams& p) {
  p.inv = inv;
  const bool shift = !sym && !(fabsf(lo) <= range);
  p.sub = shift ? lo : 0.f;
  p.add = sym ? 0.5f * float((1 << bits) - 1) : shift ? 0.f : -lo * inv;
  p.inv256 = p.inv * 256.f, p.add256 = p.add * 256.f;
}

// Step Δ = range / (2^b - 1), rounded *up* to fp16 so that every value maps into [0, 2^b - 1] (error <= Δ_h / 2
// with Δ_h < Δ (1 + 2^-10) + 2^-24). False when Δ does not fit fp16. lo/hi are the group's finite min/max.
AGOQ_HD bool quant_group_params(int bits, bool sym, float lo, float hi, QuantGroupParams& p) {
  const float qmax = float((1 << bits) - 1);
  const float range = sym ? 2.f * (-lo < hi ? hi : -lo) : hi - lo;
  const float d = range / qmax + 0.f;  // + 0: -0 -> +0 (F16C would keep the sign bit)
  p.h = f32_to_f16_up(d);
  p.scale = f16_to_f32(p.h);
  if (p.h >= 0x7C00) return false;
  p.offset = quant_int_offset(bits, sym, p.scale, lo);
  quant_group_encoder(bits, sym, lo, range, p.scale > 0 ? 1.f / p.scale : 0.f, p);
  return true;
}

// One value's code, t = fma(x - sub, inv, add) rounded to nearest even and clamped to [0, qmax].
AGOQ_HD uint8_t quant_code_nearest(float x, const QuantGroupParams& p, float qmax) {
  float t = rintf(fmaf(x - p.sub, p.inv, p.add));
  t = t < 0.f ? 0.f : (t > qmax ? qmax : t);
  return uint8_t(t);
}
// Stochastic: T = round(256 t) (as fma(x - sub, 256 inv, 256 add)), then quant_sr_round(T, r), clamped.
AGOQ_HD uint8_t quant_code_stochastic(float x, const QuantGroupParams& p, float qmax, uint8_t r) {
  const int32_t u = quant_sr_round(int32_t(rintf(fmaf(x - p.sub, p.inv256, p.add256))), r);
  return uint8_t(u < 0 ? 0 : (u > int32_t(qmax) ? int32_t(qmax) : u));
}

// ---- Gradient blocks: INT8 codes in [-127, 127], one fp32 scale (absmax / 127) per block ----

struct GradQ8BlockParams {
  float scale, inv, pre, inv256;  // inv256 = 256 inv (exact), for stochastic rounding
};

// scale = amax / 127, codes = round(x * 127 / amax). For tiny blocks (amax < 2^-64, e.g. denormals) the values are
// first multiplied by 2^64 (exact) so that 127 / amax cannot overflow.
AGOQ_HD GradQ8BlockParams grad_q8_block_params(float amax) {
  const float pre = amax < 0x1p-64f ? 0x1p64f : 1.f, inv = amax > 0 ? 127.f / (amax * pre) : 0.f;
  return {amax / 127.f, inv, pre, inv * 256.f};
}

// Nearest: round(y 127 / amax); stochastic: quant_sr_round(round(256 y 127 / amax), r), r the element's random
// byte. The AVX2 kernel computes the same fp32 products (skipping y * pre when pre is 1: the same bits).
AGOQ_HD int8_t grad_q8_code_nearest(float y, const GradQ8BlockParams& p) {
  float t = rintf(y * p.pre * p.inv);
  t = t < -127.f ? -127.f : (t > 127.f ? 127.f : t);
  return int8_t(t);
}
AGOQ_HD int8_t grad_q8_code_stochastic(float y, const GradQ8BlockParams& p, uint8_t r) {
  const int32_t u = quant_sr_round(int32_t(rintf(y * p.pre * p.inv256)), r);
  return int8_t(u < -127 ? -127 : (u > 127 ? 127 : u));
}

AGOQ_HD float grad_q8_decode(int8_t code, float scale) { return float(code) * scale; }
// Dequantize-and-add in one rounding: the local accumulation (acc = a new gradient) and the reduce step's sum of
// received shards (acc = the sum so far) both use it.
AGOQ_HD float grad_q8_decode_add(int8_t code, float scale, float acc) { return fmaf(float(code), scale, acc); }
// The reduce step's mean: the rank-ordered sum divided by the divisor (no division when it is 1).
AGOQ_HD float grad_q8_sum_finish(float sum, float divisor) { return divisor != 1.f ? sum / divisor : sum; }

}  // namespace agoq

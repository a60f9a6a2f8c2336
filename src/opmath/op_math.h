// The per-value math of the model's ops, written once for the CPU ops (model/ops.cpp, model/attention.cpp) and the
// CUDA kernels (cuda/*_cuda.cu): AGOQ_HD functions (core/hd.h) using only fmaf, rintf, fminf/fmaxf, IEEE division
// and sqrt, so both devices evaluate one formula. The CUDA files are compiled with -fmad=false and evaluate each
// function as written; g++ may fuse an a·b + c of the inlined CPU copy into one fma, and the reductions (a row's sum
// of squares, a softmax's sum) run in different orders, so the two devices agree to rounding, and each op's tests
// bound the difference (unlike the quantizers' functions, quant/quant_math.h, whose bytes match exactly).
// model/ops.h is the contract of the ops themselves.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace agoq {

// ---- exp: Cephes' expf polynomial (max relative error ≈ 2e-7 on [-87.3, 88]); below -87.3 (and at -inf) exactly
// 0, above 88 saturating at e^88. ops_simd.h's exp8 performs the same operations lane by lane. ----
constexpr float kExpLo = -87.3365447505f, kExpHi = 88.0f;
constexpr float kExpLog2e = 1.44269504088896341f, kExpLn2Hi = 0.693359375f, kExpLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f, kExpP1 = 1.3981999507e-3f, kExpP2 = 8.3334519073e-3f,
                kExpP3 = 4.1665795894e-2f, kExpP4 = 1.6666665459e-1f, kExpP5 = 5.0000001201e-1f;

AGOQ_HD float op_exp(float x) {
  const bool underflow = !(x >= kExpLo);
  x = fminf(fmaxf(x, kExpLo), kExpHi);
  const float n = rintf(x * kExpLog2e);
  float r = fmaf(-n, kExpLn2Hi, x);
  r = fmaf(-n, kExpLn2Lo, r);
  float p = kExpP0;
  p = fmaf(p, r, kExpP1);
  p = fmaf(p, r, kExpP2);
  p = fmaf(p, r, kExpP3);
  p = fmaf(p, r, kExpP4);
  p = fmaf(p, r, kExpP5);
  const float y = fmaf(p, r * r, r) + 1.0f;
  const float scale = bits_float(uint32_t(int32_t(n) + 127) << 23);
  return underflow ? 0.0f : y * scale;
}

AGOQ_HD float op_sigmoid(float g) { return 1.0f / (1.0f + op_exp(-g)); }

// ---- RMSNorm: rstd = 1/sqrt(Σx²/C + eps); out = x·rstd·w; backward dx = rstd·(dout·w − x·k) with
// k = rstd²·Σ(dout·w·x)/C, dw += dout·x·rstd. The sums are the caller's reductions. ----
AGOQ_HD float rmsnorm_rstd(float sum_squares, int C, float eps) { return 1.0f / sqrtf(sum_squares / float(C) + eps); }
AGOQ_HD float rmsnorm_value(float x, float rstd, float w) { return x * rstd * w; }
AGOQ_HD float rmsnorm_dx_coeff(float rstd, float sum_dout_w_x, int C) { return rstd * rstd * sum_dout_w_x / float(C); }
AGOQ_HD float rmsnorm_dx_value(float dout, float w, float x, float rstd, float k) { return rstd * (dout * w - x * k); }
AGOQ_HD float rmsnorm_dw_term(float dout, float x, float rstd) { return dout * x * rstd; }

// ---- RoPE (HF rotate_half): the pair (a, b) = (x_i, x_{i+hd/2}) rotated by the angle whose cosine is c and sine s
// (s negated for the transpose, which is the backward). ----
struct RopePair {
  float a, b;
};
AGOQ_HD RopePair rope_rotate_pair(float a, float b, float c, float s) { return {a * c - b * s, b * c + a * s}; }

// ---- SwiGLU: out = silu(g)·u, silu(g) = g·σ(g); dg = dout·u·(σ + silu − silu·σ), du = dout·silu. ----
AGOQ_HD float swiglu_value(float g, float u) { return g * op_sigmoid(g) * u; }
struct SwigluGrads {
  float dgate, dup;
};
AGOQ_HD SwigluGrads swiglu_grads(float dout, float g, float u) {
  const float sig = op_sigmoid(g), silu = g * sig;
  const float dsilu = fmaf(-silu, sig, sig + silu);
  return {dout * u * dsilu, dout * silu};
}

// ---- Cross-entropy of a row from its max, its Σ exp(z − max) and its target logit: loss = max + log(sum) − z_t;
// dz_v = scale·exp(z_v − max)/sum − scale·[v = t] (the caller subtracts at the target). ----
AGOQ_HD float crossentropy_loss(float row_max, float sum, float target_logit) {
  return row_max + logf(sum) - target_logit;
}
AGOQ_HD float crossentropy_grad_factor(float sum, float dloss_scale) { return dloss_scale / sum; }

}  // namespace agoq

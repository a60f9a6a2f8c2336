// The per-value arithmetic of an AdamW step, written once for the fp32 and the 8-bit moments on the CPU
// (optim/adamw.cpp, optim/adam_q8.cpp, whose AVX2 kernel performs the same fp32 operations in the same order) and the
// CUDA kernel (cuda/adamw_cuda.cu): every multiply-add is an explicit fmaf, so the bits do not depend on a compiler's
// contraction and are the same on both devices.
#pragma once
#include <cmath>

#include "core/hd.h"

namespace agoq {

// The step's constants (bias corrections folded in).
struct AdamStepCoeffs {
  float b1, one_minus_b1, b2, one_minus_b2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
};

// Step `step` (1-based) at learning rate lr; host code of both devices builds them the same way.
inline AdamStepCoeffs adam_step_coeffs(float b1, float b2, float eps, float lr, long step) {
  const float bc1 = 1.0f - std::pow(b1, float(step)), bc2 = 1.0f - std::pow(b2, float(step));
  return {b1, 1.0f - b1, b2, 1.0f - b2, lr / bc1, 1.0f / std::sqrt(bc2), eps};
}

AGOQ_HD float adam_m_next(float m, float g, const AdamStepCoeffs& k) { return fmaf(k.b1, m, k.one_minus_b1 * g); }
AGOQ_HD float adam_v_next(float v, float g, const AdamStepCoeffs& k) { return fmaf(k.b2, v, k.one_minus_b2 * (g * g)); }
// p * decay - step_size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), from sqrt(v) (which the 8-bit v code reuses).
AGOQ_HD float adam_param_next(float p, float decay, float m, float sqrt_v, const AdamStepCoeffs& k) {
  return fmaf(-k.step_size, m / fmaf(sqrt_v, k.inv_sqrt_bc2, k.eps), p * decay);
}

// One fp32-moment update of a value: m, v and p in place.
AGOQ_HD void adamw_update(float& p, float& m, float& v, float g, float decay, const AdamStepCoeffs& k) {
  m = adam_m_next(m, g, k);
  v = adam_v_next(v, g, k);
  p = adam_param_next(p, decay, m, sqrtf(v), k);
}

}  // namespace agoq

// The ops' work as benchmarks, MFU figures and the planner's time model count it, for both devices' code.
#pragma once

namespace agoq {

// Causal attention (model/attention.h): the forward is two products (the scores and the output) of B·H·T²/2·hd
// multiply-adds, half the scores being masked; the backward 2.5× that (the recomputed scores and four products).
inline double attention_forward_flops(double B, double H, double T, int hd) { return 2.0 * B * H * T * T * hd; }
inline double attention_backward_flops(double B, double H, double T, int hd) {
  return 2.5 * attention_forward_flops(B, H, T, hd);
}

}  // namespace agoq

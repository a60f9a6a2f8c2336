// Neural-network ops of the LLaMA model, llm.c style: each op's *_forward and *_backward side by side, explicit
// buffers owned by the caller, fp32, row-major. N = B*T rows, one row per token.
//
// Gradient conventions:
//   * weight gradients (dw, dtable) always ACCUMULATE (+=): they sum over micro-batches;
//   * input gradients say in their comment whether they OVERWRITE (=) or ACCUMULATE (+=). rmsnorm's dx
//     accumulates (it is added to the residual stream's gradient); matmul's din overwrites unless asked to
//     accumulate; swiglu, rope, attention and cross-entropy gradients overwrite.
// Threading: every op is OpenMP-parallel inside (small calls stay serial through `if` clauses) and must be
// called from outside a parallel region. Every result is bit-identical from run to run; all ops except
// matmul (OpenBLAS) also give the same bits for any thread count.
// The flash attention lives in model/attention.h (included here).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AGOQ_OPS_AVX2 1
#endif

#include "model/attention.h"

namespace agoq {

// ---------------------------------------------------------------------------------------------------------------
// Linear layer (no bias), Hugging Face layout w (out_dim, in_dim).
// out (N, out_dim) = in (N, in_dim) · wᵀ.
void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim);
// din (N, in_dim) = dout · w: OVERWRITES, or ACCUMULATES when accumulate_din; skipped when din == nullptr.
// dw (out_dim, in_dim) += doutᵀ · in: ACCUMULATES; skipped when dw == nullptr (a frozen weight).
void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim,
                     int out_dim, bool accumulate_din = false);

// ---------------------------------------------------------------------------------------------------------------
// RMSNorm: rstd_n = 1/sqrt(mean_c(x_nc²) + eps); out_nc = x_nc · rstd_n · w_c. x, out (N, C); w (C); rstd (N) saved.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx (N, C) ACCUMULATES (+=, the residual stream's gradient); dw (C) ACCUMULATES. Uses the saved rstd, so an
// approximate (e.g. dequantized) x still gives a consistent gradient. dw is summed per column in row order, so
// it is the same for any thread count.
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C);

// ---------------------------------------------------------------------------------------------------------------
// Rotary position embedding, Hugging Face LlamaForCausalLM convention (rotate_half): for each head vector x (hd)
// and i < hd/2, the pair (x_i, x_{i+hd/2}) is rotated by angle pos · theta^(-2i/hd):
//   out_i = x_i cos − x_{i+hd/2} sin,   out_{i+hd/2} = x_{i+hd/2} cos + x_i sin,   pos = row % T.
// Tables cos, sin: (T, hd/2), angles evaluated in double precision.
void rope_init_tables(float* cos, float* sin, int T, int hd, float theta);
// x (N, n_heads·hd) rotated in place (q with n_heads = H, k with n_heads = Hkv).
void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd);
// dx (N, n_heads·hd) in place: the transpose (inverse) rotation, so dx OVERWRITES with d(loss)/d(input).
void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd);

// ---------------------------------------------------------------------------------------------------------------
// SwiGLU gate: out = silu(gate) · up, silu(x) = x · sigmoid(x). All arrays (n).
void swiglu_forward(float* out, const float* gate, const float* up, size_t n);
// dgate, dup (n) OVERWRITE.
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n);

// ---------------------------------------------------------------------------------------------------------------
// Softmax cross-entropy on a chunk of rows: logits (N, V) are replaced by dloss_scale · (softmax − onehot)
// (OVERWRITES); losses (N) = logsumexp(logits_n) − logits_n[target_n]. A target < 0 is ignored: loss 0,
// gradient row 0. Targets must be < V.
void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                   float dloss_scale);

// ---------------------------------------------------------------------------------------------------------------
// Token embedding: out (N, C) = table[tokens_n] (table (V, C)).
void embedding_forward(float* out, const int* tokens, const float* table, int N, int C);
// dtable (V, C) ACCUMULATES dout rows at their tokens; summed per column in row order (deterministic, no races,
// the same for any thread count).
void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C);

// ---------------------------------------------------------------------------------------------------------------
// Residual stream helpers (n elements): out = a + b (out may alias a or b); acc += x.
void residual_add(float* out, const float* a, const float* b, size_t n);
void residual_add_inplace(float* acc, const float* x, size_t n);

// ---------------------------------------------------------------------------------------------------------------
// Shared SIMD helpers (ops.cpp, attention.cpp). exp is Cephes' expf polynomial (max relative error ≈ 2e-7 on
// [-87.3, 88]); below -87.3 (including -inf) it returns exactly 0, above 88 it saturates at e^88. The scalar
// exp1 performs the same operations as one lane of exp8, so vector bodies and scalar tails agree bit for bit.
namespace simd {

constexpr float kExpLo = -87.3365447505f, kExpHi = 88.0f;
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f, kExpP1 = 1.3981999507e-3f, kExpP2 = 8.3334519073e-3f,
                kExpP3 = 4.1665795894e-2f, kExpP4 = 1.6666665459e-1f, kExpP5 = 5.0000001201e-1f;

inline float exp1(float x) {
  const bool underflow = !(x >= kExpLo);
  x = std::fmin(std::fmax(x, kExpLo), kExpHi);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kExpP0;
  p = std::fma(p, r, kExpP1);
  p = std::fma(p, r, kExpP2);
  p = std::fma(p, r, kExpP3);
  p = std::fma(p, r, kExpP4);
  p = std::fma(p, r, kExpP5);
  float y = std::fma(p, r * r, r) + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return underflow ? 0.0f : y * scale;
}

#ifdef AGOQ_OPS_AVX2
inline __m256 exp8(__m256 x) {
  const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLo)), _mm256_set1_ps(kExpHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP5));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(bits)), ok);
}
// Sum of the 8 lanes, in a fixed order.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace simd
}  // namespace agoq

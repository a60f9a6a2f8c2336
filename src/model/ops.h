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
#include <climits>
#include <cstddef>
#include <vector>

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
// out (N, C) = x · rstd · w from a saved rstd: the forward's output again (backward rebuilds a norm output it did
// not store), bit for bit.
void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C);
// dx (N, C) ACCUMULATES (+=, the residual stream's gradient); dw (C) ACCUMULATES. Uses the saved rstd, so an
// approximate (e.g. dequantized) x still gives a consistent gradient. dw is summed per column in row order, so
// it is the same for any thread count.
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                      int C);

// ---------------------------------------------------------------------------------------------------------------
// Rotary position embedding, Hugging Face LlamaForCausalLM convention (rotate_half): for each head vector x (hd)
// and i < hd/2, the pair (x_i, x_{i+hd/2}) is rotated by angle pos · theta^(-2i/hd):
//   out_i = x_i cos − x_{i+hd/2} sin,   out_{i+hd/2} = x_{i+hd/2} cos + x_i sin,   pos = row % T.
// Tables cos, sin: (T, hd/2), angles evaluated in double precision.
void rope_init_tables(float* cos, float* sin, int T, int hd, float theta);
// The same for any frequencies (hd/2 of them, LlamaConfig::rope_inv_freqs: rope scaling): angle pos · inv_freqs[i].
void rope_init_tables(float* cos, float* sin, int T, const std::vector<double>& inv_freqs);
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
// The same on the caller's scratch (stats: 3N floats), the targets checked already (the backends' form).
void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                   float dloss_scale, float* stats);
// The same on a vocabulary shard (Megatron's vocab-parallel cross-entropy, docs/parallel.md): logits (N, V) are
// columns [v_begin, v_begin + V) of the whole vocabulary, targets are whole-vocabulary ids. Three phases, with a
// reduction over the shards between them (with one shard none: the three in a row are the function above):
//   1. row_max (N) := each row's maximum                                      then the max over the shards
//   2. logits := exp(logits - row_max); sums (2N) := (sum, target logit or 0)  then the sum over the shards
//   3. losses := row_max + log(sum) - target logit; logits := dloss_scale · (softmax − onehot)
void crossentropy_shard_max(const float* logits, int N, int V, float* row_max);
void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin, const float* row_max,
                            float* sums);
void crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N, int V, int v_begin,
                               const float* row_max, const float* sums, float dloss_scale);

// ---------------------------------------------------------------------------------------------------------------
// Token embedding: out (N, C) = table[tokens_n] (table (V, C)). A vocabulary shard's table holds rows
// [v_begin, v_begin + V) of the whole one: rows of tokens outside it are 0 (the shards' outputs sum to the whole).
void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin = 0,
                       int V = INT_MAX);
// dtable (V, C) ACCUMULATES dout rows at their tokens (those of the shard); summed per column in row order
// (deterministic, no races, the same for any thread count).
void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin = 0,
                        int V = INT_MAX);

// ---------------------------------------------------------------------------------------------------------------
// Residual stream helpers (n elements): out = a + b (out may alias a or b); acc += x.
void residual_add(float* out, const float* a, const float* b, size_t n);
void residual_add_inplace(float* acc, const float* x, size_t n);

}  // namespace agoq

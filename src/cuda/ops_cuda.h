// The model's ops on the device: the twins of model/ops.h (the contract: the same shapes, row-major layouts and
// overwrite / accumulate rules), fp32 activations, one stream. Pointers are device pointers. The per-value math is
// opmath/op_math.h, compiled for the GPU; the kernels add only launch geometry and block reductions (in a fixed
// order: every result is the same from run to run). The GEMMs are cuda/matmul_cuda.h, attention cuda/attention_cuda.h.
// Deviations from the CPU, by design: RMSNorm's and cross-entropy's row sums run in another order (rounding-level
// differences); a cross-entropy target at or beyond V gives a NaN loss (the trainer's NaN check stops the run)
// instead of a thrown error, because the targets live on the device.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>

#include "opmath/adamw_math.h"

namespace agoq {

// RMSNorm (ops.h: rmsnorm_forward / rmsnorm_apply / rmsnorm_backward). dx and dw ACCUMULATE.
void cuda_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps,
                          cudaStream_t stream = 0);
void cuda_rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C,
                        cudaStream_t stream = 0);
void cuda_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                           int N, int C, cudaStream_t stream = 0);

// RoPE in place, with the CPU's tables (rope_init_tables) uploaded: cos, sin (T, hd/2). Backward = transpose.
void cuda_rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd,
                       cudaStream_t stream = 0);
void cuda_rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd,
                        cudaStream_t stream = 0);

// SwiGLU; dgate, dup OVERWRITE.
void cuda_swiglu_forward(float* out, const float* gate, const float* up, size_t n, cudaStream_t stream = 0);
void cuda_swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n,
                          cudaStream_t stream = 0);

// Cross-entropy of N rows of V logits, replaced by dloss_scale · (softmax − onehot); target < 0: loss 0, row 0.
void cuda_crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                        float dloss_scale, cudaStream_t stream = 0);

// Embedding of a vocabulary shard [v_begin, v_begin + V); dtable ACCUMULATES, rows added in token order per column
// (the CPU's order: the same bits).
void cuda_embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin = 0,
                            int V = INT_MAX, cudaStream_t stream = 0);
void cuda_embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin = 0,
                             int V = INT_MAX, cudaStream_t stream = 0);

// out = a + b (out may alias a or b); acc += x.
void cuda_residual_add(float* out, const float* a, const float* b, size_t n, cudaStream_t stream = 0);
void cuda_residual_add_inplace(float* acc, const float* x, size_t n, cudaStream_t stream = 0);

// One AdamW step of n values with fp32 moments (optim/adamw.h's fp32 path, value for value): p, m, v in place;
// decay = 1 − lr·weight_decay for matrices, 1 for norms (the caller launches each run of its layout).
void cuda_adamw_step(float* p, float* m, float* v, const float* g, size_t n, float decay, const AdamStepCoeffs& k,
                     cudaStream_t stream = 0);
// Σ g² in double over fixed chunks in a fixed order (grad_sum_squares' contract); waits for the stream.
double cuda_grad_sum_squares(const float* g, size_t n, cudaStream_t stream = 0);
void cuda_grad_scale(float* g, size_t n, float factor, cudaStream_t stream = 0);

}  // namespace agoq

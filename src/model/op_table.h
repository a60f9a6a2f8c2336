// The model's ops, each listed once: X(name, time class, (parameters), (arguments), (FLOPs, bytes)). The backend
// interface (model/backend.h) is written out for readers and checked against this table; from the table come the
// forwarders of every backend (the CPU's to model/ops.h, the timed one, the test's device-like one, the CUDA backend's
// declarations), the op names a backend reports and each call's cost (OpCost below: `agoq bench ops` and `train
// --profile` rate the calls the model makes by it). What each op computes, its shapes and its overwrite / accumulate
// rule are model/ops.h's and model/attention.h's, under the same names; the CUDA twins are cuda/ops_cuda.h's. The time
// class is backend_timed.h's split of a step (a matmul on the lm_head's weight counts as the head's).
//
// Comments stay out of the table's lines (a line comment would swallow the macro's line continuation).
#pragma once
#include <cstddef>
#include <cstdint>

#include "opmath/op_flops.h"

#define AGOQ_MODEL_OPS(X)                                                                                            \
  X(matmul_forward, gemm, (float* out, const float* in, const float* w, int N, int in_dim, int out_dim),             \
    (out, in, w, N, in_dim, out_dim),                                                                                \
    (2.0 * N * in_dim * out_dim, 4.0 * (double(N) * in_dim + double(in_dim) * out_dim + double(N) * out_dim)))       \
  X(matmul_backward, gemm,                                                                                           \
    (float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim, int out_dim,      \
     bool accumulate_din),                                                                                           \
    (din, dw, dout, in, w, N, in_dim, out_dim, accumulate_din),                                                      \
    (2.0 * N * in_dim * out_dim * ((din ? 1 : 0) + (dw ? 1 : 0)),                                                    \
     4.0 * (double(N) * out_dim + double(N) * in_dim * (dw ? 1 : 0) + double(in_dim) * out_dim * (din ? 1 : 0) +     \
            double(N) * in_dim * (din ? 1 + accumulate_din : 0) + double(in_dim) * out_dim * (dw ? 2 : 0))))         \
  X(rmsnorm_forward, other, (float* out, float* rstd, const float* x, const float* w, int N, int C, float eps),      \
    (out, rstd, x, w, N, C, eps), (0.0, 4.0 * (2.0 * N * C + C + N)))                                                \
  X(rmsnorm_apply, other, (float* out, const float* x, const float* rstd, const float* w, int N, int C),             \
    (out, x, rstd, w, N, C), (0.0, 4.0 * (2.0 * N * C + C + N)))                                                     \
  X(rmsnorm_backward, other,                                                                                         \
    (float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N, int C),      \
    (dx, dw, dout, x, w, rstd, N, C), (0.0, 4.0 * (4.0 * N * C + 3.0 * C + N)))                                      \
  X(rope_forward, other, (float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd),          \
    (x, cos, sin, N, T, n_heads, hd), (0.0, 4.0 * (2.0 * N * n_heads * hd + double(T) * hd)))                        \
  X(rope_backward, other, (float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd),        \
    (dx, cos, sin, N, T, n_heads, hd), (0.0, 4.0 * (2.0 * N * n_heads * hd + double(T) * hd)))                       \
  X(swiglu_forward, other, (float* out, const float* gate, const float* up, size_t n), (out, gate, up, n),           \
    (0.0, 12.0 * n))                                                                                                 \
  X(swiglu_backward, other,                                                                                          \
    (float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n),                     \
    (dgate, dup, dout, gate, up, n), (0.0, 20.0 * n))                                                                \
  X(crossentropy_forward_backward, head,                                                                             \
    (float* logits_to_dlogits, float* losses, const int* targets, int N, int V, float dloss_scale, float* stats),    \
    (logits_to_dlogits, losses, targets, N, V, dloss_scale, stats), (0.0, 8.0 * N * V))                              \
  X(crossentropy_shard_max, head, (const float* logits, int N, int V, float* row_max), (logits, N, V, row_max),      \
    (0.0, 4.0 * N * V))                                                                                              \
  X(crossentropy_shard_exp, head,                                                                                    \
    (float* logits, const int* targets, int N, int V, int v_begin, const float* row_max, float* sums),               \
    (logits, targets, N, V, v_begin, row_max, sums), (0.0, 4.0 * N * V))                                             \
  X(crossentropy_shard_finish, head,                                                                                 \
    (float* logits_to_dlogits, float* losses, const int* targets, int N, int V, int v_begin, const float* row_max,   \
     const float* sums, float dloss_scale),                                                                          \
    (logits_to_dlogits, losses, targets, N, V, v_begin, row_max, sums, dloss_scale), (0.0, 8.0 * N * V))             \
  X(embedding_forward, other, (float* out, const int* tokens, const float* table, int N, int C, int v_begin, int V), \
    (out, tokens, table, N, C, v_begin, V), (0.0, 8.0 * N * C))                                                      \
  X(embedding_backward, other,                                                                                       \
    (float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin, int V),                         \
    (dtable, dout, tokens, N, C, v_begin, V), (0.0, 12.0 * N * C))                                                   \
  X(residual_add, other, (float* out, const float* a, const float* b, size_t n), (out, a, b, n), (0.0, 12.0 * n))    \
  X(attention_forward, attention,                                                                                    \
    (float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H, int Hkv, int hd,     \
     const int32_t* doc_start),                                                                                      \
    (o, lse, q, k, v, B, T, H, Hkv, hd, doc_start),                                                                  \
    (attention_forward_flops(B, H, T, hd), 4.0 * B * T * (2.0 * H * hd + 2.0 * Hkv * hd + H)))                       \
  X(attention_backward, attention,                                                                                   \
    (float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,             \
     const float* o, const float* lse, int B, int T, int H, int Hkv, int hd, const int32_t* doc_start),              \
    (dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, hd, doc_start),                                                \
    (attention_backward_flops(B, H, T, hd), 4.0 * B * T * (4.0 * H * hd + 4.0 * Hkv * hd + H)))

namespace agoq {

// One value per op of the table, in its order.
enum class ModelOp {
#define AGOQ_OP_ENUM(name, cls, params, args, cost) name,
  AGOQ_MODEL_OPS(AGOQ_OP_ENUM)
#undef AGOQ_OP_ENUM
};
#define AGOQ_OP_COUNT(name, cls, params, args, cost) +1
constexpr int kModelOpCount = 0 AGOQ_MODEL_OPS(AGOQ_OP_COUNT);
#undef AGOQ_OP_COUNT
const char* model_op_name(ModelOp op);

// What one call of an op does, from its arguments (the table's last column): the multiply-add work of the GEMMs and
// the attention as FLOPs (0 for the memory-bound ops), and the bytes of every array it reads or writes, each once.
struct OpCost {
  double flops, bytes;
};
#define AGOQ_OP_UNPAREN(...) __VA_ARGS__
#define AGOQ_OP_COST(name, cls, params, args, cost) \
  inline OpCost op_cost_##name params { return OpCost{AGOQ_OP_UNPAREN cost}; }
AGOQ_MODEL_OPS(AGOQ_OP_COST)
#undef AGOQ_OP_COST

}  // namespace agoq

// An op's declaration as an override, for a backend's class (its definitions where the backend is).
#define AGOQ_OP_DECLARE_OVERRIDE(name, cls, params, args, cost) void name params override;

// The model's ops, each listed once: X(name, time class, (parameters), (arguments)). From this table come the
// backend interface (model/backend.h), the forwarders of every backend (the CPU's to model/ops.h, the timed one,
// the test's device-like one, the CUDA backend's declarations) and the op names a backend reports. What each op
// computes, its shapes and its overwrite / accumulate rule are model/ops.h's and model/attention.h's, under the same
// names; the CUDA twins are cuda/ops_cuda.h's. The time class is backend_timed.h's split of a step (a matmul on the
// lm_head's weight counts as the head's).
//
// Comments stay out of the table's lines (a line comment would swallow the macro's line continuation).
#pragma once
#include <cstddef>
#include <cstdint>

#define AGOQ_MODEL_OPS(X)                                                                                            \
  X(matmul_forward, gemm, (float* out, const float* in, const float* w, int N, int in_dim, int out_dim),             \
    (out, in, w, N, in_dim, out_dim))                                                                                \
  X(matmul_backward, gemm,                                                                                           \
    (float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim, int out_dim,      \
     bool accumulate_din),                                                                                           \
    (din, dw, dout, in, w, N, in_dim, out_dim, accumulate_din))                                                      \
  X(rmsnorm_forward, other, (float* out, float* rstd, const float* x, const float* w, int N, int C, float eps),      \
    (out, rstd, x, w, N, C, eps))                                                                                    \
  X(rmsnorm_apply, other, (float* out, const float* x, const float* rstd, const float* w, int N, int C),             \
    (out, x, rstd, w, N, C))                                                                                         \
  X(rmsnorm_backward, other,                                                                                         \
    (float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N, int C),      \
    (dx, dw, dout, x, w, rstd, N, C))                                                                                \
  X(rope_forward, other, (float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd),          \
    (x, cos, sin, N, T, n_heads, hd))                                                                                \
  X(rope_backward, other, (float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd),        \
    (dx, cos, sin, N, T, n_heads, hd))                                                                               \
  X(swiglu_forward, other, (float* out, const float* gate, const float* up, size_t n), (out, gate, up, n))           \
  X(swiglu_backward, other,                                                                                          \
    (float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n),                     \
    (dgate, dup, dout, gate, up, n))                                                                                 \
  X(crossentropy_forward_backward, head,                                                                             \
    (float* logits_to_dlogits, float* losses, const int* targets, int N, int V, float dloss_scale, float* stats),    \
    (logits_to_dlogits, losses, targets, N, V, dloss_scale, stats))                                                  \
  X(crossentropy_shard_max, head, (const float* logits, int N, int V, float* row_max), (logits, N, V, row_max))      \
  X(crossentropy_shard_exp, head,                                                                                    \
    (float* logits, const int* targets, int N, int V, int v_begin, const float* row_max, float* sums),               \
    (logits, targets, N, V, v_begin, row_max, sums))                                                                 \
  X(crossentropy_shard_finish, head,                                                                                 \
    (float* logits_to_dlogits, float* losses, const int* targets, int N, int V, int v_begin, const float* row_max,   \
     const float* sums, float dloss_scale),                                                                          \
    (logits_to_dlogits, losses, targets, N, V, v_begin, row_max, sums, dloss_scale))                                 \
  X(embedding_forward, other, (float* out, const int* tokens, const float* table, int N, int C, int v_begin, int V), \
    (out, tokens, table, N, C, v_begin, V))                                                                          \
  X(embedding_backward, other,                                                                                       \
    (float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin, int V),                         \
    (dtable, dout, tokens, N, C, v_begin, V))                                                                        \
  X(residual_add, other, (float* out, const float* a, const float* b, size_t n), (out, a, b, n))                     \
  X(attention_forward, attention,                                                                                    \
    (float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H, int Hkv, int hd,     \
     const int32_t* doc_start),                                                                                      \
    (o, lse, q, k, v, B, T, H, Hkv, hd, doc_start))                                                                  \
  X(attention_backward, attention,                                                                                   \
    (float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,             \
     const float* o, const float* lse, int B, int T, int H, int Hkv, int hd, const int32_t* doc_start),              \
    (dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, hd, doc_start))

namespace agoq {

// One value per op of the table, in its order.
enum class ModelOp {
#define AGOQ_OP_ENUM(name, cls, params, args) name,
  AGOQ_MODEL_OPS(AGOQ_OP_ENUM)
#undef AGOQ_OP_ENUM
};
#define AGOQ_OP_COUNT(name, cls, params, args) +1
constexpr int kModelOpCount = 0 AGOQ_MODEL_OPS(AGOQ_OP_COUNT);
#undef AGOQ_OP_COUNT
const char* model_op_name(ModelOp op);

}  // namespace agoq

// An op's declaration as an override, for a backend's class (its definitions where the backend is).
#define AGOQ_OP_DECLARE_OVERRIDE(name, cls, params, args) void name params override;

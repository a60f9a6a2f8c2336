// The CPU backend: model/ops.h on host memory, through the global tracker.
#include <cstring>

#include "model/act_store.h"
#include "model/backend.h"
#include "model/ops.h"

namespace agoq {

namespace {

class CpuBackend final : public ModelBackend {
 public:
  MemDevice device() const override { return MemDevice::host; }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    void* p = MemoryTracker::global().allocate(bytes, cat, tag);
    std::memset(p, 0, bytes);
    return std::shared_ptr<void>(p, [](void* q) { MemoryTracker::global().release(q); });
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes && dst != host) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes && host != src) std::memcpy(host, src, bytes);
  }
  void zero(float* x, size_t n) override { std::memset(x, 0, n * sizeof(float)); }
  std::unique_ptr<ActStoreApi> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                          const ModelStage& stage) override {
    return std::make_unique<ActivationStore>(cfg, max_rows, policy, stage);
  }

  void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) override {
    agoq::matmul_forward(out, in, w, N, in_dim, out_dim);
  }
  void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim,
                       int out_dim, bool accumulate_din) override {
    agoq::matmul_backward(din, dw, dout, in, w, N, in_dim, out_dim, accumulate_din);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    agoq::rmsnorm_forward(out, rstd, x, w, N, C, eps);
  }
  void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) override {
    agoq::rmsnorm_apply(out, x, rstd, w, N, C);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    agoq::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) override {
    agoq::rope_forward(x, cos, sin, N, T, n_heads, hd);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) override {
    agoq::rope_backward(dx, cos, sin, N, T, n_heads, hd);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    agoq::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    agoq::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  // The three phases in a row with nothing between them (ops.h: crossentropy_forward_backward's definition),
  // here on the caller's scratch; targets are checked where they are read, on the host (LlamaModel::stage_head).
  void crossentropy_forward_backward(float* logits, float* losses, const int* targets, int N, int V,
                                     float dloss_scale, float* stats) override {
    agoq::crossentropy_shard_max(logits, N, V, stats);
    agoq::crossentropy_shard_exp(logits, targets, N, V, 0, stats, stats + N);
    agoq::crossentropy_shard_finish(logits, losses, targets, N, V, 0, stats, stats + N, dloss_scale);
  }
  void crossentropy_shard_max(const float* logits, int N, int V, float* row_max) override {
    agoq::crossentropy_shard_max(logits, N, V, row_max);
  }
  void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin, const float* row_max,
                              float* sums) override {
    agoq::crossentropy_shard_exp(logits, targets, N, V, v_begin, row_max, sums);
  }
  void crossentropy_shard_finish(float* logits, float* losses, const int* targets, int N, int V, int v_begin,
                                 const float* row_max, const float* sums, float dloss_scale) override {
    agoq::crossentropy_shard_finish(logits, losses, targets, N, V, v_begin, row_max, sums, dloss_scale);
  }
  void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin,
                         int V) override {
    agoq::embedding_forward(out, tokens, table, N, C, v_begin, V);
  }
  void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin,
                          int V) override {
    agoq::embedding_backward(dtable, dout, tokens, N, C, v_begin, V);
  }
  void residual_add(float* out, const float* a, const float* b, size_t n) override {
    agoq::residual_add(out, a, b, n);
  }
  void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                         int Hkv, int hd, const int32_t* doc_start) override {
    agoq::attention_forward(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv,
                          int hd, const int32_t* doc_start) override {
    agoq::attention_backward(dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, hd, doc_start);
  }
};

}  // namespace

ModelBackend& model_backend_cpu() {
  static CpuBackend cpu;
  return cpu;
}

}  // namespace agoq

// A backend that runs another's ops and adds up their wall time by class (`agoq train --profile`): where a training
// step goes, so the next bottleneck is visible. Ops run one at a time from the model's thread (each parallel inside),
// so a call's wall time is its own.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <memory>

#include "model/backend.h"

namespace agoq {

enum class OpClass { gemm, attention, head, act_store, other };
constexpr int kOpClassCount = 5;
// "gemm" (the layers' matmuls), "attention", "head" (the lm_head's matmuls and the cross-entropy), "act_store"
// (saving and loading activations: the quantization of a quantized slot), "other" (norms, RoPE, SwiGLU, residual
// adds, the embedding, zeroing).
const char* op_class_name(OpClass c);
const char* op_class_label(OpClass c);  // for people: "GEMMs", "attention", "LM head + loss", ...

struct OpSeconds {
  std::array<double, kOpClassCount> s{};
  double& operator[](OpClass c) { return s[size_t(c)]; }
  double operator[](OpClass c) const { return s[size_t(c)]; }
  double total() const;
};

class TimedBackend final : public ModelBackend {
 public:
  explicit TimedBackend(ModelBackend& inner) : inner_(inner) {}
  // The lm_head's weights (rows x cols from w): matmuls on them count as the head's.
  void head_weights_are(const float* w, size_t n) { head_begin_ = w, head_end_ = w + n; }
  // The time since the last take, and a fresh count.
  OpSeconds take();

  MemDevice device() const override { return inner_.device(); }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    return inner_.allocate(bytes, cat, tag);
  }
  void upload(void* dst, const void* host, size_t bytes) override { inner_.upload(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { inner_.download(host, src, bytes); }
  void zero(float* x, size_t n) override;
  std::unique_ptr<ActStoreApi> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                          const ModelStage& stage) override;
  bool host_memory() const override { return inner_.host_memory(); }
  void weights_changed() override { inner_.weights_changed(); }

  void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) override;
  void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim,
                       int out_dim, bool accumulate_din) override;
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override;
  void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override;
  void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) override;
  void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) override;
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override;
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override;
  void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                     float dloss_scale, float* stats) override;
  void crossentropy_shard_max(const float* logits, int N, int V, float* row_max) override;
  void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin, const float* row_max,
                              float* sums) override;
  void crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                 int v_begin, const float* row_max, const float* sums, float dloss_scale) override;
  void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin,
                         int V) override;
  void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin,
                          int V) override;
  void residual_add(float* out, const float* a, const float* b, size_t n) override;
  void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                         int Hkv, int hd, const int32_t* doc_start) override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv, int hd,
                          const int32_t* doc_start) override;

 private:
  friend class TimedStore;
  // Runs f and adds its wall time to class c.
  template <class F>
  void timed(OpClass c, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    seconds_[c] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  OpClass matmul_class(const float* w) const { return w >= head_begin_ && w < head_end_ ? OpClass::head : OpClass::gemm; }

  ModelBackend& inner_;
  const float *head_begin_ = nullptr, *head_end_ = nullptr;
  OpSeconds seconds_;
};

}  // namespace agoq

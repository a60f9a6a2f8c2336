#include "model/backend_timed.h"

#include <numeric>

#include "arch/act_store_api.h"

namespace agoq {

const char* op_class_name(OpClass c) {
  static constexpr const char* kNames[kOpClassCount] = {"gemm", "attention", "head", "act_store", "other"};
  return kNames[int(c)];
}

const char* op_class_label(OpClass c) {
  static constexpr const char* kLabels[kOpClassCount] = {"GEMMs", "attention", "LM head + loss", "activation store",
                                                         "other ops"};
  return kLabels[int(c)];
}

double OpSeconds::total() const { return std::accumulate(s.begin(), s.end(), 0.0); }

OpSeconds TimedBackend::take() {
  const OpSeconds out = seconds_;
  seconds_ = {};
  return out;
}

// The inner backend's store, its saves and loads timed (the quantize and dequantize passes of quantized slots).
class TimedStore final : public ActStoreApi {
 public:
  TimedStore(std::unique_ptr<ActStoreApi> inner, TimedBackend& owner) : inner_(std::move(inner)), owner_(owner) {}
  const ActPolicy& policy() const override { return inner_->policy(); }
  bool stored(int layer, ActSlot s) const override { return inner_->stored(layer, s); }
  const QuantFormat& format(int layer, ActSlot s) const override { return inner_->format(layer, s); }
  bool is_fp32(int layer, ActSlot s) const override { return inner_->is_fp32(layer, s); }
  int cols(ActSlot s) const override { return inner_->cols(s); }
  void set_seed(uint64_t seed) override { inner_->set_seed(seed); }
  QuantSeed slot_seed(int layer, ActSlot s) const override { return inner_->slot_seed(layer, s); }
  float* fp32_data(int layer, ActSlot s) override { return inner_->fp32_data(layer, s); }
  size_t stored_bytes(bool attention) const override { return inner_->stored_bytes(attention); }
  void save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) override {
    owner_.timed(OpClass::act_store, [&] { inner_->save_rows(layer, s, r0, rows, src); });
  }
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const override {
    const float* out = nullptr;
    owner_.timed(OpClass::act_store, [&] { out = inner_->load_rows(layer, s, r0, rows, buf); });
    return out;
  }
  void set_calibration(bool on) override { inner_->set_calibration(on); }
  const std::array<double, kActSlotCount>& sensitivity() const override { return inner_->sensitivity(); }

 private:
  std::unique_ptr<ActStoreApi> inner_;
  TimedBackend& owner_;
};

std::unique_ptr<ActStoreApi> TimedBackend::store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                                      const ModelStage& stage) {
  return std::make_unique<TimedStore>(inner_.store_make(cfg, max_rows, policy, stage), *this);
}

void TimedBackend::zero(float* x, size_t n) {
  timed(OpClass::other, [&] { inner_.zero(x, n); });
}
void TimedBackend::matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) {
  timed(matmul_class(w), [&] { inner_.matmul_forward(out, in, w, N, in_dim, out_dim); });
}
void TimedBackend::matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N,
                                   int in_dim, int out_dim, bool accumulate_din) {
  timed(matmul_class(w), [&] { inner_.matmul_backward(din, dw, dout, in, w, N, in_dim, out_dim, accumulate_din); });
}
void TimedBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  timed(OpClass::other, [&] { inner_.rmsnorm_forward(out, rstd, x, w, N, C, eps); });
}
void TimedBackend::rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) {
  timed(OpClass::other, [&] { inner_.rmsnorm_apply(out, x, rstd, w, N, C); });
}
void TimedBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                    const float* rstd, int N, int C) {
  timed(OpClass::other, [&] { inner_.rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C); });
}
void TimedBackend::rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  timed(OpClass::other, [&] { inner_.rope_forward(x, cos, sin, N, T, n_heads, hd); });
}
void TimedBackend::rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  timed(OpClass::other, [&] { inner_.rope_backward(dx, cos, sin, N, T, n_heads, hd); });
}
void TimedBackend::swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  timed(OpClass::other, [&] { inner_.swiglu_forward(out, gate, up, n); });
}
void TimedBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                   size_t n) {
  timed(OpClass::other, [&] { inner_.swiglu_backward(dgate, dup, dout, gate, up, n); });
}
void TimedBackend::crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N,
                                                 int V, float dloss_scale, float* stats) {
  timed(OpClass::head,
        [&] { inner_.crossentropy_forward_backward(logits_to_dlogits, losses, targets, N, V, dloss_scale, stats); });
}
void TimedBackend::crossentropy_shard_max(const float* logits, int N, int V, float* row_max) {
  timed(OpClass::head, [&] { inner_.crossentropy_shard_max(logits, N, V, row_max); });
}
void TimedBackend::crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin,
                                          const float* row_max, float* sums) {
  timed(OpClass::head, [&] { inner_.crossentropy_shard_exp(logits, targets, N, V, v_begin, row_max, sums); });
}
void TimedBackend::crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N,
                                             int V, int v_begin, const float* row_max, const float* sums,
                                             float dloss_scale) {
  timed(OpClass::head, [&] {
    inner_.crossentropy_shard_finish(logits_to_dlogits, losses, targets, N, V, v_begin, row_max, sums, dloss_scale);
  });
}
void TimedBackend::embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin,
                                     int V) {
  timed(OpClass::other, [&] { inner_.embedding_forward(out, tokens, table, N, C, v_begin, V); });
}
void TimedBackend::embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin,
                                      int V) {
  timed(OpClass::other, [&] { inner_.embedding_backward(dtable, dout, tokens, N, C, v_begin, V); });
}
void TimedBackend::residual_add(float* out, const float* a, const float* b, size_t n) {
  timed(OpClass::other, [&] { inner_.residual_add(out, a, b, n); });
}
void TimedBackend::attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B,
                                     int T, int H, int Hkv, int hd, const int32_t* doc_start) {
  timed(OpClass::attention, [&] { inner_.attention_forward(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start); });
}
void TimedBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                      const float* k, const float* v, const float* o, const float* lse, int B, int T,
                                      int H, int Hkv, int hd, const int32_t* doc_start) {
  timed(OpClass::attention,
        [&] { inner_.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, hd, doc_start); });
}

}  // namespace agoq

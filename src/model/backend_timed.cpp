#include "model/backend_timed.h"

#include <numeric>

#include "arch/act_store.h"

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

std::map<OpShape, OpCalls> TimedBackend::take_calls() { return std::exchange(calls_, {}); }

// The inner backend's store, its saves and loads timed (the quantize and dequantize passes of quantized slots).
class TimedStore final : public ActStore {
 public:
  TimedStore(std::unique_ptr<ActStore> inner, TimedBackend& owner) : inner_(std::move(inner)), owner_(owner) {}
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
  std::unique_ptr<ActStore> inner_;
  TimedBackend& owner_;
};

std::unique_ptr<ActStore> TimedBackend::store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                                   const ModelStage& stage) {
  return std::make_unique<TimedStore>(inner_.store_make(cfg, max_rows, policy, stage), *this);
}

void TimedBackend::zero(float* x, size_t n) {
  timed(OpClass::other, [&] { inner_.zero(x, n); });
}
#define AGOQ_OP_TIMED(name, cls, params, args, cost)                                                 \
  void TimedBackend::name params {                                                                   \
    const double s = timed(class_of(OpClass::cls, AGOQ_OP_UNPAREN args), [&] { inner_.name args; }); \
    count(ModelOp::name, op_cost_##name args, s, AGOQ_OP_UNPAREN args);                              \
  }
AGOQ_MODEL_OPS(AGOQ_OP_TIMED)
#undef AGOQ_OP_TIMED

// A shared input's products: one time for them all, counted as their matmuls, each its share by its FLOPs.
void TimedBackend::matmul_forward_shared(const float* in, int N, int in_dim, std::initializer_list<MatmulOut> outs) {
  const double s = timed(OpClass::gemm, [&] { inner_.matmul_forward_shared(in, N, in_dim, outs); });
  double total = 0;
  for (const MatmulOut& o : outs) total += o.out_dim;
  for (const MatmulOut& o : outs)
    count(ModelOp::matmul_forward, op_cost_matmul_forward(o.out, in, o.w, N, in_dim, o.out_dim), s * o.out_dim / total,
          N, in_dim, o.out_dim);
}

void TimedBackend::matmul_backward_shared(float* din, const float* in, int N, int in_dim,
                                          std::initializer_list<MatmulGrad> parts) {
  const double s = timed(OpClass::gemm, [&] { inner_.matmul_backward_shared(din, in, N, in_dim, parts); });
  double total = 0;
  for (const MatmulGrad& p : parts) total += p.out_dim;
  bool first = true;
  for (const MatmulGrad& p : parts) {
    const OpCost cost = op_cost_matmul_backward(din, p.dw, p.dout, in, p.w, N, in_dim, p.out_dim, !first);
    count(ModelOp::matmul_backward, cost, s * p.out_dim / total, N, in_dim, p.out_dim), first = false;
  }
}

}  // namespace agoq

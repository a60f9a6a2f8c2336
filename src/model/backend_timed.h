// A backend that runs another's ops and adds up their wall time by class (`agoq train --profile`): where a training
// step goes, so the next bottleneck is visible. Ops run one at a time from the model's thread (each parallel inside),
// so a call's wall time is its own; a device backend is synchronized before and after each, so the time is the op's
// run, not its launch.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "model/backend.h"

namespace agoq {

enum class OpClass { gemm, attention, head, act_store, other };
constexpr int kOpClassCount = 5;
// "gemm" (the layers' matmuls), "attention", "head" (the lm_head's matmuls and the cross-entropy), "act_store"
// (saving and loading activations: the quantization of a quantized slot), "other" (norms, RoPE, SwiGLU, residual
// adds, the embedding, zeroing).
const char* op_class_name(OpClass c);
const char* op_class_label(OpClass c);  // for people: "GEMMs", "attention", "LM head + loss", ...

// The calls of one op at one shape since the last take_calls: their count, wall time and cost (model/op_table.h).
struct OpCalls {
  long calls = 0;
  double seconds = 0, flops = 0, bytes = 0;
};
// An op and its integer arguments in the table's order ("256x256x688": matmul_forward's N, in_dim, out_dim).
using OpShape = std::pair<ModelOp, std::string>;

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
  // Each op's calls by shape since the last take_calls, and a fresh count.
  std::map<OpShape, OpCalls> take_calls();

  MemDevice device() const override { return inner_.device(); }
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    return inner_.allocate(bytes, cat, tag);
  }
  void upload(void* dst, const void* host, size_t bytes) override { inner_.upload(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { inner_.download(host, src, bytes); }
  void zero(float* x, size_t n) override;
  std::unique_ptr<ActStore> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                       const ModelStage& stage) override;
  bool host_memory() const override { return inner_.host_memory(); }
  void weights_changed() override { inner_.weights_changed(); }
  GemmPrecision gemm_precision() const override { return inner_.gemm_precision(); }
  void synchronize() override { inner_.synchronize(); }

  bool supports(ModelOp op) const override { return inner_.supports(op); }
  AGOQ_MODEL_OPS(AGOQ_OP_DECLARE_OVERRIDE)
  void matmul_forward_shared(const float* in, int N, int in_dim, std::initializer_list<MatmulOut> outs) override;
  void matmul_backward_shared(float* din, const float* in, int N, int in_dim,
                              std::initializer_list<MatmulGrad> parts) override;
  void mlp_forward_only(float* out, const float* in, const float* w_gate, const float* w_up, const float* w_down, int N,
                        int C, int F, float* gate, float* up) override {
    timed(OpClass::gemm, [&] { inner_.mlp_forward_only(out, in, w_gate, w_up, w_down, N, C, F, gate, up); });
  }
  bool attention_gaps_supported() const override { return inner_.attention_gaps_supported(); }
  void attention_forward_gaps(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                              int Hkv, int hd, const int32_t* doc_start, const int32_t* gaps) override {
    timed(OpClass::attention,
          [&] { inner_.attention_forward_gaps(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start, gaps); });
  }

 private:
  friend class TimedStore;
  // Runs f and adds its wall time to class c; returns it.
  template <class F>
  double timed(OpClass c, F&& f) {
    inner_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    inner_.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds_[c] += s;
    return s;
  }
  template <class... Args>
  void count(ModelOp op, const OpCost& cost, double seconds, const Args&... args) {
    std::string shape;
    const auto add = [&shape](const auto& a) {
      using A = std::decay_t<decltype(a)>;
      if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
        if (!shape.empty()) shape += 'x';
        shape += std::to_string(a);  // appended apart: g++ 12 warns (-Wrestrict) on "x" + to_string here
      }
    };
    (add(args), ...);
    OpCalls& c = calls_[{op, std::move(shape)}];
    c.calls += 1, c.seconds += seconds, c.flops += cost.flops, c.bytes += cost.bytes;
  }
  // An op's class: the table's, except that a matmul reading the lm_head's weights is the head's.
  template <class... Args>
  OpClass class_of(OpClass table_class, const Args&... args) const {
    return table_class == OpClass::gemm && (reads_head(args) || ...) ? OpClass::head : table_class;
  }
  template <class A>
  bool reads_head(const A& a) const {
    if constexpr (std::is_same_v<A, const float*>)
      return std::less_equal<>()(head_begin_, a) && std::less<>()(a, head_end_);
    return false;
  }

  ModelBackend& inner_;
  const float *head_begin_ = nullptr, *head_end_ = nullptr;
  OpSeconds seconds_;
  std::map<OpShape, OpCalls> calls_;
};

}  // namespace agoq

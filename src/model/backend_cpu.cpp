// The CPU backend: model/ops.h on host memory, through the global tracker; every op of the table forwarded. With
// GemmPrecision::bf16 the GEMMs read bf16 copies (model/gemm_bf16.h), as the CUDA backend's do.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>

#include "core/error.h"
#include "model/act_store_cpu.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/gemm_bf16.h"
#include "model/ops.h"

namespace agoq {

namespace {

class CpuBackend : public ModelBackend {
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
  std::unique_ptr<ActStore> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                       const ModelStage& stage) override {
    return std::make_unique<CpuActStore>(cfg, max_rows, policy, stage);
  }

#define AGOQ_OP_CPU(name, cls, params, args, cost) \
  void name params override { agoq::name args; }
  AGOQ_MODEL_OPS(AGOQ_OP_CPU)
#undef AGOQ_OP_CPU
  bool attention_gaps_supported() const override { return true; }
  void attention_forward_gaps(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                              int Hkv, int hd, const int32_t* doc_start, const int32_t* gaps) override {
    agoq::attention_forward(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start, gemm_precision(), gaps);
  }
};

// Mixed precision as Megatron does it: every GEMM reads bf16 copies of its weights and of its other input and
// accumulates in fp32; outputs, gradients, master weights and the optimizer stay fp32. A weight's copy (category
// weights) is made by the first GEMM that reads it after weights_changed(), which the model calls when it writes
// its weights and the training step after each update; copies are keyed by address, so a new allocation (which may
// reuse a freed one's) drops them all. With Bf16Weights::per_gemm there are no copies: each GEMM rounds its weight
// into a third scratch buffer. An activation is rounded into one of two scratch buffers (workspace), grown to the
// largest GEMM's.
class CpuBf16Backend final : public CpuBackend {
 public:
  CpuBf16Backend(Bf16Weights weights, size_t block_values)
      : cached_(weights == Bf16Weights::cached), block_values_(block_values) {}
  std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) override {
    weights_.clear();
    return CpuBackend::allocate(bytes, cat, tag);
  }
  void weights_changed() override { ++version_; }
  GemmPrecision gemm_precision() const override { return GemmPrecision::bf16; }

  // out (N, out) = in (N, in) · wᵀ, by blocks of w's rows (output columns) when per_gemm rounds a large weight.
  void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) override {
    forward_rounded(out, rounded(in, size_t(N) * in_dim, 0), w, N, in_dim, out_dim);
  }
  void matmul_forward_shared(const float* in, int N, int in_dim, std::initializer_list<MatmulOut> outs) override {
    const uint16_t* in16 = rounded(in, size_t(N) * in_dim, 0);
    for (const MatmulOut& o : outs) forward_rounded(o.out, in16, o.w, N, in_dim, o.out_dim);
  }
  // gate and up in the GEMMs' epilogues: swish(gate) in fp32, its product with up rounded straight to bf16 (no
  // fp32 SwiGLU output, no pass that rounds it), the down projection's input.
  void mlp_forward_only(float* out, const float* in, const float* w_gate, const float* w_up, const float* w_down, int N,
                        int C, int F, float* gate, float* up) override {
    if (!cached_) return ModelBackend::mlp_forward_only(out, in, w_gate, w_up, w_down, N, C, F, gate, up);
    const size_t w = size_t(F) * C;
    const GemmOperand in16{rounded(in, size_t(N) * C, 0), false, C};
    uint16_t* s16 = reinterpret_cast<uint16_t*>(up);  // up's scratch holds the bf16 product
    gemm_.multiply_swiglu(N, F, C, in16, {weight(w_gate, w), true, C}, {weight(w_up, w), true, C}, gate, s16);
    gemm_.multiply(N, C, F, {s16, false, F}, {weight(w_down, size_t(C) * F), true, F}, out, C, false);
  }
  // din (N, in) = dout (N, out) · w (summed over blocks of w's rows when per_gemm rounds a large weight);
  // dw (out, in) += doutᵀ · in
  void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim,
                       int out_dim, bool accumulate_din) override {
    const uint16_t* in16 = dw ? rounded(in, size_t(N) * in_dim, 0) : nullptr;
    backward_rounded(din, dw, dout, in16, w, N, in_dim, out_dim, accumulate_din);
  }
  void matmul_backward_shared(float* din, const float* in, int N, int in_dim,
                              std::initializer_list<MatmulGrad> parts) override {
    const bool any_dw = std::any_of(parts.begin(), parts.end(), [](const MatmulGrad& p) { return p.dw != nullptr; });
    const uint16_t* in16 = any_dw ? rounded(in, size_t(N) * in_dim, 0) : nullptr;
    bool first = true;
    for (const MatmulGrad& p : parts)
      backward_rounded(din, p.dw, p.dout, in16, p.w, N, in_dim, p.out_dim, !first), first = false;
  }
  // Attention's tile products on bf16 inputs too (model/attention.h).
  void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                         int Hkv, int hd, const int32_t* doc_start) override {
    agoq::attention_forward(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start, GemmPrecision::bf16);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv, int hd,
                          const int32_t* doc_start) override {
    agoq::attention_backward(dq, dk, dv, dout, q, k, v, o, lse, B, T, H, Hkv, hd, doc_start, GemmPrecision::bf16);
  }

 private:
  struct WeightCopy {
    Buffer<uint16_t> bits;
    long version = -1;
  };
  int weight_block_rows(int rows, int cols) const {
    return cached_ ? rows : int(gemm_bf16_weight_block_rows(size_t(rows), size_t(cols), block_values_));
  }
  // The copy of w[0, n): a weight's own, or a part of a larger one's (an lm_head piece, --lm-head-grad pieces).
  const uint16_t* weight(const float* w, size_t n) {
    if (!cached_) return rounded(w, n, 2);
    auto it = weights_.upper_bound(w);
    if (it != weights_.begin()) {
      WeightCopy& c = std::prev(it)->second;
      const float* start = std::prev(it)->first;
      if (w + n <= start + c.bits.size()) return fresh(c, start) + (w - start);
    }
    WeightCopy& c = weights_[w];
    c.bits = Buffer<uint16_t>(n, MemCategory::weights, "weights.bf16"), c.version = -1;
    return fresh(c, w);
  }
  const uint16_t* fresh(WeightCopy& c, const float* w) {
    if (c.version != version_) f32_to_bf16_rows(c.bits.data(), w, c.bits.size()), c.version = version_;
    return c.bits.data();
  }
  // matmul_forward and matmul_backward on their input rounded (in16, slot 0).
  void forward_rounded(float* out, const uint16_t* in16, const float* w, int N, int in_dim, int out_dim) {
    const int rows = weight_block_rows(out_dim, in_dim);
    for (int o0 = 0; o0 < out_dim; o0 += rows) {
      const int n = std::min(rows, out_dim - o0);
      gemm_.multiply(N, n, in_dim, {in16, false, in_dim},
                     {weight(w + size_t(o0) * in_dim, size_t(n) * in_dim), true, in_dim}, out + o0, out_dim, false);
    }
  }
  void backward_rounded(float* din, float* dw, const float* dout, const uint16_t* in16, const float* w, int N,
                        int in_dim, int out_dim, bool accumulate_din) {
    const uint16_t* dout16 = rounded(dout, size_t(N) * out_dim, 1);
    const int rows = weight_block_rows(out_dim, in_dim);
    for (int o0 = 0; din && o0 < out_dim; o0 += rows) {
      const int n = std::min(rows, out_dim - o0);
      gemm_.multiply(N, in_dim, n, {dout16 + o0, false, out_dim},
                     {weight(w + size_t(o0) * in_dim, size_t(n) * in_dim), false, in_dim}, din, in_dim,
                     accumulate_din || o0 > 0);
    }
    if (dw) gemm_.multiply(out_dim, in_dim, N, {dout16, true, out_dim}, {in16, false, in_dim}, dw, in_dim, true);
  }
  // x[0, n) rounded into scratch slot: 0 a GEMM's activation, 1 its output gradient, 2 (per_gemm) its weight.
  const uint16_t* rounded(const float* x, size_t n, int slot) {
    Buffer<uint16_t>& s = scratch_[slot];
    if (s.size() < n) s = Buffer<uint16_t>(), s = Buffer<uint16_t>(n, MemCategory::workspace, "gemm.bf16");
    f32_to_bf16_rows(s.data(), x, n);
    return s.data();
  }

  GemmBf16 gemm_;
  std::map<const float*, WeightCopy> weights_;  // by address, so a part finds the copy that holds it
  long version_ = 0;
  const bool cached_;
  const size_t block_values_;
  Buffer<uint16_t> scratch_[3];  // a GEMM's activation, its output gradient and (per_gemm) its weight
};

}  // namespace

std::unique_ptr<ModelBackend> model_backend_cpu_bf16(Bf16Weights weights, size_t block_values) {
  return std::make_unique<CpuBf16Backend>(weights, block_values);
}

void ModelBackend::matmul_forward_shared(const float* in, int N, int in_dim, std::initializer_list<MatmulOut> outs) {
  for (const MatmulOut& o : outs) matmul_forward(o.out, in, o.w, N, in_dim, o.out_dim);
}

void ModelBackend::matmul_backward_shared(float* din, const float* in, int N, int in_dim,
                                          std::initializer_list<MatmulGrad> parts) {
  bool first = true;
  for (const MatmulGrad& p : parts)
    matmul_backward(din, p.dw, p.dout, in, p.w, N, in_dim, p.out_dim, !first), first = false;
}

void ModelBackend::mlp_forward_only(float* out, const float* in, const float* w_gate, const float* w_up,
                                    const float* w_down, int N, int C, int F, float* gate, float* up) {
  matmul_forward(gate, in, w_gate, N, C, F);
  matmul_forward(up, in, w_up, N, C, F);
  swiglu_forward(gate, gate, up, size_t(N) * F);
  matmul_forward(out, gate, w_down, N, F, C);
}

void ModelBackend::attention_forward_gaps(float*, float*, const float*, const float*, const float*, int, int, int, int,
                                          int, const int32_t*, const int32_t*) {
  fail("attention with gaps (shared contexts): this backend has none; the CPU's scores them");
}

const char* model_op_name(ModelOp op) {
#define AGOQ_OP_NAME(name, cls, params, args, cost) #name,
  static constexpr const char* kNames[] = {AGOQ_MODEL_OPS(AGOQ_OP_NAME)};
#undef AGOQ_OP_NAME
  return kNames[int(op)];
}

ModelBackend& model_backend_cpu() {
  static CpuBackend cpu;
  return cpu;
}

}  // namespace agoq

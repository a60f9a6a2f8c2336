// Where the model computes: the ops of model/op_table.h (model/ops.h's and model/attention.h's, with the same
// signatures, shapes and overwrite / accumulate rules), on the memory of one device. LlamaModel (model/llama.h)
// calls only these, on buffers the backend allocates, so one model file runs on the CPU (model_backend_cpu(),
// below: the OpenBLAS and OpenMP ops) and on the GPU (cuda_train/backend_cuda.h: the CUDA twins of cuda/ops_cuda.h).
// Like the tensor group, a backend is implemented where its device is and handed to the model at construction.
//
// Pointers are the backend's memory (host or device) except where a comment says host. Calls on one backend are
// ordered; download waits for the work before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "arch/act_store.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "core/enum_names.h"
#include "core/memory.h"
#include "model/gemm_bf16.h"
#include "model/op_table.h"

namespace agoq {

// An owning, tracked allocation of n values of T on a backend's device (zero-filled), shared by its copies.
template <class T>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(std::shared_ptr<void> p, size_t n) : p_(std::move(p)), n_(n) {}
  T* data() const { return static_cast<T*>(p_.get()); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  void reset() { p_.reset(), n_ = 0; }

 private:
  std::shared_ptr<void> p_;
  size_t n_ = 0;
};

// What `--compute` asks for: auto is bf16 where the device multiplies bf16 natively (model_compute_choose).
enum class ComputeMode : uint8_t { automatic, bf16, fp32 };
inline constexpr EnumName<ComputeMode> kComputeNames[] = {
    {ComputeMode::automatic, "auto"}, {ComputeMode::bf16, "bf16"}, {ComputeMode::fp32, "fp32"}};
inline constexpr const char* kComputeHelp =
    "GEMM precision: auto (bf16 where the CPU has AVX512-BF16 or AMX-BF16, else fp32), bf16 (bf16 inputs, fp32 "
    "accumulation and masters) or fp32";
// Where bf16 GEMMs find a weight's bf16 values (`--bf16-weights`): a copy of each weight kept from one optimizer
// step to the next (2 bytes a parameter, category weights), or the weight rounded into scratch by each GEMM that
// reads it (no copies; one more pass over the weight per GEMM: what a model that only just fits memory takes).
enum class Bf16Weights : uint8_t { cached, per_gemm };
inline constexpr EnumName<Bf16Weights> kBf16WeightsNames[] = {{Bf16Weights::cached, "cached"},
                                                              {Bf16Weights::per_gemm, "per-gemm"}};
inline constexpr const char* kBf16WeightsHelp =
    "with bf16 GEMMs on the CPU: cached (a bf16 copy of each weight, made once per optimizer step: 2 bytes a "
    "parameter) or per-gemm (each GEMM rounds the weight it reads: no copies, one more pass over the weights per "
    "GEMM)";
struct ComputeChoice {
  GemmPrecision gemm;
  std::string why;  // for the run's first lines: "bf16: this CPU has AMX-BF16"
};
// The precision of `mode` on the CPU (gpu false) or the GPU: auto is bf16 on a GPU and on a CPU with AVX512-BF16 or
// AMX-BF16 (oneDNN's effective ISA), fp32 elsewhere; bf16 on a CPU without them is refused, naming --compute.
ComputeChoice model_compute_choose(ComputeMode mode, bool gpu);

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual MemDevice device() const = 0;  // whose tracker counts its allocations

  // ---- memory ----
  virtual std::shared_ptr<void> allocate(size_t bytes, MemCategory cat, std::string_view tag) = 0;  // zero-filled
  template <class T>
  BackendBuffer<T> buffer(size_t n, MemCategory cat, std::string_view tag = {}) {
    return n ? BackendBuffer<T>(allocate(n * sizeof(T), cat, tag), n) : BackendBuffer<T>();
  }
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  virtual void zero(float* x, size_t n) = 0;
  // An activation store on this device (arch/act_store.h), allocating act_store_bytes.
  virtual std::unique_ptr<ActStore> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                               const ModelStage& stage) = 0;
  // Tensor parallelism's collectives (model/tensor_group.h) work on host memory: a backend says if it can join them.
  virtual bool host_memory() const { return device() == MemDevice::host; }
  // The weights were written (an optimizer step, new values uploaded): a backend that keeps copies of them (bf16
  // for the GEMMs) makes them again. The CPU keeps none.
  virtual void weights_changed() {}
  // What its GEMMs read: fp32, or bf16 copies of their inputs (`--compute`).
  virtual GemmPrecision gemm_precision() const { return GemmPrecision::fp32; }
  // Waits for the work queued so far: a device backend queues its ops on a stream; the CPU runs them as called.
  virtual void synchronize() {}

  // ---- the ops: model/ops.h's and model/attention.h's, under the same names (what each computes is there) ----
  // Written out for the reader; model/op_table.h lists them once more with their costs, and the static_asserts
  // below this class hold the two lists equal.
  virtual void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) = 0;
  virtual void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N,
                               int in_dim, int out_dim, bool accumulate_din) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) = 0;
  virtual void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                const float* rstd, int N, int C) = 0;
  virtual void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) = 0;
  virtual void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) = 0;
  virtual void swiglu_forward(float* out, const float* gate, const float* up, size_t n) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                               size_t n) = 0;
  // The whole vocabulary's; stats: 3N floats of scratch.
  virtual void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                             float dloss_scale, float* stats) = 0;
  // A vocabulary shard's three phases (Megatron's vocab-parallel cross-entropy).
  virtual void crossentropy_shard_max(const float* logits, int N, int V, float* row_max) = 0;
  virtual void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin,
                                      const float* row_max, float* sums) = 0;
  virtual void crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                         int v_begin, const float* row_max, const float* sums, float dloss_scale) = 0;
  virtual void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin,
                                 int V) = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin,
                                  int V) = 0;
  virtual void residual_add(float* out, const float* a, const float* b, size_t n) = 0;
  // doc_start (B, T): the backend's copy of the document starts (model/attention.h), or null.
  virtual void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T,
                                 int H, int Hkv, int hd, const int32_t* doc_start) = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                  const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv,
                                  int hd, const int32_t* doc_start) = 0;
  // Whether this backend computes `op`: the model asks before it takes a path that needs one (the vocabulary
  // shard's cross-entropy is the host's only), so no op fails half-way through a step.
  virtual bool supports(ModelOp op) const { return true; }

  // ---- products that read one input (q, k and v of a norm's output; gate and up) ----
  // One matmul_forward per product; a backend that rounds its GEMMs' inputs (the CPU's bf16 one) rounds `in` once.
  struct MatmulOut {
    float* out;
    const float* w;
    int out_dim;
  };
  virtual void matmul_forward_shared(const float* in, int N, int in_dim, std::initializer_list<MatmulOut> outs);
  // din (N, in) = Σ dout_i · w_i (OVERWRITES), dw_i += dout_iᵀ · in: one matmul_backward per product, the first
  // overwriting din; `in` rounded once where the backend rounds.
  struct MatmulGrad {
    float* dw;
    const float* dout;
    const float* w;
    int out_dim;
  };
  virtual void matmul_backward_shared(float* din, const float* in, int N, int in_dim,
                                      std::initializer_list<MatmulGrad> parts);

  // ---- forward-only models (scoring, sampling) ----
  // The MLP: out (N, C) = down(SwiGLU(in · w_gateᵀ, in · w_upᵀ)), through gate and up (N, F each, scratch): the
  // matmul_forward, swiglu_forward, matmul_forward of a training forward. A backend may fuse them where no backward
  // needs gate and up (the CPU's bf16 one: into its GEMMs' epilogues).
  virtual void mlp_forward_only(float* out, const float* in, const float* w_gate, const float* w_up,
                                const float* w_down, int N, int C, int F, float* gate, float* up);

  // attention_forward whose rows also skip their gaps (model/attention.h's shared contexts), where
  // attention_gaps_supported (the CPU's backends).
  virtual bool attention_gaps_supported() const { return false; }
  virtual void attention_forward_gaps(float* o, float* lse, const float* q, const float* k, const float* v, int B,
                                      int T, int H, int Hkv, int hd, const int32_t* doc_start, const int32_t* gaps);
};

// Each op of the table is declared above with the table's parameters (and so every backend's generated forwarders
// override it); an op written above but missing from the table leaves those backends abstract.
#define AGOQ_OP_SAME_AS_TABLE(name, cls, params, args, cost)                                 \
  static_assert(std::is_same_v<decltype(&ModelBackend::name), void(ModelBackend::*) params>, \
                "ModelBackend::" #name " differs from model/op_table.h");
AGOQ_MODEL_OPS(AGOQ_OP_SAME_AS_TABLE)
#undef AGOQ_OP_SAME_AS_TABLE

// The CPU's ops (model/ops.h: OpenBLAS and OpenMP) on host memory counted by the global tracker. One for the
// process; it holds no state.
ModelBackend& model_backend_cpu();
// The same with bf16 GEMMs (model/gemm_bf16.h), where gemm_bf16_supported(); it keeps the weights' bf16 copies
// (Bf16Weights::cached), so each model has its own.
// block_values: per_gemm's largest block of a weight (gemm_bf16_weight_block_rows; the tests make it small).
std::unique_ptr<ModelBackend> model_backend_cpu_bf16(Bf16Weights weights = Bf16Weights::cached,
                                                     size_t block_values = kGemmBf16BlockValues);

}  // namespace agoq

// Where the model computes: the ops of model/ops.h and model/attention.h, with the same signatures, shapes and
// overwrite / accumulate rules, on the memory of one device. LlamaModel (model/llama.h) calls only these, on
// buffers the backend allocates, so one model file runs on the CPU (model_backend_cpu(), below: the OpenBLAS and
// OpenMP ops) and on the GPU (gpu/backend_cuda.h: the CUDA twins of cuda/ops_cuda.h). Like the tensor group, a
// backend is implemented where its device is and handed to the model at construction.
//
// Pointers are the backend's memory (host or device) except where a comment says host. Calls on one backend are
// ordered; download waits for the work before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "arch/act_store_api.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "core/memory.h"

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
  // An activation store on this device (arch/act_store_api.h), allocating act_store_bytes.
  virtual std::unique_ptr<ActStoreApi> store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                                  const ModelStage& stage) = 0;
  // Tensor parallelism's collectives (model/tensor_group.h) work on host memory: a backend says if it can join them.
  virtual bool host_memory() const { return device() == MemDevice::host; }
  // The weights were written (an optimizer step, new values uploaded): a backend that keeps copies of them (bf16
  // for the GEMMs) makes them again. The CPU keeps none.
  virtual void weights_changed() {}

  // ---- the ops (model/ops.h, model/attention.h) ----
  virtual void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) = 0;
  virtual void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N,
                               int in_dim, int out_dim, bool accumulate_din = false) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) = 0;
  virtual void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                const float* rstd, int N, int C) = 0;
  virtual void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) = 0;
  virtual void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) = 0;
  virtual void swiglu_forward(float* out, const float* gate, const float* up, size_t n) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                               size_t n) = 0;
  // The whole vocabulary's cross-entropy; stats: 3N floats of scratch.
  virtual void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N,
                                             int V, float dloss_scale, float* stats) = 0;
  // A vocabulary shard's three phases (model/ops.h), for tensor parallelism (host memory only).
  virtual void crossentropy_shard_max(const float* logits, int N, int V, float* row_max) = 0;
  virtual void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin,
                                      const float* row_max, float* sums) = 0;
  virtual void crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                         int v_begin, const float* row_max, const float* sums,
                                         float dloss_scale) = 0;
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
};

// The CPU's ops (model/ops.h: OpenBLAS and OpenMP) on host memory counted by the global tracker. One for the
// process; it holds no state.
ModelBackend& model_backend_cpu();

}  // namespace agoq

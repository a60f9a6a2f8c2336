#include "cuda_train/backend_cuda.h"

#include "core/error.h"
#include "cuda/act_store_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/ops_cuda.h"
#include "cuda/quant_cuda.h"

namespace agoq {

namespace {
// The device is opened before the members (cuBLASLt's handle, its workspace) are made on it.
GemmPrecision device_opened(GemmPrecision p) {
  cuda_device_open();
  return p;
}
}  // namespace

CudaBackend::CudaBackend(GemmPrecision precision) : precision_(device_opened(precision)), mm_(0) {}

void CudaBackend::synchronize() { AGOQ_CUDA_CHECK(cudaStreamSynchronize(mm_.stream())); }

std::shared_ptr<void> CudaBackend::allocate(size_t bytes, MemCategory cat, std::string_view tag) {
  weights_bf16_.clear();  // an address a copy is keyed by may be reused from here on
  return std::shared_ptr<void>(cuda_alloc_tracked(bytes, cat, tag), [](void* p) { cuda_free_tracked(p); });
}
void CudaBackend::upload(void* dst, const void* host, size_t bytes) {
  if (bytes) cuda_copy_to_device(dst, host, bytes);
}
void CudaBackend::download(void* host, const void* src, size_t bytes) {
  if (bytes) cuda_copy_to_host(host, src, bytes);
}
void CudaBackend::zero(float* x, size_t n) { AGOQ_CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), mm_.stream())); }
std::unique_ptr<ActStore> CudaBackend::store_make(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                                  const ModelStage& stage) {
  return std::make_unique<CudaActStore>(cfg, max_rows, policy, stage, mm_.stream());
}

// ---- GEMMs ----

const void* CudaBackend::weight_bf16(const float* w, size_t n) {
  WeightCopy& c = weights_bf16_[w];
  if (c.bits.size() != n) c.bits = DeviceBuffer<uint16_t>(n, MemCategory::weights, "weights.bf16"), c.version = -1;
  if (c.version != weights_version_) cuda_f32_to_bf16(w, n, c.bits.data(), mm_.stream()), c.version = weights_version_;
  return c.bits.data();
}

const void* CudaBackend::activation_bf16(const float* x, size_t n, int slot) {
  DeviceBuffer<uint16_t>& s = scratch_bf16_[slot];
  if (s.size() < n) s = DeviceBuffer<uint16_t>(n, MemCategory::workspace, "gemm.bf16");  // cudaFree waits for the GPU
  cuda_f32_to_bf16(x, n, s.data(), mm_.stream());
  return s.data();
}

void CudaBackend::matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) {
  if (precision_ == GemmPrecision::fp32) return mm_.forward(out, in, w, CudaDtype::f32, N, in_dim, out_dim);
  mm_.forward(out, activation_bf16(in, size_t(N) * in_dim, 0), weight_bf16(w, size_t(out_dim) * in_dim),
              CudaDtype::bf16, N, in_dim, out_dim);
}

void CudaBackend::matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N,
                                  int in_dim, int out_dim, bool accumulate_din) {
  if (precision_ == GemmPrecision::fp32)
    return mm_.backward(din, dw, dout, in, w, CudaDtype::f32, N, in_dim, out_dim, accumulate_din);
  const void* in16 = dw ? activation_bf16(in, size_t(N) * in_dim, 0) : nullptr;
  mm_.backward(din, dw, activation_bf16(dout, size_t(N) * out_dim, 1), in16, weight_bf16(w, size_t(out_dim) * in_dim),
               CudaDtype::bf16, N, in_dim, out_dim, accumulate_din);
}

// ---- the element-wise and row-wise ops ----

void CudaBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  cuda_rmsnorm_forward(out, rstd, x, w, N, C, eps, mm_.stream());
}
void CudaBackend::rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) {
  cuda_rmsnorm_apply(out, x, rstd, w, N, C, mm_.stream());
}
void CudaBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                   const float* rstd, int N, int C) {
  cuda_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, mm_.stream());
}
void CudaBackend::rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  cuda_rope_forward(x, cos, sin, N, T, n_heads, hd, mm_.stream());
}
void CudaBackend::rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  cuda_rope_backward(dx, cos, sin, N, T, n_heads, hd, mm_.stream());
}
void CudaBackend::swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  cuda_swiglu_forward(out, gate, up, n, mm_.stream());
}
void CudaBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  size_t n) {
  cuda_swiglu_backward(dgate, dup, dout, gate, up, n, mm_.stream());
}
void CudaBackend::crossentropy_forward_backward(float* logits, float* losses, const int* targets, int N, int V,
                                                float dloss_scale, float*) {
  cuda_crossentropy_forward_backward(logits, losses, targets, N, V, dloss_scale, mm_.stream());
}
bool CudaBackend::supports(ModelOp op) const {
  return op != ModelOp::crossentropy_shard_max && op != ModelOp::crossentropy_shard_exp &&
         op != ModelOp::crossentropy_shard_finish;
}
// Unsupported (above): the model checks supports() before a sharded head.
void CudaBackend::crossentropy_shard_max(const float*, int, int, float*) { fail("internal: unsupported op"); }
void CudaBackend::crossentropy_shard_exp(float*, const int*, int, int, int, const float*, float*) {
  fail("internal: unsupported op");
}
void CudaBackend::crossentropy_shard_finish(float*, float*, const int*, int, int, int, const float*, const float*,
                                            float) {
  fail("internal: unsupported op");
}
void CudaBackend::embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin,
                                    int V) {
  cuda_embedding_forward(out, tokens, table, N, C, v_begin, V, mm_.stream());
}
void CudaBackend::embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin,
                                     int V) {
  cuda_embedding_backward(dtable, dout, tokens, N, C, v_begin, V, mm_.stream());
}
void CudaBackend::residual_add(float* out, const float* a, const float* b, size_t n) {
  cuda_residual_add(out, a, b, n, mm_.stream());
}

// ---- attention ----

CudaAttention& CudaBackend::attention(int B, int T, int H, int Hkv, int hd) {
  auto& a = attention_[{B, T, H, Hkv, hd}];
  if (!a) a = std::make_unique<CudaAttention>(mm_, B, T, H, Hkv, hd);
  return *a;
}
void CudaBackend::attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T,
                                    int H, int Hkv, int hd, const int32_t* doc_start) {
  attention(B, T, H, Hkv, hd).forward(o, lse, q, k, v, doc_start);
}
void CudaBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                     const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv,
                                     int hd, const int32_t* doc_start) {
  attention(B, T, H, Hkv, hd).backward(dq, dk, dv, dout, q, k, v, o, lse, doc_start);
}

}  // namespace agoq

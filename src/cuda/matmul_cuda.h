// The linear layers' GEMMs on the device through cuBLASLt: ops.h's matmul_forward / matmul_backward with the same
// row-major (N, in) activations and Hugging Face (out, in) weights. The inputs of one call are all fp32 or all bf16
// (the bf16 copy of the weights that mixed precision computes with, and bf16 activations); products accumulate in
// fp32 (CUBLAS_COMPUTE_32F, never TF32) and the outputs are fp32, so the weight gradients accumulate in fp32 as
// Megatron's main_grad does. Errors are one line naming the call and cuBLAS's reason.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "cuda/device_buffer.h"

namespace agoq {

enum class CudaDtype : uint8_t { f32, bf16 };  // bf16 as uint16_t bits (quant/half.h's rounding)

// One column-major GEMM, `batch` times: D_i (m, n) = alpha · op(A_i) · op(B_i) + beta · D_i, where X_i starts
// stride_x elements after X_{i-1}. A is stored (m, k), or (k, m) when trans_a; B (k, n), or (n, k) when trans_b.
// A and B have type `type`, D is fp32. Strides must be non-zero when batch > 1 (outputs never alias).
struct CudaGemm {
  int m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int lda = 0;
  bool trans_a = false;
  long long stride_a = 0;
  const void* B = nullptr;
  int ldb = 0;
  bool trans_b = false;
  long long stride_b = 0;
  float* D = nullptr;
  int ldd = 0;
  long long stride_d = 0;
  float alpha = 1.f, beta = 0.f;
  int batch = 1;
  CudaDtype type = CudaDtype::f32;
};

// One GEMM shape's cuBLASLt descriptors and the heuristic's algorithm for them (matmul_cuda.cu makes them once per
// shape, operand alignments included, and destroys them with the CudaMatmul).
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();
};

class CudaMatmul {
 public:
  // The cuBLASLt handle and its workspace (tracked, category workspace) for GEMMs on `stream`.
  explicit CudaMatmul(cudaStream_t stream = 0, size_t workspace_bytes = size_t(32) << 20);
  ~CudaMatmul();
  CudaMatmul(const CudaMatmul&) = delete;
  CudaMatmul& operator=(const CudaMatmul&) = delete;

  // out (N, out_dim) = in (N, in_dim) · wᵀ, w (out_dim, in_dim).
  void forward(float* out, const void* in, const void* w, CudaDtype t, int N, int in_dim, int out_dim);
  // din (N, in_dim) = dout · w (OVERWRITES, or ACCUMULATES when accumulate_din; skipped when null);
  // dw (out_dim, in_dim) += doutᵀ · in (ACCUMULATES; skipped when null). dout, in and w have type t.
  void backward(float* din, float* dw, const void* dout, const void* in, const void* w, CudaDtype t, int N, int in_dim,
                int out_dim, bool accumulate_din = false);
  // Any GEMM of the layers (attention's per-block products use this). The first GEMM of a shape asks cuBLASLt's
  // heuristic for its algorithm; later ones of that shape reuse it.
  void gemm(const CudaGemm& g);
  cudaStream_t stream() const { return stream_; }

 private:
  // (m, n, k, lda, ldb, ldd, trans_a, trans_b, batch, strides a/b/d, type, alignments a/b/d)
  using GemmKey = std::array<int64_t, 16>;
  std::unique_ptr<GemmPlan> plan_make(const CudaGemm& g, uint32_t align_a, uint32_t align_b, uint32_t align_d);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  DeviceBuffer<uint8_t> workspace_;
  std::map<GemmKey, std::unique_ptr<GemmPlan>> plans_;
};

}  // namespace agoq

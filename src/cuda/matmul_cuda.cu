// cuBLASLt GEMMs for the linear layers. cuBLASLt is column-major, and a row-major (R, C) buffer is the column-major
// (C, R) matrix with the same memory; so each row-major product is computed as its transpose, every operand read
// as the column-major matrix its buffer already is (no copies):
//   forward   out = in · wᵀ      is   outᵀ (out_dim, N)  = (w: (in_dim, out_dim))ᵀ · (in: (in_dim, N))
//   backward  din = dout · w     is   dinᵀ (in_dim, N)   = (w: (in_dim, out_dim)) · (dout: (out_dim, N))
//             dw += doutᵀ · in   is   dwᵀ (in_dim, out_dim) += (in: (in_dim, N)) · (dout: (out_dim, N))ᵀ
#include "cuda/matmul_cuda.h"

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace agoq {
namespace {

void blas_check(cublasStatus_t st, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: ", call, ": ", cublasLtGetStatusString(st), " (", cublasLtGetStatusName(st), ")");
}
#define AGOQ_BLAS_CHECK(call) blas_check((call), #call)

cudaDataType_t data_type(CudaDtype t) { return t == CudaDtype::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// The descriptors of one call, destroyed on every path out of gemm().
struct GemmDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~GemmDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

CudaMatmul::CudaMatmul(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace_bytes, MemCategory::workspace, "cuda.cublaslt") {
  AGOQ_BLAS_CHECK(cublasLtCreate(&handle_));
}

CudaMatmul::~CudaMatmul() {
  if (handle_) cublasLtDestroy(handle_);
}

void CudaMatmul::gemm(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda, const void* B,
                      int ldb, float beta, float* D, int ldd, CudaDtype t) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum (no rows): D = beta · D, beta being 0 or 1
    if (beta == 0.f) AGOQ_CUDA_CHECK(cudaMemsetAsync(D, 0, size_t(ldd) * n * sizeof(float), stream_));
    return;
  }
  GemmDescs g;
  AGOQ_BLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  AGOQ_BLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  AGOQ_BLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // Layouts of the stored matrices (before op): A is (m, k) or, transposed, (k, m); B (k, n) or (n, k).
  AGOQ_BLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, data_type(t), trans_a ? k : m, trans_a ? m : k, lda));
  AGOQ_BLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, data_type(t), trans_b ? n : k, trans_b ? k : n, ldb));
  AGOQ_BLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, m, n, ldd));
  AGOQ_BLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.pref));
  const uint64_t ws = workspace_.bytes();
  AGOQ_BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  AGOQ_BLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, g.op, g.a, g.b, g.d, g.d, g.pref, 1, &algo, &found));
  AGOQ_CHECK(found > 0, "cuBLASLt: no algorithm for a ", m, "x", n, "x", k, " GEMM");
  const float alpha = 1.0f;
  AGOQ_BLAS_CHECK(cublasLtMatmul(handle_, g.op, &alpha, A, g.a, B, g.b, &beta, D, g.d, D, g.d, &algo.algo,
                                 workspace_.data(), workspace_.bytes(), stream_));
}

void CudaMatmul::forward(float* out, const void* in, const void* w, CudaDtype t, int N, int in_dim, int out_dim) {
  gemm(true, false, out_dim, N, in_dim, w, in_dim, in, in_dim, 0.f, out, out_dim, t);
}

void CudaMatmul::backward(float* din, float* dw, const void* dout, const void* in, const void* w, CudaDtype t, int N,
                          int in_dim, int out_dim, bool accumulate_din) {
  if (din) gemm(false, false, in_dim, N, out_dim, w, in_dim, dout, out_dim, accumulate_din ? 1.f : 0.f, din, in_dim, t);
  if (dw) gemm(false, true, in_dim, out_dim, N, in, in_dim, dout, out_dim, 1.f, dw, in_dim, t);
}

}  // namespace agoq

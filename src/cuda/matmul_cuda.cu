// cuBLASLt GEMMs for the linear layers. cuBLASLt is column-major, and a row-major (R, C) buffer is the column-major
// (C, R) matrix with the same memory; so each row-major product is computed as its transpose, every operand read
// as the column-major matrix its buffer already is (no copies):
//   forward   out = in · wᵀ      is   outᵀ (out_dim, N)  = (w: (in_dim, out_dim))ᵀ · (in: (in_dim, N))
//   backward  din = dout · w     is   dinᵀ (in_dim, N)   = (w: (in_dim, out_dim)) · (dout: (out_dim, N))
//             dw += doutᵀ · in   is   dwᵀ (in_dim, out_dim) += (in: (in_dim, N)) · (dout: (out_dim, N))ᵀ
#include "cuda/matmul_cuda.h"

#include <memory>
#include <utility>

#include "core/error.h"
#include "cuda/cublaslt_api.h"
#include "cuda/cuda_check.h"

namespace agoq {
namespace {

void blas_check(cublasStatus_t st, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: ", call, ": ", cublaslt().status_string(st), " (", cublaslt().status_name(st), ")");
}
#define AGOQ_BLAS_CHECK(call) blas_check((call), #call)

cudaDataType_t data_type(CudaDtype t) { return t == CudaDtype::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// The largest power of two up to 256 dividing an operand's address, its leading dimension and its batch stride
// in bytes: the alignment every matrix of the operand has.
uint32_t operand_alignment(const void* p, int ld, long long stride, size_t elem_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | (uint64_t(ld) * elem_bytes) | (uint64_t(stride) * elem_bytes) | 256;
  return uint32_t(bits & (~bits + 1));  // the lowest set bit
}

}  // namespace

CudaMatmul::CudaMatmul(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace_bytes, MemCategory::workspace, "cuda.cublaslt") {
  AGOQ_BLAS_CHECK(cublaslt().create(&handle_));
}

GemmPlan::~GemmPlan() {
  if (pref) cublaslt().pref_destroy(pref);
  if (d) cublaslt().layout_destroy(d);
  if (b) cublaslt().layout_destroy(b);
  if (a) cublaslt().layout_destroy(a);
  if (op) cublaslt().desc_destroy(op);
}

CudaMatmul::~CudaMatmul() {
  plans_.clear();  // before the handle they were made with
  if (handle_) cublaslt().destroy(handle_);
}

void CudaMatmul::gemm(const CudaGemm& g) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return;
  AGOQ_CHECK(g.batch == 1 || (g.stride_a && g.stride_b && g.stride_d), "CUDA gemm: a batch needs non-zero strides");
  if (g.k <= 0) {  // an empty sum: D = beta · D, beta being 0 or 1
    AGOQ_CHECK(g.beta == 0.f || g.beta == 1.f, "CUDA gemm: an empty product with beta ", g.beta);
    if (g.beta == 0.f)
      for (int i = 0; i < g.batch; ++i)
        AGOQ_CUDA_CHECK(cudaMemset2DAsync(g.D + i * g.stride_d, size_t(g.ldd) * sizeof(float), 0,
                                          size_t(g.m) * sizeof(float), size_t(g.n), stream_));
    return;
  }
  // cuBLASLt assumes 256-byte-aligned operands unless told otherwise, and attention's per-head operands start
  // inside rows: each operand's real alignment is part of the plan, so the heuristic picks only kernels that take it.
  const size_t in_bytes = g.type == CudaDtype::bf16 ? 2 : 4;
  const uint32_t align_a = operand_alignment(g.A, g.lda, g.batch > 1 ? g.stride_a : 0, in_bytes),
                 align_b = operand_alignment(g.B, g.ldb, g.batch > 1 ? g.stride_b : 0, in_bytes),
                 align_d = operand_alignment(g.D, g.ldd, g.batch > 1 ? g.stride_d : 0, sizeof(float));
  const bool batched = g.batch > 1;
  const GemmKey key = {g.m,
                       g.n,
                       g.k,
                       g.lda,
                       g.ldb,
                       g.ldd,
                       g.trans_a,
                       g.trans_b,
                       g.batch,
                       batched ? g.stride_a : 0,
                       batched ? g.stride_b : 0,
                       batched ? g.stride_d : 0,
                       int64_t(g.type),
                       align_a,
                       align_b,
                       align_d};
  std::unique_ptr<GemmPlan>& plan = plans_[key];
  if (!plan) plan = plan_make(g, align_a, align_b, align_d);
  AGOQ_BLAS_CHECK(cublaslt().matmul(handle_, plan->op, &g.alpha, g.A, plan->a, g.B, plan->b, &g.beta, g.D, plan->d, g.D,
                                    plan->d, &plan->algo, workspace_.data(), workspace_.bytes(), stream_));
}

// The descriptors of a GEMM's shape and the heuristic's first algorithm for them, made once per shape.
std::unique_ptr<GemmPlan> CudaMatmul::plan_make(const CudaGemm& g, uint32_t align_a, uint32_t align_b,
                                                uint32_t align_d) {
  const CublasLtApi& lt = cublaslt();
  auto d = std::make_unique<GemmPlan>();
  AGOQ_BLAS_CHECK(lt.desc_create(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  AGOQ_BLAS_CHECK(lt.desc_set(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  AGOQ_BLAS_CHECK(lt.desc_set(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // The stored matrices' shapes (before op).
  const cudaDataType_t in_type = data_type(g.type);
  AGOQ_BLAS_CHECK(lt.layout_create(&d->a, in_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  AGOQ_BLAS_CHECK(lt.layout_create(&d->b, in_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  AGOQ_BLAS_CHECK(lt.layout_create(&d->d, CUDA_R_32F, g.m, g.n, g.ldd));
  if (g.batch > 1) {
    const int32_t count = g.batch;
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {d->a, g.stride_a}, {d->b, g.stride_b}, {d->d, g.stride_d}};
    for (const auto& [layout, stride] : layouts) {
      AGOQ_BLAS_CHECK(lt.layout_set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      AGOQ_BLAS_CHECK(lt.layout_set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
  AGOQ_BLAS_CHECK(lt.pref_create(&d->pref));
  const uint64_t ws = workspace_.bytes();
  AGOQ_BLAS_CHECK(lt.pref_set(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  AGOQ_BLAS_CHECK(lt.pref_set(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  AGOQ_BLAS_CHECK(lt.pref_set(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  AGOQ_BLAS_CHECK(lt.pref_set(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
  AGOQ_BLAS_CHECK(lt.pref_set(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
  cublasLtMatmulHeuristicResult_t found_algo{};
  int found = 0;
  AGOQ_BLAS_CHECK(lt.algo_get_heuristic(handle_, d->op, d->a, d->b, d->d, d->d, d->pref, 1, &found_algo, &found));
  AGOQ_CHECK(found > 0, "cuBLASLt: no algorithm for a ", g.m, "x", g.n, "x", g.k, " GEMM");
  d->algo = found_algo.algo;
  return d;
}

void CudaMatmul::forward(float* out, const void* in, const void* w, CudaDtype t, int N, int in_dim, int out_dim) {
  CudaGemm g;
  g.m = out_dim, g.n = N, g.k = in_dim, g.type = t;
  g.A = w, g.lda = in_dim, g.trans_a = true;
  g.B = in, g.ldb = in_dim;
  g.D = out, g.ldd = out_dim;
  gemm(g);
}

void CudaMatmul::backward(float* din, float* dw, const void* dout, const void* in, const void* w, CudaDtype t, int N,
                          int in_dim, int out_dim, bool accumulate_din) {
  if (din) {
    CudaGemm g;
    g.m = in_dim, g.n = N, g.k = out_dim, g.type = t, g.beta = accumulate_din ? 1.f : 0.f;
    g.A = w, g.lda = in_dim;
    g.B = dout, g.ldb = out_dim;
    g.D = din, g.ldd = in_dim;
    gemm(g);
  }
  if (dw) {
    CudaGemm g;
    g.m = in_dim, g.n = out_dim, g.k = N, g.type = t, g.beta = 1.f;
    g.A = in, g.lda = in_dim;
    g.B = dout, g.ldb = out_dim, g.trans_b = true;
    g.D = dw, g.ldd = in_dim;
    gemm(g);
  }
}

}  // namespace agoq

// Causal GQA attention on the device, by query blocks (attention_cuda.h). For batch b and query rows [i0, i0 + R),
// the keys visible to any of them are [0, L) with L = i0 + R. Per block:
//
//   forward   S_h = scale · Q_h Kᵀ_g           (GEMM, every head h, g its kv head)
//             P_h = softmax of S_h's rows over keys j ≤ t; lse saved      (kernel; masked entries 0)
//             O_h = P_h V_g                     (GEMM, straight into o)
//   backward  P_h from S_h and lse              (GEMM + kernel)
//             dP_h = dO_h Vᵀ_g                  (GEMM)
//             dS_h = scale · P_h ⊙ (dP_h − rowsum(dO_h ⊙ O_h))   (kernel)
//             dV_g += Pᵀ_h dO_h,  dQ_h = dS_h K_g,  dK_g += dSᵀ_h Q_h      (GEMMs)
//
// Every GEMM is batched over the Hkv kv heads g, for one head j of each group at a time (heads h = g·group + j), so
// no batch reads a shared operand through a zero stride and the dK/dV accumulations of a group run one after
// another on the stream (no two writes race). Row-major buffers are read as the column-major matrices they are
// (matmul_cuda.cu explains the transposition).
#include "cuda/attention_cuda.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda/kernel_util.cuh"
#include "opmath/op_math.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

// One block per (query row r, head h) of the block's scores, rows of L keys at scores + (h · bq + r) · L.
struct BlockRows {
  int b, i0, L, T, H;
  size_t head_stride;        // floats between two heads' score rows
  const int32_t* doc_start;  // (B, T) on the device, or null (model/attention.h)
};

__device__ float* row_of(float* base, const BlockRows& br) {
  return base + blockIdx.y * br.head_stride + size_t(blockIdx.x) * br.L;
}

// The first key the row's query t sees: its document's start (0 without document masking).
__device__ int first_key(const BlockRows& br, int t) {
  return br.doc_start ? br.doc_start[size_t(br.b) * br.T + t] : 0;
}

__global__ void softmax_forward_kernel(float* scores, float* lse, BlockRows br) {
  float* s = row_of(scores, br);
  const int t = br.i0 + int(blockIdx.x), visible = t + 1, from = first_key(br, t);
  float m = -INFINITY;
  for (int j = from + threadIdx.x; j < visible; j += kThreads) m = fmaxf(m, s[j]);
  m = block_max(m);
  float sum = 0.f;
  for (int j = threadIdx.x; j < br.L; j += kThreads) {
    const float e = j >= from && j < visible ? op_exp(s[j] - m) : 0.f;
    s[j] = e;
    sum += e;
  }
  sum = block_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < visible; j += kThreads) s[j] *= inv;
  if (threadIdx.x == 0) lse[(size_t(br.b) * br.H + blockIdx.y) * br.T + t] = m + logf(sum);
}

__global__ void probs_from_lse_kernel(float* scores, const float* lse, BlockRows br) {
  float* s = row_of(scores, br);
  const int t = br.i0 + int(blockIdx.x), from = first_key(br, t);
  const float l = lse[(size_t(br.b) * br.H + blockIdx.y) * br.T + t];
  for (int j = threadIdx.x; j < br.L; j += kThreads) s[j] = j >= from && j <= t ? op_exp(s[j] - l) : 0.f;
}

// dS = scale · P ⊙ (dP − D), D = Σ_d dO·O of the row's query (t, h); dP is replaced by dS.
__global__ void dscores_kernel(float* dp, const float* probs, const float* dout, const float* o, int hd, float scale,
                               BlockRows br) {
  float* d = row_of(dp, br);
  const float* p = probs + (d - dp);
  const int t = br.i0 + int(blockIdx.x), from = first_key(br, t);
  const size_t at = ((size_t(br.b) * br.T + t) * br.H + blockIdx.y) * hd;
  float acc = 0.f;
  for (int c = threadIdx.x; c < hd; c += kThreads) acc = fmaf(dout[at + c], o[at + c], acc);
  const float D = block_sum(acc);
  for (int j = threadIdx.x; j < br.L; j += kThreads) d[j] = j >= from && j <= t ? scale * p[j] * (d[j] - D) : 0.f;
}

}  // namespace

CudaAttention::CudaAttention(CudaMatmul& mm, int B, int T, int H, int Hkv, int hd, int query_block)
    : mm_(mm), B_(B), T_(T), H_(H), Hkv_(Hkv), hd_(hd), bq_(std::min(query_block, T)), stream_(mm.stream()) {
  AGOQ_CHECK(B > 0 && T > 0 && hd > 0 && Hkv > 0 && H % Hkv == 0 && query_block > 0, "CUDA attention: B ", B, " T ", T,
             " H ", H, " Hkv ", Hkv, " hd ", hd, " (H must be a multiple of Hkv)");
  const size_t n = size_t(H) * bq_ * T;
  scores_ = DeviceBuffer<float>(n, MemCategory::workspace, "cuda.attn_scores");
  grads_ = DeviceBuffer<float>(n, MemCategory::workspace, "cuda.attn_dscores");
}

namespace {
// The three GEMM shapes of a block, each over every head (loop over j, batch over g). `rows` buffers are
// (B, T, heads, hd) tensors: q, o, dout (heads = H) at the block's first row; `kv` buffers k, v, dk, dv (Hkv).
struct BlockGemms {
  CudaMatmul& mm;
  int H, Hkv, hd, group, R, L;
  size_t head_stride;  // floats between two heads' scores

  // scores_h (R × L, ld L) = alpha · rows_h kvᵀ_g
  void rows_kvT(const float* rows, const float* kv, float* scores, float alpha) const {
    for (int j = 0; j < group; ++j) {
      CudaGemm g;
      g.m = L, g.n = R, g.k = hd, g.alpha = alpha, g.batch = Hkv;
      g.A = kv, g.lda = Hkv * hd, g.trans_a = true, g.stride_a = hd;
      g.B = rows + size_t(j) * hd, g.ldb = H * hd, g.stride_b = (long long)group * hd;
      g.D = scores + j * head_stride, g.ldd = L, g.stride_d = (long long)(group * head_stride);
      mm.gemm(g);
    }
  }
  // out_h (R × hd, rows of H·hd) = scores_h kv_g
  void scores_kv(const float* scores, const float* kv, float* out) const {
    for (int j = 0; j < group; ++j) {
      CudaGemm g;
      g.m = hd, g.n = R, g.k = L, g.batch = Hkv;
      g.A = kv, g.lda = Hkv * hd, g.stride_a = hd;
      g.B = scores + j * head_stride, g.ldb = L, g.stride_b = (long long)(group * head_stride);
      g.D = out + size_t(j) * hd, g.ldd = H * hd, g.stride_d = (long long)group * hd;
      mm.gemm(g);
    }
  }
  // dkv_g (L × hd) += Σ_j scoresᵀ_h rows_h
  void scoresT_rows(const float* scores, const float* rows, float* dkv) const {
    for (int j = 0; j < group; ++j) {
      CudaGemm g;
      g.m = hd, g.n = L, g.k = R, g.beta = 1.f, g.batch = Hkv;
      g.A = rows + size_t(j) * hd, g.lda = H * hd, g.stride_a = (long long)group * hd;
      g.B = scores + j * head_stride, g.ldb = L, g.trans_b = true, g.stride_b = (long long)(group * head_stride);
      g.D = dkv, g.ldd = Hkv * hd, g.stride_d = hd;
      mm.gemm(g);
    }
  }
};
}  // namespace

void CudaAttention::forward(float* o, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* doc_start) {
  const float scale = 1.0f / std::sqrt(float(hd_));
  const size_t hs = size_t(bq_) * T_;
  for (int b = 0; b < B_; ++b)
    for (int i0 = 0; i0 < T_; i0 += bq_) {
      const int R = std::min(bq_, T_ - i0), L = i0 + R;
      const size_t at_q = (size_t(b) * T_ + i0) * H_ * hd_, at_kv = size_t(b) * T_ * Hkv_ * hd_;
      const BlockGemms gm{mm_, H_, Hkv_, hd_, H_ / Hkv_, R, L, hs};
      gm.rows_kvT(q + at_q, k + at_kv, scores_.data(), scale);
      const BlockRows br{b, i0, L, T_, H_, hs, doc_start};
      softmax_forward_kernel<<<dim3(unsigned(R), unsigned(H_)), kThreads, 0, stream_>>>(scores_.data(), lse, br);
      launch_check("softmax_forward_kernel");
      gm.scores_kv(scores_.data(), v + at_kv, o + at_q);
    }
}

void CudaAttention::backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* o, const float* lse, const int32_t* doc_start) {
  const float scale = 1.0f / std::sqrt(float(hd_));
  const size_t hs = size_t(bq_) * T_, kv_bytes = size_t(B_) * T_ * Hkv_ * hd_ * sizeof(float);
  AGOQ_CUDA_CHECK(cudaMemsetAsync(dk, 0, kv_bytes, stream_));
  AGOQ_CUDA_CHECK(cudaMemsetAsync(dv, 0, kv_bytes, stream_));
  for (int b = 0; b < B_; ++b)
    for (int i0 = 0; i0 < T_; i0 += bq_) {
      const int R = std::min(bq_, T_ - i0), L = i0 + R;
      const size_t at_q = (size_t(b) * T_ + i0) * H_ * hd_, at_kv = size_t(b) * T_ * Hkv_ * hd_;
      const BlockGemms gm{mm_, H_, Hkv_, hd_, H_ / Hkv_, R, L, hs};
      const BlockRows br{b, i0, L, T_, H_, hs, doc_start};
      const dim3 grid{unsigned(R), unsigned(H_)};
      gm.rows_kvT(q + at_q, k + at_kv, scores_.data(), scale);
      probs_from_lse_kernel<<<grid, kThreads, 0, stream_>>>(scores_.data(), lse, br);
      launch_check("probs_from_lse_kernel");
      gm.rows_kvT(dout + at_q, v + at_kv, grads_.data(), 1.f);
      dscores_kernel<<<grid, kThreads, 0, stream_>>>(grads_.data(), scores_.data(), dout, o, hd_, scale, br);
      launch_check("dscores_kernel");
      gm.scoresT_rows(scores_.data(), dout + at_q, dv + at_kv);
      gm.scores_kv(grads_.data(), k + at_kv, dq + at_q);
      gm.scoresT_rows(grads_.data(), q + at_q, dk + at_kv);
    }
}

}  // namespace agoq

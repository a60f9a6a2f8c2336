// RMSNorm on the device. Forward and dx: one block per row, the row's sum reduced in the block's fixed order.
// dw: one thread per column adding the rows in order (as the CPU does; no atomics, so the same bits every run).
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"
#include "opmath/op_math.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w, int C, float eps) {
  const size_t row = blockIdx.x;
  const float* xr = x + row * C;
  float ss = 0.f;
  for (int c = threadIdx.x; c < C; c += kThreads) ss = fmaf(xr[c], xr[c], ss);
  const float r = rmsnorm_rstd(block_sum(ss), C, eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int c = threadIdx.x; c < C; c += kThreads) out[row * C + c] = rmsnorm_value(xr[c], r, w[c]);
}

__global__ void rmsnorm_apply_kernel(float* out, const float* x, const float* rstd, const float* w, size_t n, int C) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i < n) out[i] = rmsnorm_value(x[i], rstd[i / C], w[i % C]);
}

__global__ void rmsnorm_dx_kernel(float* dx, const float* dout, const float* x, const float* w, const float* rstd,
                                  int C) {
  const size_t row = blockIdx.x;
  const float *xr = x + row * C, *dr = dout + row * C;
  float dot = 0.f;
  for (int c = threadIdx.x; c < C; c += kThreads) dot = fmaf(dr[c] * w[c], xr[c], dot);
  const float r = rstd[row], k = rmsnorm_dx_coeff(r, block_sum(dot), C);
  for (int c = threadIdx.x; c < C; c += kThreads) dx[row * C + c] += rmsnorm_dx_value(dr[c], w[c], xr[c], r, k);
}

__global__ void rmsnorm_dw_kernel(float* dw, const float* dout, const float* x, const float* rstd, int N, int C) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int n = 0; n < N; ++n) acc += rmsnorm_dw_term(dout[size_t(n) * C + c], x[size_t(n) * C + c], rstd[n]);
  dw[c] += acc;
}
}  // namespace

void cuda_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps,
                          cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<<<unsigned(N), kThreads, 0, s>>>(out, rstd, x, w, C, eps);
  launch_check("rmsnorm_forward_kernel");
}

void cuda_rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C, cudaStream_t s) {
  const size_t n = size_t(N) * size_t(C);
  if (n == 0) return;
  rmsnorm_apply_kernel<<<grid_for(n), kThreads, 0, s>>>(out, x, rstd, w, n, C);
  launch_check("rmsnorm_apply_kernel");
}

void cuda_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                           int N, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_dx_kernel<<<unsigned(N), kThreads, 0, s>>>(dx, dout, x, w, rstd, C);
  launch_check("rmsnorm_dx_kernel");
  rmsnorm_dw_kernel<<<grid_for(size_t(C)), kThreads, 0, s>>>(dw, dout, x, rstd, N, C);
  launch_check("rmsnorm_dw_kernel");
}

}  // namespace agoq

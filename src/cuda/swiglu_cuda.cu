// SwiGLU and the residual adds on the device: one thread per value, the per-value math of opmath/op_math.h.
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"
#include "opmath/op_math.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, size_t n) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i < n) out[i] = swiglu_value(gate[i], up[i]);
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                       size_t n) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i >= n) return;
  const SwigluGrads d = swiglu_grads(dout[i], gate[i], up[i]);
  dgate[i] = d.dgate, dup[i] = d.dup;
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
}  // namespace

void cuda_swiglu_forward(float* out, const float* gate, const float* up, size_t n, cudaStream_t s) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, gate, up, n);
  launch_check("swiglu_forward_kernel");
}

void cuda_swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n,
                          cudaStream_t s) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(dgate, dup, dout, gate, up, n);
  launch_check("swiglu_backward_kernel");
}

void cuda_residual_add(float* out, const float* a, const float* b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
  launch_check("residual add_kernel");
}

void cuda_residual_add_inplace(float* acc, const float* x, size_t n, cudaStream_t s) {
  cuda_residual_add(acc, acc, x, n, s);
}

}  // namespace agoq

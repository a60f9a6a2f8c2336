// Token embedding on the device. Forward: one thread per output value. Backward: one thread per column of the
// table adding the rows' gradients in token order, as the CPU does -- no atomics, so the same bits as the CPU.
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* table, size_t n, int C,
                                         int v_begin, int V) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i >= n) return;
  const int t = tokens[i / C] - v_begin;
  out[i] = t >= 0 && t < V ? table[size_t(t) * C + i % C] : 0.f;
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int* tokens, int N, int C,
                                          int v_begin, int V) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) {
    const int t = tokens[n] - v_begin;
    if (t >= 0 && t < V) dtable[size_t(t) * C + c] += dout[size_t(n) * C + c];
  }
}
}  // namespace

void cuda_embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin, int V,
                            cudaStream_t s) {
  const size_t n = size_t(N) * size_t(C);
  if (n == 0) return;
  embedding_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, tokens, table, n, C, v_begin, V);
  launch_check("embedding_forward_kernel");
}

void cuda_embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin, int V,
                             cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  embedding_backward_kernel<<<grid_for(size_t(C)), kThreads, 0, s>>>(dtable, dout, tokens, N, C, v_begin, V);
  launch_check("embedding_backward_kernel");
}

}  // namespace agoq

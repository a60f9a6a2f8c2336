// AdamW with fp32 moments and the gradient-norm helpers on the device. The update is opmath/adamw_math.h's, value
// for value the CPU's; the sum of squares accumulates in double per chunk of kNormChunk values (the block's fixed
// order), and the host adds the chunks in order.
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

constexpr size_t kNormChunk = size_t(1) << 16;

__global__ void adamw_kernel(float* p, float* m, float* v, const float* g, size_t n, float decay, AdamStepCoeffs k) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i < n) adamw_update(p[i], m[i], v[i], g[i], decay, k);
}

__global__ void sum_squares_kernel(const float* g, size_t n, double* partial) {
  __shared__ double part[kThreads];
  const size_t b = blockIdx.x * kNormChunk, e = b + kNormChunk < n ? b + kNormChunk : n;
  double acc = 0;
  for (size_t i = b + threadIdx.x; i < e; i += kThreads) acc += double(g[i]) * g[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {  // a fixed tree over the threads
    if (int(threadIdx.x) < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

__global__ void scale_kernel(float* g, size_t n, float factor) {
  const size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (i < n) g[i] *= factor;
}
}  // namespace

void cuda_adamw_step(float* p, float* m, float* v, const float* g, size_t n, float decay, const AdamStepCoeffs& k,
                     cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(p, m, v, g, n, decay, k);
  launch_check("adamw_kernel");
}

double cuda_grad_sum_squares(const float* g, size_t n, cudaStream_t s) {
  if (n == 0) return 0;
  const unsigned chunks = grid_for(n, kNormChunk);
  DeviceBuffer<double> partial(chunks, MemCategory::workspace, "cuda.grad_norm");
  sum_squares_kernel<<<chunks, kThreads, 0, s>>>(g, n, partial.data());
  launch_check("sum_squares_kernel");
  std::vector<double> host(chunks);
  AGOQ_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial.data(), chunks * sizeof(double), cudaMemcpyDeviceToHost, s));
  AGOQ_CUDA_CHECK(cudaStreamSynchronize(s));
  double total = 0;
  for (double x : host) total += x;
  return total;
}

void cuda_grad_scale(float* g, size_t n, float factor, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(g, n, factor);
  launch_check("scale_kernel");
}

}  // namespace agoq

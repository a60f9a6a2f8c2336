// Launch geometry and block reductions shared by the op kernels (device-only code, kept small). Reductions run in a
// fixed order -- each thread's strided values in order, a warp's lanes by a butterfly, then the warps in order -- so
// a result is the same on every run (not the CPU's order: op tests bound the difference).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace agoq::cuda_kernel {

constexpr int kThreads = 256;  // threads per block of the element-wise and row kernels
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Blocks of `per` threads covering n items (one launch; the CUDA grid's x limit is 2^31 - 1).
inline unsigned grid_for(size_t n, size_t per = kThreads) {
  const size_t g = (n + per - 1) / per;
  AGOQ_CHECK(g <= 0x7FFFFFFFu, "CUDA: ", n, " items are too many for one launch");
  return unsigned(g ? g : 1);
}

// Reports a failed launch (bad geometry, no kernel image for this GPU) as one line naming the kernel.
inline void launch_check(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

// Sum / max over the block (blockDim.x == kThreads); every thread gets the result. Call from all threads.
__device__ inline float block_sum(float v) {
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) s += part[w];
  __syncthreads();  // part may be reused by the next call
  return s;
}

__device__ inline float block_max(float v) {
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float m = part[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, part[w]);
  __syncthreads();
  return m;
}

}  // namespace agoq::cuda_kernel

// Timing for the device benchmarks: CUDA events on the default stream, medians of repeated runs.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/cuda_check.h"

namespace agoq {

// Milliseconds of fn on the default stream, by events.
inline float bench_cuda_ms(const std::function<void()>& fn) {
  cudaEvent_t a, b;
  AGOQ_CUDA_CHECK(cudaEventCreate(&a));
  AGOQ_CUDA_CHECK(cudaEventCreate(&b));
  AGOQ_CUDA_CHECK(cudaEventRecord(a));
  fn();
  AGOQ_CUDA_CHECK(cudaEventRecord(b));
  AGOQ_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  AGOQ_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms;
}

inline float bench_median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace agoq

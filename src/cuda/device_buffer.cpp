#include "cuda/device_buffer.h"

#include "cuda/cuda_check.h"

namespace agoq {

void* cuda_alloc_tracked(size_t bytes, MemCategory cat, std::string_view tag) {
  void* p = nullptr;
  AGOQ_CUDA_CHECK(cudaMalloc(&p, bytes));
  AGOQ_CUDA_CHECK(cudaMemset(p, 0, bytes));
  MemoryTracker::of(MemDevice::cuda).record(p, bytes, cat, tag);
  return p;
}

void cuda_free_tracked(void* p) {
  MemoryTracker::of(MemDevice::cuda).forget(p);
  cudaFree(p);  // a failure here (a sticky error from an earlier kernel) was already reported by that kernel's check
}

void cuda_copy_to_device(void* dst, const void* src, size_t bytes) {
  AGOQ_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void cuda_copy_to_host(void* dst, const void* src, size_t bytes) {
  AGOQ_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace agoq

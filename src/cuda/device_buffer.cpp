#include "cuda/device_buffer.h"

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace agoq {

void* cuda_alloc_tracked(size_t bytes, MemCategory cat, std::string_view tag) {
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, bytes); e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it, so the message below is the only report
    const MemoryTracker& t = MemoryTracker::of(MemDevice::cuda);
    fail("out of GPU memory: ", format_bytes(bytes), " for ", mem_category_name(cat), tag.empty() ? "" : " (", tag,
         tag.empty() ? "" : ")", " with ", format_bytes(t.current().total()), " already held by agoq and ",
         format_bytes(cuda_mem_info().free_bytes),
         " free on the device: lower --batch or --seq, or use a smaller "
         "activation policy");
  } else {
    cuda_check(e, "cudaMalloc");
  }
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

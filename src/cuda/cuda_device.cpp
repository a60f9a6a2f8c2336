#include "cuda/cuda_check.h"

#include "core/error.h"

namespace agoq {

void cuda_check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // reported here: a later launch check must not report it again (it is not sticky)
  fail("CUDA: ", call, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next runtime call does not report it again
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
  return {};
}

CudaDeviceInfo cuda_device_open() {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) fail("no usable GPU: ", why);
  AGOQ_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp p{};
  AGOQ_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return {p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem};
}

CudaMemInfo cuda_mem_info() {
  CudaMemInfo m;
  AGOQ_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

}  // namespace agoq

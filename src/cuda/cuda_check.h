// The CUDA backend's error handling and device discovery. Every runtime call goes through AGOQ_CUDA_CHECK, which
// turns a failure into one agoq::Error naming the call and CUDA's reason; nothing is retried or ignored.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace agoq {

// Throws agoq::Error "CUDA: <call>: <reason> (<error name>)" unless e is cudaSuccess.
void cuda_check(cudaError_t e, const char* call);
#define AGOQ_CUDA_CHECK(call) ::agoq::cuda_check((call), #call)

// Why this process cannot use a GPU (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime
// version"), or an empty string when device 0 can be used. Any error counts: machines without a driver, with an old
// driver or with no device fail in different ways.
std::string cuda_unavailable_reason();

struct CudaDeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  size_t total_bytes = 0;
};
// Selects device 0 and describes it; throws agoq::Error with cuda_unavailable_reason() when it cannot.
CudaDeviceInfo cuda_device_open();

// Free and total device memory now (cudaMemGetInfo).
struct CudaMemInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
CudaMemInfo cuda_mem_info();

}  // namespace agoq

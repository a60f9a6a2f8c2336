// GPU tests skip, with CUDA's reason, on any machine where the runtime cannot use a device (here: "CUDA driver
// version is insufficient for CUDA runtime version"); they never pass without having run.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_check.h"

#define AGOQ_REQUIRE_GPU()                                                        \
  do {                                                                            \
    const std::string agoq_gpu_why = ::agoq::cuda_unavailable_reason();           \
    if (!agoq_gpu_why.empty()) GTEST_SKIP() << "no usable GPU: " << agoq_gpu_why; \
    ::agoq::cuda_device_open();                                                   \
  } while (0)

// The INT8 gradient format on the device (quant/grad_q8.h has the format): the same functions, the same bytes.
// Pointers are device pointers. These are also the device steps of allreduce_q8 (step 1 quantize, step 3
// sum-requantize in rank order, step 4 dequantize); the exchanges between them belong to the communicator.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "quant/grad_q8.h"

namespace agoq {

// Returns the number of non-finite inputs (their blocks get scale NaN); waits for `stream` to read it.
size_t cuda_grad_q8_quantize(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& opt = {},
                             cudaStream_t stream = 0);
// q <- quantize(dequantize(q) + g); returns the number of non-finite sums.
size_t cuda_grad_q8_accumulate(int8_t* codes, float* scales, const float* g, size_t n, const GradQ8Options& opt = {},
                               cudaStream_t stream = 0);
void cuda_grad_q8_dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block = 256,
                             cudaStream_t stream = 0);
void cuda_grad_q8_dequantize_add(const int8_t* codes, const float* scales, size_t n, float* out, int block = 256,
                                 cudaStream_t stream = 0);
// grad_q8_sum_requantize: codes/scales are host arrays of nsrc device pointers (copied to the device here).
size_t cuda_grad_q8_sum_requantize(const int8_t* const* codes, const float* const* scales, int nsrc, size_t n,
                                   float divisor, float* out_f32, int8_t* out_codes, float* out_scales, int block = 256,
                                   cudaStream_t stream = 0);

}  // namespace agoq

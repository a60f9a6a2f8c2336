// The activation formats on the device: the twins of quant/tensor.h's row functions, byte for byte. Pointers are
// device pointers; `base` is the view of row 0 of a tensor laid out by quant_layout (one device allocation of
// quant_bytes), and element (r, c) keys stochastic rounding by its global index r * cols + c, as on the CPU. The
// per-value math is quant/quant_math.h, compiled for the GPU; only launch geometry and the group reductions are
// device-only code.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

#include "core/memory.h"
#include "cuda/device_buffer.h"
#include "quant/format.h"
#include "quant/tensor.h"

namespace agoq {

// Rows [row_begin, row_begin + row_count); src / out hold those rows only. The status is read back from the device,
// so the call waits for `stream`.
QuantStatus cuda_quant_encode_rows(const QuantFormat& fmt, const float* src, size_t row_begin, size_t row_count,
                                   size_t cols, const QuantView& base, const QuantSeed& seed, cudaStream_t stream = 0);
// The same without the status, so without waiting: what the training step's producers call.
void cuda_quant_encode_rows_async(const QuantFormat& fmt, const float* src, size_t row_begin, size_t row_count,
                                  size_t cols, const QuantView& base, const QuantSeed& seed, cudaStream_t stream = 0);
void cuda_quant_decode_rows(const QuantFormat& fmt, const QuantConstView& base, size_t row_begin, size_t row_count,
                            size_t cols, float* out, cudaStream_t stream = 0);

// fp32 <-> bf16 (round to nearest even), n values: the bf16 copy of the weights the GEMMs read.
void cuda_f32_to_bf16(const float* x, size_t n, uint16_t* out, cudaStream_t stream = 0);
void cuda_bf16_to_f32(const uint16_t* x, size_t n, float* out, cudaStream_t stream = 0);

// A quantized tensor in device memory (the device twin of QuantizedTensor): one tracked allocation.
using DeviceQuantTensor = QuantTensorOf<DeviceBuffer<uint8_t>>;

}  // namespace agoq

// The activation store on the device: model/act_store.h's twin. The same policy (arch/act_policy.h), the same slots
// with the same (rows, cols) views, formats and stochastic-rounding keys, so a stored slot holds the CPU store's
// bytes for the same tile (the encode kernels are the CPU's math, quant_cuda.h) and the store allocates exactly
// act_store_bytes. A producer saves a tile of rows right after writing it; a consumer decodes a tile into a small
// device buffer before the GEMM that reads it; fp32 slots are read and written in place. Device pointers; one
// stream.
#pragma once
#include <cuda_runtime.h>

#include "arch/act_slot_tensors.h"
#include "cuda/quant_cuda.h"

namespace agoq {

class DeviceActivationStore : public ActSlotTensors<DeviceQuantTensor> {
 public:
  using ActSlotTensors::ActSlotTensors;  // tracked by the device's tracker

  // Rows [r0, r0 + rows) from src (rows x cols, device); nothing to do for an fp32 slot src already is. Returns the
  // encode's status (non-finite values, groups beyond fp16), which waits for the stream (see quant_cuda.h).
  QuantStatus save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src, cudaStream_t stream = 0);
  // Rows [r0, r0 + rows) as fp32: a pointer into the tensor for fp32 slots, else decoded into buf (device).
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf, cudaStream_t stream = 0) const;
};

}  // namespace agoq

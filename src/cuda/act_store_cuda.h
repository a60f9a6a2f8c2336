// The activation store on the device: model/act_store_cpu.h's twin. The same policy (arch/act_policy.h), the same slots
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

class CudaActStore : public ActSlotTensors<DeviceQuantTensor> {
 public:
  // Tracked by the device's tracker; encodes and decodes run on `stream`.
  CudaActStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy, const ModelStage& stage,
               cudaStream_t stream = 0)
      : ActSlotTensors(cfg, max_rows, policy, stage), stream_(stream) {}

  // Rows [r0, r0 + rows) from src (rows x cols, device); nothing to do for an fp32 slot src already is. The encode's
  // status (non-finite values, groups beyond fp16) is not checked: as on the CPU, a non-finite activation reaches
  // the loss, which the trainer checks.
  void save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) override;
  // Rows [r0, r0 + rows) as fp32: a pointer into the tensor for fp32 slots, else decoded into buf (device).
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const override;

 private:
  cudaStream_t stream_;
};

}  // namespace agoq

// The activation store on the device: model/act_store.h's twin. The same policy (arch/act_policy.h), the same slots
// with the same (rows, cols) views, formats and stochastic-rounding keys, so a stored slot holds the CPU store's
// bytes for the same tile (the encode kernels are the CPU's math, quant_cuda.h) and the store allocates exactly
// act_store_bytes. A producer saves a tile of rows right after writing it; a consumer decodes a tile into a small
// device buffer before the GEMM that reads it; fp32 slots are read and written in place. Device pointers; one
// stream.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <vector>

#include "arch/act_policy.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "cuda/quant_cuda.h"

namespace agoq {

class DeviceActivationStore {
 public:
  // Capacity: up to max_rows tokens per forward, for the layers of `stage` and its shard (the policy covers all
  // layers); with stage.sp the residual slots hold max_rows / tp rows. Tracked by the device's tracker.
  DeviceActivationStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy, const ModelStage& stage);

  const ActPolicy& policy() const { return policy_; }
  bool stored(int layer, ActSlot s) const { return policy_.at(layer, s).stored; }
  const QuantFormat& format(int layer, ActSlot s) const { return policy_.at(layer, s).format; }
  bool is_fp32(int layer, ActSlot s) const { return stored(layer, s) && format(layer, s).kind == QuantKind::fp32; }
  int cols(ActSlot s) const { return cols_[int(s)]; }
  void set_seed(uint64_t seed) { seed_ = seed; }
  QuantSeed slot_seed(int layer, ActSlot s) const { return {seed_, uint64_t(layer) * kActSlotCount + uint64_t(s)}; }

  float* fp32_data(int layer, ActSlot s);
  // Rows [r0, r0 + rows) from src (rows x cols, device); nothing to do for an fp32 slot src already is. Returns the
  // encode's status (non-finite values, groups beyond fp16), which waits for the stream (see quant_cuda.h).
  QuantStatus save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src, cudaStream_t stream = 0);
  // Rows [r0, r0 + rows) as fp32: a pointer into the tensor for fp32 slots, else decoded into buf (device).
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf, cudaStream_t stream = 0) const;

  const DeviceQuantTensor& tensor(int layer, ActSlot s) const { return tensors_[layer][int(s)]; }
  size_t stored_bytes(bool attention) const;

 private:
  std::array<int, kActSlotCount> cols_{};
  ActPolicy policy_;
  uint64_t seed_ = 0;
  std::vector<std::array<DeviceQuantTensor, kActSlotCount>> tensors_;  // [layer][slot]; empty when not stored
};

}  // namespace agoq

// The activation store: every tensor the forward pass saves for the backward pass goes in and comes out here,
// through a named slot per layer. Each (layer, slot) has a storage format chosen at run time by the activation
// policy (arch/act_policy.h): fp32, bf16, 2/3/4/8-bit group quantization, or "recompute" (not stored; backward
// rebuilds it from other slots). So the memory the saved activations take is one decision in one place.
//
// The model saves and loads rows in tiles: a producer encodes a tile of rows while it is still in cache (no
// extra pass over memory) and a consumer decodes a tile into a small buffer, so no full-size fp32 copy of a
// quantized slot ever exists. fp32 slots are read in place.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "arch/act_policy.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "core/memory.h"
#include "quant/tensor.h"

namespace agoq {

class ActivationStore {
 public:
  // Capacity: up to max_rows tokens (B*T) per forward, for the layers of `stage` and its tensor-parallel shard (the
  // policy covers all layers); with stage.sp the residual slots hold max_rows / tp rows (the rank's sequence shard).
  ActivationStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy, const ModelStage& stage);

  const ActPolicy& policy() const { return policy_; }
  bool stored(int layer, ActSlot s) const { return policy_.at(layer, s).stored; }
  const QuantFormat& format(int layer, ActSlot s) const { return policy_.at(layer, s).format; }
  bool is_fp32(int layer, ActSlot s) const { return stored(layer, s) && format(layer, s).kind == QuantKind::fp32; }
  // Values per token of a slot (the cols of its (rows, cols) view).
  int cols(ActSlot s) const { return cols_[int(s)]; }

  // Stochastic rounding is keyed by (seed, layer, slot, element): set a new seed for every micro-batch.
  void set_seed(uint64_t seed) { seed_ = seed; }

  // The stored tensor itself, for fp32 slots (producers may write into it directly).
  float* fp32_data(int layer, ActSlot s);
  // Saves rows [r0, r0 + rows) from src (rows x cols). For an fp32 slot whose tensor src already is, nothing to do.
  void save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src);
  // Rows [r0, r0 + rows) as fp32: a pointer into the tensor for fp32 slots, else decoded into buf.
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const;

  // The stored tensor and the stochastic-rounding key of a slot (tests compare against whole-tensor encodes).
  const QuantizedTensor& tensor(int layer, ActSlot s) const { return tensors_[layer][int(s)]; }
  QuantSeed slot_seed(int layer, ActSlot s) const { return {seed_, uint64_t(layer) * kActSlotCount + uint64_t(s)}; }

  // Calibration for the bit allocator: while on, save_rows adds each saved tile's quant_range_energy (the C of
  // plan/bit_alloc.h) to its slot's sum, with the group and symmetry of the slot's format (G = 128, symmetric
  // except the SwiGLU output, for slots kept in fp32 or bf16).
  void set_calibration(bool on) { calibrating_ = on; }
  const std::array<double, kActSlotCount>& sensitivity() const { return sensitivity_; }

  // Bytes held by stored tensors, by slot class. (A NaN/Inf activation needs no check here: it reaches the loss,
  // and the trainer stops on a non-finite loss.)
  size_t stored_bytes(bool attention) const;

 private:
  std::array<int, kActSlotCount> cols_{};
  ActPolicy policy_;
  uint64_t seed_ = 0;
  bool calibrating_ = false;
  std::array<double, kActSlotCount> sensitivity_{};
  std::vector<std::array<QuantizedTensor, kActSlotCount>> tensors_;  // [layer][slot]; empty when not stored
};

}  // namespace agoq

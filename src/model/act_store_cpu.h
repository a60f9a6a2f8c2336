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

#include "arch/act_slot_tensors.h"
#include "quant/tensor.h"

namespace agoq {

class CpuActStore : public ActSlotTensors<QuantizedTensor> {
 public:
  using ActSlotTensors::ActSlotTensors;

  void save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) override;
  const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const override;

  // Calibration for the bit allocator: while on, save_rows adds each saved tile's quant_range_energy (the C of
  // plan/bit_alloc.h) to its slot's sum, with the group and symmetry of the slot's format (G = 128, symmetric
  // except the SwiGLU output, for slots kept in fp32 or bf16). (A NaN/Inf activation needs no check here: it
  // reaches the loss, and the trainer stops on a non-finite loss.)
  void set_calibration(bool on) override { calibrating_ = on; }
  const std::array<double, kActSlotCount>& sensitivity() const override { return sensitivity_; }

 private:
  bool calibrating_ = false;
  std::array<double, kActSlotCount> sensitivity_{};
};

}  // namespace agoq

// The activation store as the model sees it: the interface both stores implement, the CPU's (model/act_store_cpu.h)
// and the device's (cuda/act_store_cuda.h), so one model file drives either (model/backend.h). Pointers are the
// backend's: host memory for the CPU store, device memory for the device store.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "arch/act_policy.h"
#include "core/error.h"
#include "quant/format.h"

namespace agoq {

class ActStore {
 public:
  virtual ~ActStore() = default;

  virtual const ActPolicy& policy() const = 0;
  virtual bool stored(int layer, ActSlot s) const = 0;
  virtual const QuantFormat& format(int layer, ActSlot s) const = 0;
  virtual bool is_fp32(int layer, ActSlot s) const = 0;
  // Values per token of a slot (the cols of its (rows, cols) view).
  virtual int cols(ActSlot s) const = 0;
  // Stochastic rounding is keyed by (seed, layer, slot, element): a new seed for every micro-batch.
  virtual void set_seed(uint64_t seed) = 0;
  virtual QuantSeed slot_seed(int layer, ActSlot s) const = 0;
  // The tensor itself for fp32 slots (producers may write into it directly).
  virtual float* fp32_data(int layer, ActSlot s) = 0;
  // Bytes held by stored tensors, by slot class.
  virtual size_t stored_bytes(bool attention) const = 0;

  // Saves rows [r0, r0 + rows) from src (rows x cols). For an fp32 slot whose tensor src already is, nothing to do.
  virtual void save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src) = 0;
  // Rows [r0, r0 + rows) as fp32: a pointer into the tensor for fp32 slots, else decoded into buf.
  virtual const float* load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf) const = 0;

  // Calibration for the bit allocator (plan/bit_alloc.h): only the CPU store measures it (model/act_store_cpu.h).
  virtual void set_calibration(bool on) {
    AGOQ_CHECK(!on, "activation calibration (re-planning the bits, --mem-budget) runs only on the CPU");
  }
  virtual const std::array<double, kActSlotCount>& sensitivity() const {
    static const std::array<double, kActSlotCount> none{};
    return none;
  }
};

}  // namespace agoq

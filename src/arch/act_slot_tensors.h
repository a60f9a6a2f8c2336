// The tensors of an activation store, one per stored (layer, slot), laid out by the policy: what the CPU store
// (model/act_store_cpu.h) and the device store (cuda/act_store_cuda.h) share. Tensor is QuantizedTensor or
// DeviceQuantTensor: constructed from (format, rows, cols, category, tag), with rows(), cols(), bytes() and
// view().codes. The stores add their own save and load (the encode and decode of their device) to the interface the
// model calls (arch/act_store.h).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "arch/act_policy.h"
#include "arch/act_store.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "core/error.h"
#include "core/memory.h"
#include "quant/format.h"

namespace agoq {

template <class Tensor>
class ActSlotTensors : public ActStore {
 public:
  // Capacity: up to max_rows tokens (B*T) per forward, for the layers of `stage` and its tensor-parallel shard (the
  // policy covers all layers); with stage.sp the residual slots hold max_rows / tp rows (the rank's sequence shard).
  // Allocates exactly act_store_bytes.
  ActSlotTensors(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy, const ModelStage& stage)
      : cols_(act_slot_cols(cfg, stage.tp)), policy_(policy), tensors_(size_t(cfg.n_layers)) {
    AGOQ_CHECK(int(policy_.slots.size()) == cfg.n_layers, "activation policy has ", policy_.slots.size(),
               " layers, model has ", cfg.n_layers);
    for (int l = stage.first_layer; l < stage.end_layer; ++l)
      for (int s = 0; s < kActSlotCount; ++s) {
        const SlotStorage& st = policy_.slots[l][s];
        if (!st.stored) continue;
        quant_format_check(st.format);
        const char* tag = act_slot_is_attention(ActSlot(s)) ? "act.attention" : "act.other";
        const size_t rows = act_slot_rows(ActSlot(s), size_t(max_rows), stage.tp, stage.sp);
        tensors_[l][s] = Tensor(st.format, rows, size_t(cols_[s]), MemCategory::activations, tag);
      }
  }

  const ActPolicy& policy() const override { return policy_; }
  bool stored(int layer, ActSlot s) const override { return policy_.at(layer, s).stored; }
  const QuantFormat& format(int layer, ActSlot s) const override { return policy_.at(layer, s).format; }
  bool is_fp32(int layer, ActSlot s) const override {
    return stored(layer, s) && format(layer, s).kind == QuantKind::fp32;
  }
  int cols(ActSlot s) const override { return cols_[int(s)]; }

  void set_seed(uint64_t seed) override { seed_ = seed; }
  QuantSeed slot_seed(int layer, ActSlot s) const override {
    return {seed_, uint64_t(layer) * kActSlotCount + uint64_t(s)};
  }

  // The stored tensor of a slot (tests compare it against whole-tensor encodes).
  const Tensor& tensor(int layer, ActSlot s) const { return tensors_[layer][int(s)]; }
  float* fp32_data(int layer, ActSlot s) override {
    AGOQ_CHECK(is_fp32(layer, s), "slot ", act_slot_name(s), " of layer ", layer, " is not stored as fp32");
    return reinterpret_cast<float*>(tensors_[layer][int(s)].view().codes);
  }

  size_t stored_bytes(bool attention) const override {
    size_t total = 0;
    for (const auto& layer : tensors_)
      for (int s = 0; s < kActSlotCount; ++s)
        if (act_slot_is_attention(ActSlot(s)) == attention) total += layer[s].bytes();
    return total;
  }

 protected:
  Tensor& slot_tensor(int layer, ActSlot s) { return tensors_[layer][int(s)]; }
  // Rows [r0, r0 + rows) of a stored slot as fp32 in place, for fp32 slots; nullptr for the others (to decode).
  const float* fp32_rows(int layer, ActSlot s, size_t r0) const {
    AGOQ_CHECK(stored(layer, s), "slot ", act_slot_name(s), " of layer ", layer, " is not stored");
    if (!is_fp32(layer, s)) return nullptr;
    const Tensor& t = tensor(layer, s);
    return reinterpret_cast<const float*>(t.view().codes) + r0 * t.cols();
  }

 private:
  std::array<int, kActSlotCount> cols_{};
  ActPolicy policy_;
  uint64_t seed_ = 0;
  std::vector<std::array<Tensor, kActSlotCount>> tensors_;  // [layer][slot]; empty when not stored
};

}  // namespace agoq

#include "cuda/act_store_cuda.h"

#include "core/error.h"

namespace agoq {

DeviceActivationStore::DeviceActivationStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy,
                                             const ModelStage& stage)
    : policy_(policy) {
  AGOQ_CHECK(int(policy_.slots.size()) == cfg.n_layers, "activation policy has ", policy_.slots.size(),
             " layers, model has ", cfg.n_layers);
  cols_ = act_slot_cols(cfg, stage.tp);
  tensors_.resize(cfg.n_layers);
  for (int l = stage.first_layer; l < stage.end_layer; ++l)
    for (int s = 0; s < kActSlotCount; ++s) {
      const SlotStorage& st = policy_.slots[l][s];
      if (!st.stored) continue;
      quant_format_check(st.format);
      const char* tag = act_slot_is_attention(ActSlot(s)) ? "act.attention" : "act.other";
      const size_t rows = act_slot_rows(ActSlot(s), size_t(max_rows), stage.tp, stage.sp);
      tensors_[l][s] = DeviceQuantTensor(st.format, rows, size_t(cols_[s]), MemCategory::activations, tag);
    }
}

float* DeviceActivationStore::fp32_data(int layer, ActSlot s) {
  AGOQ_CHECK(is_fp32(layer, s), "slot ", act_slot_name(s), " of layer ", layer, " is not stored as fp32");
  return reinterpret_cast<float*>(tensors_[layer][int(s)].view().codes);
}

QuantStatus DeviceActivationStore::save_rows(int layer, ActSlot s, size_t r0, size_t rows, const float* src,
                                             cudaStream_t stream) {
  if (!stored(layer, s)) return {};
  DeviceQuantTensor& t = tensors_[layer][int(s)];
  AGOQ_CHECK(r0 + rows <= t.rows(), "slot ", act_slot_name(s), " of layer ", layer, ": rows [", r0, ", ", r0 + rows,
             ") beyond its ", t.rows());
  if (is_fp32(layer, s) && src == fp32_data(layer, s) + r0 * t.cols()) return {};
  return cuda_quant_encode_rows(t.format(), src, r0, rows, t.cols(), t.view(), slot_seed(layer, s), stream);
}

const float* DeviceActivationStore::load_rows(int layer, ActSlot s, size_t r0, size_t rows, float* buf,
                                              cudaStream_t stream) const {
  AGOQ_CHECK(stored(layer, s), "slot ", act_slot_name(s), " of layer ", layer, " is not stored");
  const DeviceQuantTensor& t = tensors_[layer][int(s)];
  if (is_fp32(layer, s)) return reinterpret_cast<const float*>(t.view().codes) + r0 * t.cols();
  cuda_quant_decode_rows(t.format(), t.view(), r0, rows, t.cols(), buf, stream);
  return buf;
}

size_t DeviceActivationStore::stored_bytes(bool attention) const {
  size_t total = 0;
  for (const auto& layer : tensors_)
    for (int s = 0; s < kActSlotCount; ++s)
      if (act_slot_is_attention(ActSlot(s)) == attention) total += layer[s].bytes();
  return total;
}

}  // namespace agoq

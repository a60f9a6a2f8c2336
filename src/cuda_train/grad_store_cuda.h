// The 8-bit gradient store on the device: parallel/grad_store.h's q8 store for one GPU. Each unit of the flat
// layout (model_grad_units: the embedding, each decoder layer, the head) accumulates the micro-batches' gradients in
// INT8 blocks with fp32 scales (quant/grad_q8.h's format; cuda/grad_q8_cuda.h's kernels make the CPU's bytes).
// Backward writes a unit's gradient into an fp32 scratch that holds one unit at a time (and, tied, the embedding's
// own, since the lm_head adds into it first); when the unit is final it is folded into its blocks (dequantize, add,
// requantize; stochastic rounding keyed by (seed, unit, element) as on the CPU) and the scratch zeroed. The fp32
// gradient of the whole model is never allocated: the store holds ~1 byte per parameter plus the largest unit.
#pragma once
#include <cstdint>
#include <vector>

#include "arch/params.h"
#include "model/backend.h"
#include "quant/grad_q8.h"

namespace agoq {

class CudaGradStore {
 public:
  // Device memory from `gpu` (category gradients: tags grad.q8 and grad.scratch).
  CudaGradStore(ModelBackend& gpu, const LlamaConfig& cfg, const ModelStage& stage, int block, QuantRounding rounding);

  // Where the model's backward writes (LlamaModel's grad_store_view): each unit's scratch.
  std::vector<ParamSegment> model_storage();
  int unit_count() const { return int(units_.size()); }
  const ParamSegment& unit(int u) const { return units_[u]; }

  // Unit u's gradient of one micro-batch is final: folded into its blocks (`first`: they start from it), scratch
  // zeroed. A non-finite sum poisons its block (scale NaN), which the step's norm check catches.
  void unit_ready(int u, bool first, uint64_t seed);
  // Unit u's accumulated gradient as fp32, dequantized into its scratch (device; valid until the unit's scratch is
  // written again); unit_release zeroes that scratch for the next step's backward.
  float* unit_fp32(int u);
  void unit_release(int u);

 private:
  float* scratch(int u) { return u == 0 && !embed_scratch_.empty() ? embed_scratch_.data() : scratch_.data(); }

  ModelBackend& gpu_;
  int block_;
  QuantRounding rounding_;
  std::vector<ParamSegment> units_;
  std::vector<BackendBuffer<int8_t>> codes_;
  std::vector<BackendBuffer<float>> scales_;
  BackendBuffer<float> scratch_, embed_scratch_;
};

}  // namespace agoq

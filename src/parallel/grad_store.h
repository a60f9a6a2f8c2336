// Gradient units and the 8-bit gradient store of data-parallel training (docs/parallel.md).
//
// A unit is a part of the flat parameter layout whose gradients backward finishes at one moment: the embedding,
// each decoder layer, the final norm with an untied lm_head; on a pipeline stage only the parts it holds. Units
// tile the layout in forward order (GradBuckets' "layers"); LlamaModel::on_grads_ready(layer) announces
// unit grad_unit_of_layer(stage, layer).
//
// GradStoreQ8 keeps each unit's gradient accumulation buffer as INT8 codes + fp32 block scales (quant/grad_q8.h)
// and takes the model's full-size fp32 gradient buffer away: backward writes into a per-unit fp32 scratch that
// holds one unit at a time (plus the embedding's when embeddings are tied, as the lm_head adds into it first), and
// each finished unit is folded into its 8-bit buffer (dequantize -> add -> requantize) and the scratch zeroed.
#pragma once
#include <cstddef>
#include <vector>

#include "comm/grad_buckets.h"
#include "model/llama.h"
#include "quant/grad_q8.h"

namespace agoq {

// The units of `params`' flat layout, in forward order (they tile [0, params.size())).
std::vector<GradRange> grad_units_of(const ParamSet& params);
// on_grads_ready's numbering (-1 embedding, l a layer, n_layers the head) -> unit index on a stage.
inline int grad_unit_of_layer(const ModelStage& s, int layer) {
  return layer < 0 ? 0 : (s.embed ? 1 : 0) + (layer - s.first_layer);
}

class GradStoreQ8 {
 public:
  // Replaces model.grads() by views into the scratch (model.grads().data() is null afterwards).
  GradStoreQ8(LlamaModel& model, std::vector<GradRange> units, int block, QuantRounding rounding);

  int unit_count() const { return int(units_.size()); }
  const GradRange& unit(int u) const { return units_[u]; }
  // fp32 scratch of unit u (u's values at [0, unit(u).size())): backward's target, also free for the reduction.
  float* scratch(int u) { return (u == 0 && !embed_scratch_.empty()) ? embed_scratch_.data() : scratch_.data(); }
  GradQ8Buffer& q8(int u) { return q8_[u]; }
  // Folds the scratch of unit u into its 8-bit buffer (`first`: the buffer starts from this gradient) and zeroes
  // the scratch. seed: stochastic rounding stream of this micro-batch. Returns the count of non-finite sums.
  size_t accumulate(int u, bool first, uint64_t seed);
  void dequantize(int u, float* out) const;
  // The scratch must be zero when backward starts; the reduction uses it, so the step clears it after.
  void scratch_zero() { scratch_.zero(), embed_scratch_.zero(); }
  // Stores out-of-band fp32 values (e.g. a reduced gradient) back into unit u's buffer, rounding to nearest.
  void quantize(int u, const float* in);

 private:
  std::vector<GradRange> units_;
  int block_;
  QuantRounding rounding_;
  std::vector<GradQ8Buffer> q8_;
  Buffer<float> scratch_, embed_scratch_;
};

}  // namespace agoq

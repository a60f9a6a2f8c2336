// A pipeline stage of the model: a contiguous range of decoder layers, plus the embedding on the first stage and
// the final norm, lm_head and loss on the last. The whole model is the one stage that has everything.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"

namespace agoq {

struct ModelStage {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  bool embed = true, head = true;      // holds the embedding / the final norm + lm_head + loss
  int layer_count() const { return end_layer - first_layer; }
  bool has_layer(int l) const { return l >= first_layer && l < end_layer; }
  bool whole(const LlamaConfig& cfg) const { return embed && head && first_layer == 0 && end_layer == cfg.n_layers; }
};

inline ModelStage model_stage_whole(const LlamaConfig& cfg) { return {0, cfg.n_layers, true, true}; }

// Parameters a stage holds (ParamSet's layout for it).
size_t model_stage_param_count(const LlamaConfig& cfg, const ModelStage& stage);

// The P stages of a pipeline: `layers_per_stage` (e.g. "3,5"; empty: even split, the remainder going to the last
// stages, which hold fewer micro-batches in flight under 1F1B). Throws agoq::Error naming the problem (P larger
// than the layer count, counts that do not sum to n_layers, a stage without layers, tied embeddings with P > 1).
std::vector<ModelStage> model_stages_split(const LlamaConfig& cfg, int P, const std::string& layers_per_stage = "");

}  // namespace agoq

// The part of the model one rank holds. A pipeline stage: a contiguous range of decoder layers, plus the embedding
// on the first stage and the final norm, lm_head and loss on the last. A tensor-parallel shard of it (Megatron's
// layout, docs/parallel.md): of tp ranks, rank tp_rank holds 1/tp of the heads, kv-heads, MLP units and vocabulary
// rows; the model width and the norms are whole on every rank. With sequence parallelism (sp, Megatron-SP) the
// residual stream, the norms and their saved slots hold only rows [tp_rank·N/tp, (tp_rank+1)·N/tp) of each
// micro-batch of N rows. The whole model is the one stage that has everything, unsharded.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "arch/config.h"

namespace agoq {

struct ModelStage {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  bool embed = true, head = true;      // holds the embedding / the final norm + lm_head + loss
  int tp = 1, tp_rank = 0;             // tensor-parallel shard tp_rank of tp
  bool sp = false;                     // sequence parallelism over the tp ranks (needs tp > 1)
  // Rows of the residual stream this rank holds of a micro-batch of `rows` (B*T) rows.
  int rows_held(int rows) const { return sp ? rows / tp : rows; }
  int layer_count() const { return end_layer - first_layer; }
  bool has_layer(int l) const { return l >= first_layer && l < end_layer; }
  bool whole(const LlamaConfig& cfg) const { return embed && head && first_layer == 0 && end_layer == cfg.n_layers; }
};

inline ModelStage model_stage_whole(const LlamaConfig& cfg) { return {0, cfg.n_layers, true, true}; }

// The widths of a stage's shard: every tensor the model allocates is sized from these.
struct ShardDims {
  int C, hd;       // model width (whole), head dim
  int H, Hkv;      // attention heads, kv heads on this rank
  int Q, KV, F;    // widths of q (H * hd), of k and v (Hkv * hd), of the MLP's hidden layer on this rank
  int V, v_begin;  // vocabulary rows on this rank: [v_begin, v_begin + V) of the whole vocabulary
};
ShardDims model_shard_dims(const LlamaConfig& cfg, const ModelStage& stage);
// Throws agoq::Error naming what T tensor-parallel ranks cannot split evenly (heads, kv-heads, MLP width, vocab).
void model_tp_check(const LlamaConfig& cfg, int T);

// Parameters a stage holds (ParamSet's layout for it).
size_t model_stage_param_count(const LlamaConfig& cfg, const ModelStage& stage);

// The P stages of a pipeline: `layers_per_stage` (e.g. "3,5"; empty: even split, the remainder going to the last
// stages, which hold fewer micro-batches in flight under 1F1B). Throws agoq::Error naming the problem (P larger
// than the layer count, counts that do not sum to n_layers, a stage without layers, tied embeddings with P > 1).
std::vector<ModelStage> model_stages_split(const LlamaConfig& cfg, int P, const std::string& layers_per_stage = "");
// The same stage as shard tp_rank of T (model_tp_check first), sequence-parallel when sp (refused when T == 1).
ModelStage model_stage_shard(const LlamaConfig& cfg, ModelStage stage, int T, int tp_rank, bool sp = false);
// Throws agoq::Error when sequence parallelism over T ranks cannot split a micro-batch of B x seq rows evenly.
void model_sp_check(int T, int B, int seq);

}  // namespace agoq

#include "arch/params.h"

#include <algorithm>
#include <numeric>

#include "arch/hf.h"
#include "core/error.h"

namespace agoq {

size_t ParamTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

float*& ParamSet::slot_of(const HfTensor& t) {
  LayerParams& L = layers[std::max(t.layer, 0)];
  switch (t.role) {
    case ModelTensor::embed: return embed;
    case ModelTensor::attn_norm: return L.attn_norm;
    case ModelTensor::wq: return L.wq;
    case ModelTensor::wk: return L.wk;
    case ModelTensor::wv: return L.wv;
    case ModelTensor::wo: return L.wo;
    case ModelTensor::mlp_norm: return L.mlp_norm;
    case ModelTensor::w_gate: return L.w_gate;
    case ModelTensor::w_up: return L.w_up;
    case ModelTensor::w_down: return L.w_down;
    case ModelTensor::final_norm: return final_norm;
    case ModelTensor::lm_head: break;
  }
  return lm_head;
}

namespace {
void check_stage(const LlamaConfig& cfg, const ModelStage& stage) {
  AGOQ_CHECK(stage.first_layer >= 0 && stage.first_layer <= stage.end_layer && stage.end_layer <= cfg.n_layers,
             "stage layers [", stage.first_layer, ", ", stage.end_layer, ") outside the model's ", cfg.n_layers);
  AGOQ_CHECK(!cfg.tie_embeddings || stage.embed == stage.head, "tied embeddings split across stages (internal)");
}
}  // namespace

template <class At>
void ParamSet::carve(const LlamaConfig& cfg, At at) {
  size_t offset = 0;
  layers.assign(cfg.n_layers, LayerParams{});
  for (HfTensor& h : hf_tensors(cfg, stage_)) {
    ParamTensor t{std::move(h.name), std::move(h.shape), nullptr, false, model_tensor_split_dim(h.role)};
    t.decay = t.shape.size() == 2;
    t.data = at(offset, t.numel());
    offset += t.numel();
    slot_of(h) = t.data;
    named_.push_back(std::move(t));
  }
  if (stage_.head && cfg.tie_embeddings) lm_head = embed;
  AGOQ_CHECK(offset == model_stage_param_count(cfg, stage_), "parameter layout and count disagree (internal)");
}

std::vector<ParamSegment> model_grad_units(const LlamaConfig& cfg, const ModelStage& stage) {
  // The layout's tensors (arch/hf.h) grouped by the part they belong to: the embedding, a layer, the head.
  std::vector<ParamSegment> units;
  size_t at = 0;
  int part = -2;
  for (const HfTensor& t : hf_tensors(cfg, stage)) {
    const int of = t.role == ModelTensor::final_norm || t.role == ModelTensor::lm_head ? cfg.n_layers : t.layer;
    if (of != part) units.push_back({at, at}), part = of;
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    at += n, units.back().end = at;
  }
  AGOQ_CHECK(at == model_stage_param_count(cfg, stage), "gradient units and parameter count disagree (internal)");
  return units;
}

GradScratchLayout model_grad_scratch(const LlamaConfig& cfg, const ModelStage& stage, int block, bool embed_sparse,
                                     bool lm_head_pieces, size_t max_tokens) {
  const std::vector<ParamSegment> units = model_grad_units(cfg, stage);
  GradScratchLayout l;
  for (size_t u = stage.embed ? 1 : 0; u < units.size(); ++u)
    l.others = std::max(l.others, units[u].end - units[u].begin);
  if (!stage.embed) return l;
  const size_t embed = units[0].end - units[0].begin;
  if (cfg.tie_embeddings && !lm_head_pieces) {
    l.embed_tied = embed;
    return l;
  }
  const ShardDims d = model_shard_dims(cfg, stage);
  const size_t C = size_t(d.C), B = size_t(block), min_rows = std::lcm(C, std::lcm(B, size_t(256))) / C;
  l.embed_rows =
      embed_sparse ? std::min(size_t(d.V), std::max(min_rows, l.others / C / min_rows * min_rows)) : size_t(d.V);
  l.embed_piece = l.embed_rows * C;
  if (cfg.tie_embeddings) l.kept = std::min(embed, max_tokens * (C / B + 2) * B);
  return l;
}

int model_block_isolating_replicated(const LlamaConfig& cfg, const std::vector<ModelStage>& shards, int block) {
  int b = block;
  for (const ModelStage& stage : shards) {
    if (stage.tp <= 1) continue;
    const std::vector<ParamSegment> units = model_grad_units(cfg, stage);
    size_t at = 0, unit = 0;
    for (const HfTensor& t : hf_tensors(cfg, stage)) {
      while (at >= units[unit].end) ++unit;
      size_t n = 1;
      for (int64_t d : t.shape) n *= size_t(d);
      const size_t begin = at - units[unit].begin, end = begin + n;
      at += n;
      if (model_tensor_split_dim(t.role) >= 0) continue;
      const bool last = at == units[unit].end;
      while (b > 1 && (begin % size_t(b) != 0 || (!last && end % size_t(b) != 0))) b /= 2;
    }
  }
  return b;
}

ParamSet::ParamSet(const LlamaConfig& cfg, const ModelStage& stage, MemCategory cat, const char* tag) : stage_(stage) {
  check_stage(cfg, stage);
  buf_ = Buffer<float>(model_stage_param_count(cfg, stage), cat, tag);
  carve(cfg, [&](size_t offset, size_t) { return buf_.data() + offset; });
}

ParamSet::ParamSet(const LlamaConfig& cfg, const ModelStage& stage, const std::vector<ParamSegment>& segments)
    : stage_(stage) {
  check_stage(cfg, stage);
  carve(cfg, [&](size_t offset, size_t n) {
    for (const ParamSegment& s : segments)
      if (offset >= s.begin && offset + n <= s.end) return s.data ? s.data + (offset - s.begin) : nullptr;
    fail("parameter tensor at offset ", offset, " lies in no storage segment (internal)");
  });
}

}  // namespace agoq

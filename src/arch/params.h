// Parameter sets: one tracked allocation carved into the LLaMA tensors (llm.c style), used for weights, their
// gradients and the optimizer moments alike, so all of them share one flat layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/config.h"
#include "arch/hf.h"
#include "arch/stage.h"
#include "core/memory.h"

namespace agoq {

// One pointer per tensor of a decoder layer, in HF order (arch/hf.h).
struct LayerParams {
  float* attn_norm;  // (C)
  float* wq;         // (C, C)        HF layout: (out, in)
  float* wk;         // (KV, C)
  float* wv;         // (KV, C)
  float* wo;         // (C, C)
  float* mlp_norm;   // (C)
  float* w_gate;     // (F, C)
  float* w_up;       // (F, C)
  float* w_down;     // (C, F)
};

struct ParamTensor {
  std::string name;            // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // row-major
  float* data;
  bool decay;     // AdamW weight decay applies (matrices, not norms)
  int split_dim;  // of a tensor-parallel shard: model_tensor_split_dim (-1: replicated)
  size_t numel() const;
};

// A part [begin, end) of the flat layout that lives elsewhere: element `begin` is at data[0]. A gradient store
// (parallel/grad_store.h) describes with these where backward should write; data null: nowhere, the tensors of
// the segment get null pointers (an embedding gradient handed over in sparse form, model/grad_store_view.h).
struct ParamSegment {
  size_t begin = 0, end = 0;
  float* data = nullptr;
};

// The parts of a stage's flat layout whose gradients backward finishes at one moment, in forward order, data null:
// the embedding, each decoder layer, the final norm with an untied lm_head (they tile [0, model_stage_param_count)).
// The gradient stores' units (parallel/grad_store.h, cuda_train/grad_store_cuda.h).
std::vector<ParamSegment> model_grad_units(const LlamaConfig& cfg, const ModelStage& stage);
// A backward part's number (LlamaModel::backward_parts: -1 embedding, l a layer, n_layers the head) -> the unit on
// a stage.
inline int model_grad_unit_of_layer(const ModelStage& s, int layer) {
  return layer < 0 ? 0 : (s.embed ? 1 : 0) + (layer - s.first_layer);
}

// The fp32 scratch of a stage's 8-bit gradient store (parallel/grad_store.h, cuda_train/grad_store_cuda.h), in floats:
// the largest unit but the embedding (`others`); tied, the embedding's own beside it (`embed_tied`). Untied (or
// tied with the lm_head's gradient in pieces) on the first stage, the embedding goes through the shared scratch in
// pieces of `embed_rows` vocabulary rows: with embed_sparse (its gradient handed over per token) as many as `others`
// holds, at least the fewest that make whole q8 blocks (`block`) and whole 8-bit AdamW blocks (which divide 256:
// the optimizer steps piece by piece), at most the shard's; without, the whole shard at once. With the lm_head's
// pieces, `kept`: the blocks a micro-batch's max_tokens tokens can touch (a row spans at most C / block + 1).
struct GradScratchLayout {
  size_t others = 0, embed_rows = 0, embed_piece = 0, embed_tied = 0, kept = 0;
  size_t shared() const { return others > embed_piece ? others : embed_piece; }
  size_t floats() const { return shared() + embed_tied + kept; }
};
GradScratchLayout model_grad_scratch(const LlamaConfig& cfg, const ModelStage& stage, int block, bool embed_sparse,
                                     bool lm_head_pieces, size_t max_tokens);

// The largest power of two <= `block` for which no quantization block of a grad unit (blocks of that many values from
// the unit's start) holds both a replicated tensor (the norms) and a slice of a split one, on any of these shards:
// then every tensor-parallel rank computes the same bits for its copy of the norms (their gradients, reductions and
// 8-bit moments), so the copies never drift apart. `block` itself when nothing is split, or when it already fits
// (every model whose width is a multiple of 256).
int model_block_isolating_replicated(const LlamaConfig& cfg, const std::vector<ModelStage>& shards, int block);

class ParamSet {
 public:
  ParamSet() = default;
  ParamSet(const LlamaConfig& cfg, MemCategory cat, const char* tag = "")
      : ParamSet(cfg, model_stage_whole(cfg), cat, tag) {}
  // Only a pipeline stage's tensors (global HF names; the other layers' pointers stay null).
  ParamSet(const LlamaConfig& cfg, const ModelStage& stage, MemCategory cat, const char* tag = "");
  // Views into storage someone else owns: each tensor at its place in the segment holding it (every tensor lies in
  // one segment; segments may share memory when only one of them is written at a time). data() is null.
  ParamSet(const LlamaConfig& cfg, const ModelStage& stage, const std::vector<ParamSegment>& segments);
  ParamSet(ParamSet&&) = default;
  ParamSet& operator=(ParamSet&&) = default;

  float* embed = nullptr;           // (V, C)
  std::vector<LayerParams> layers;  // indexed by global layer number
  float* final_norm = nullptr;      // (C)
  float* lm_head = nullptr;         // (V, C); aliases `embed` when embeddings are tied
  const ModelStage& stage() const { return stage_; }

  // The flat buffer (null for views, whose size() is 0).
  float* data() { return buf_.data(); }
  const float* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  void zero() { buf_.zero(); }
  // Every tensor once, in checkpoint order, with its HF name.
  const std::vector<ParamTensor>& named() const { return named_; }

 private:
  float*& slot_of(const HfTensor& t);  // the member pointer a tensor fills
  // Carves the tensors in HF order (arch/hf.h), the one at flat offset o going to at(o, numel).
  template <class At>
  void carve(const LlamaConfig& cfg, At at);

  Buffer<float> buf_;
  std::vector<ParamTensor> named_;
  ModelStage stage_;
};

}  // namespace agoq

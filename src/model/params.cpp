#include "model/params.h"

#include "core/error.h"

namespace agoq {

size_t ParamTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

ParamSet::ParamSet(const LlamaConfig& cfg, const ModelStage& stage, MemCategory cat, const char* tag) : stage_(stage) {
  AGOQ_CHECK(stage.first_layer >= 0 && stage.first_layer <= stage.end_layer && stage.end_layer <= cfg.n_layers,
             "stage layers [", stage.first_layer, ", ", stage.end_layer, ") outside the model's ", cfg.n_layers);
  AGOQ_CHECK(!cfg.tie_embeddings || stage.embed == stage.head, "tied embeddings split across stages (internal)");
  const int64_t C = cfg.dim, KV = cfg.kv_dim(), F = cfg.ffn_dim, V = cfg.vocab_size;
  buf_ = Buffer<float>(model_stage_param_count(cfg, stage), cat, tag);
  float* p = buf_.data();
  auto take = [&](std::string name, std::vector<int64_t> shape) {
    ParamTensor t{std::move(name), std::move(shape), p, false};
    t.decay = t.shape.size() == 2;
    p += t.numel();
    named_.push_back(t);
    return t.data;
  };
  if (stage.embed) embed = take("model.embed_tokens.weight", {V, C});
  layers.assign(cfg.n_layers, LayerParams{});
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    LayerParams& L = layers[l];
    L.attn_norm = take(pre + "input_layernorm.weight", {C});
    L.wq = take(pre + "self_attn.q_proj.weight", {C, C});
    L.wk = take(pre + "self_attn.k_proj.weight", {KV, C});
    L.wv = take(pre + "self_attn.v_proj.weight", {KV, C});
    L.wo = take(pre + "self_attn.o_proj.weight", {C, C});
    L.mlp_norm = take(pre + "post_attention_layernorm.weight", {C});
    L.w_gate = take(pre + "mlp.gate_proj.weight", {F, C});
    L.w_up = take(pre + "mlp.up_proj.weight", {F, C});
    L.w_down = take(pre + "mlp.down_proj.weight", {C, F});
  }
  if (stage.head) {
    final_norm = take("model.norm.weight", {C});
    lm_head = cfg.tie_embeddings ? embed : take("lm_head.weight", {V, C});
  }
  AGOQ_CHECK(p == buf_.data() + buf_.size(), "parameter layout and count disagree (internal)");
}

}  // namespace agoq

#include "model/params.h"

namespace agoq {

size_t ParamTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

ParamSet::ParamSet(const LlamaConfig& cfg, MemCategory cat, const char* tag) : buf_(cfg.param_count(), cat, tag) {
  const int64_t C = cfg.dim, KV = cfg.kv_dim(), F = cfg.ffn_dim, V = cfg.vocab_size;
  float* p = buf_.data();
  auto take = [&](std::string name, std::vector<int64_t> shape) {
    ParamTensor t{std::move(name), std::move(shape), p, false};
    t.decay = t.shape.size() == 2;
    p += t.numel();
    named_.push_back(t);
    return t.data;
  };
  embed = take("model.embed_tokens.weight", {V, C});
  layers.resize(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) {
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
  final_norm = take("model.norm.weight", {C});
  lm_head = cfg.tie_embeddings ? embed : take("lm_head.weight", {V, C});
}

}  // namespace agoq

#include "parallel/grad_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace agoq {

std::vector<GradRange> grad_units_of(const ParamSet& params) {
  const ModelStage& st = params.stage();
  auto off = [&](const float* p) { return size_t(p - params.data()); };
  std::vector<size_t> starts;  // of each unit, in forward order
  if (st.embed) starts.push_back(0);
  for (int l = st.first_layer; l < st.end_layer; ++l) starts.push_back(off(params.layers[l].attn_norm));
  if (st.head) starts.push_back(off(params.final_norm));
  std::vector<GradRange> u;
  for (size_t i = 0; i < starts.size(); ++i) u.push_back({starts[i], i + 1 < starts.size() ? starts[i + 1] : params.size()});
  return u;
}

GradStoreQ8::GradStoreQ8(LlamaModel& model, std::vector<GradRange> units, int block, QuantRounding rounding)
    : units_(std::move(units)), block_(block), rounding_(rounding) {
  const LlamaConfig& cfg = model.config();
  const ParamSet& P = model.params();
  const bool tied = cfg.tie_embeddings;
  ParamSet& G = model.grads();
  G = ParamSet();  // the full-size fp32 gradient goes first, so the 8-bit store never coexists with it
  size_t biggest = 0;
  for (int u = 0; u < unit_count(); ++u) {
    q8_.emplace_back(units_[u].size(), block, MemCategory::gradients, "grad.q8");
    if (!(u == 0 && tied)) biggest = std::max(biggest, units_[u].size());
  }
  scratch_ = Buffer<float>(biggest, MemCategory::gradients, "grad.scratch");
  if (tied) embed_scratch_ = Buffer<float>(units_[0].size(), MemCategory::gradients, "grad.scratch");

  // Backward only writes through these pointers, so repointing them (and freeing the full-size buffer) turns the
  // model's gradient into per-unit scratch: a unit's tensors keep their offsets relative to the unit's start.
  const ModelStage& st = P.stage();
  auto at = [&](int u, const float* p) { return scratch(u) + (size_t(p - P.data()) - units_[u].begin); };
  if (st.embed) G.embed = at(0, P.embed);
  G.layers.assign(cfg.n_layers, LayerParams{});
  for (int l = st.first_layer; l < st.end_layer; ++l) {
    const int u = grad_unit_of_layer(st, l);
    const LayerParams& p = P.layers[l];
    G.layers[l] = {at(u, p.attn_norm), at(u, p.wq), at(u, p.wk),     at(u, p.wv),    at(u, p.wo),
                   at(u, p.mlp_norm),  at(u, p.w_gate), at(u, p.w_up), at(u, p.w_down)};
  }
  if (st.head) {
    const int head = unit_count() - 1;
    G.final_norm = at(head, P.final_norm);
    G.lm_head = tied ? G.embed : at(head, P.lm_head);
  }
}

size_t GradStoreQ8::accumulate(int u, bool first, uint64_t seed) {
  GradQ8Options o;
  o.block = block_, o.rounding = rounding_, o.seed = {seed, uint64_t(u)};
  GradQ8Buffer& q = q8_[u];
  float* s = scratch(u);
  const size_t n = units_[u].size();
  const size_t bad = first ? grad_q8_quantize(s, n, q.codes.data(), q.scales.data(), o)
                           : grad_q8_accumulate(q.codes.data(), q.scales.data(), s, n, o);
  std::memset(s, 0, n * sizeof(float));
  return bad;
}

void GradStoreQ8::dequantize(int u, float* out) const {
  const GradQ8Buffer& q = q8_[u];
  grad_q8_dequantize(q.codes.data(), q.scales.data(), q.n, out, block_);
}

void GradStoreQ8::quantize(int u, const float* in) {
  GradQ8Options o;
  o.block = block_;
  GradQ8Buffer& q = q8_[u];
  grad_q8_quantize(in, q.n, q.codes.data(), q.scales.data(), o);
}

}  // namespace agoq

#include "parallel/grad_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "optim/adamw.h"

namespace agoq {

std::vector<GradRange> grad_units_of(const LlamaConfig& cfg, const ModelStage& stage) {
  // The layout's tensors (model/hf.h) grouped by the part they belong to: the embedding, a layer, the head.
  std::vector<GradRange> units;
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

GradStore::GradStore(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& opts)
    : stage_(stage), opts_(opts), units_(grad_units_of(cfg, stage)) {
  if (!q8()) {
    full_ = Buffer<float>(size(), MemCategory::gradients);
    return;
  }
  const bool tied = cfg.tie_embeddings;
  size_t biggest = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    q8_.emplace_back(units_[u].size(), opts.block, MemCategory::gradients, "grad.q8");
    if (!(u == 0 && tied)) biggest = std::max(biggest, units_[u].size());
  }
  scratch_ = Buffer<float>(biggest, MemCategory::gradients, "grad.scratch");
  if (tied) embed_scratch_ = Buffer<float>(units_[0].size(), MemCategory::gradients, "grad.scratch");
}

// Backward only writes through the model's pointers, so a unit's tensors can live in the scratch at their offsets
// relative to the unit's start.
std::vector<ParamSegment> GradStore::model_storage() {
  if (!q8()) return {{0, size(), full_.data()}};
  std::vector<ParamSegment> segments;
  for (int u = 0; u < int(units_.size()); ++u) segments.push_back({units_[u].begin, units_[u].end, scratch(u)});
  return segments;
}

void GradStore::step_begin() {
  if (q8()) scratch_.zero(), embed_scratch_.zero();
  else full_.zero();
}

void GradStore::unit_ready(int u, bool first, uint64_t seed) {
  if (!q8()) return;
  GradQ8Options o;
  o.block = opts_.block, o.rounding = opts_.rounding, o.seed = {seed, uint64_t(u)};
  GradQ8Buffer& q = q8_[u];
  float* s = scratch(u);
  const size_t n = units_[u].size();
  if (first) grad_q8_quantize(s, n, q.codes.data(), q.scales.data(), o);
  else grad_q8_accumulate(q.codes.data(), q.scales.data(), s, n, o);
  std::memset(s, 0, n * sizeof(float));
}

float* GradStore::unit_fp32(int u) {
  if (!q8()) return full_.data() + units_[u].begin;
  const GradQ8Buffer& q = q8_[u];
  float* s = scratch(u);
  grad_q8_dequantize(q.codes.data(), q.scales.data(), q.n, s, opts_.block);
  return s;
}

double GradStore::sum_squares() const {
  if (!q8()) return grad_sum_squares(full_.data(), full_.size());
  double sum = 0;
  for (const GradQ8Buffer& q : q8_) sum += grad_q8_sum_squares(q.codes.data(), q.scales.data(), q.n, q.block);
  return sum;
}

void GradStore::quantize(int u, const float* in) {
  GradQ8Options o;
  o.block = opts_.block;
  GradQ8Buffer& q = q8_[u];
  grad_q8_quantize(in, q.n, q.codes.data(), q.scales.data(), o);
}

}  // namespace agoq

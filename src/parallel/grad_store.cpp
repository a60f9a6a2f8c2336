#include "parallel/grad_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/ops.h"
#include "optim/adamw.h"

namespace agoq {

std::vector<GradRange> grad_units_of(const LlamaConfig& cfg, const ModelStage& stage) {
  std::vector<GradRange> units;
  for (const ParamSegment& u : model_grad_units(cfg, stage)) units.push_back({u.begin, u.end});
  return units;
}

namespace {
GradScratchLayout scratch_layout(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& o) {
  return model_grad_scratch(cfg, stage, o.block, /*embed_sparse=*/true, o.lm_head_pieces, o.max_tokens);
}
}  // namespace

size_t grad_store_scratch_floats(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& opts) {
  return scratch_layout(cfg, stage, opts).floats();
}

std::vector<std::vector<GradRange>> grad_store_pieces(const LlamaConfig& cfg, const ModelStage& stage,
                                                      const GradStoreOptions& opts) {
  const std::vector<GradRange> units = grad_units_of(cfg, stage);
  const size_t embed_rows = opts.kind == GradStoreKind::q8 ? scratch_layout(cfg, stage, opts).embed_rows : 0;
  std::vector<std::vector<GradRange>> out;
  for (size_t u = 0; u < units.size(); ++u) {
    const size_t n = units[u].size();
    out.push_back({});
    if (!(u == 0 && embed_rows)) {
      out.back().push_back({0, n});
      continue;
    }
    const size_t len = embed_rows * size_t(model_shard_dims(cfg, stage).C);
    for (size_t at = 0; at < n; at += len) out.back().push_back({at, std::min(n, at + len)});
  }
  return out;
}

GradStore::GradStore(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& opts)
    : stage_(stage),
      opts_(opts),
      dims_(model_shard_dims(cfg, stage)),
      units_(grad_units_of(cfg, stage)),
      pieces_(grad_store_pieces(cfg, stage, opts)) {
  if (!q8()) {
    full_ = Buffer<float>(size(), MemCategory::gradients);
    return;
  }
  for (const GradRange& u : units_) q8_.emplace_back(u.size(), opts.block, MemCategory::gradients, "grad.q8");
  AGOQ_CHECK(!opts.lm_head_pieces || (cfg.tie_embeddings && opts.max_tokens > 0),
             "the lm_head's gradient in pieces is for tied embeddings (internal)");
  const GradScratchLayout l = scratch_layout(cfg, stage, opts);
  embed_piece_rows_ = l.embed_rows;
  scratch_ = Buffer<float>(l.shared(), MemCategory::gradients, "grad.scratch");
  if (l.embed_tied) embed_scratch_ = Buffer<float>(l.embed_tied, MemCategory::gradients, "grad.scratch");
  if (l.kept) kept_ = Buffer<float>(l.kept, MemCategory::gradients, "grad.scratch");
}

// Backward only writes through the model's pointers, so a unit's tensors can live in the scratch at their offsets
// relative to the unit's start.
GradStoreView GradStore::model_storage() {
  if (!q8()) return {{{0, size(), full_.data()}}};
  std::vector<ParamSegment> segments;
  for (int u = 0; u < int(units_.size()); ++u)
    segments.push_back({units_[u].begin, units_[u].end, u == 0 && embed_piece_rows_ ? nullptr : scratch(u)});
  return {segments, this};
}

void GradStore::step_begin() {
  if (q8()) scratch_.zero(), embed_scratch_.zero(), kept_.zero();
  else full_.zero();
}

void GradStore::fold(int u, GradRange p, float* src, bool first, uint64_t seed) {
  GradQ8Options o;
  o.block = opts_.block, o.rounding = opts_.rounding, o.seed = {seed, uint64_t(u)}, o.index_base = p.begin;
  GradQ8Buffer& q = q8_[u];
  int8_t* codes = q.codes.data() + p.begin;
  float* scales = q.scales.data() + p.begin / size_t(opts_.block);
  if (first) grad_q8_quantize(src, p.size(), codes, scales, o);
  else grad_q8_accumulate(codes, scales, src, p.size(), o);
  std::memset(src, 0, p.size() * sizeof(float));
}

void GradStore::unit_ready(int u, bool first, uint64_t seed) {
  if (!q8() || (u == 0 && embed_piece_rows_)) return;
  fold(u, {0, units_[u].size()}, scratch(u), first, seed);
}

// The scratch is zero between units (fold zeroes what it read), so each piece scatters into zeros.
void GradStore::embedding_fold(const float* dout, const int32_t* tokens, int rows, bool first, uint64_t seed) {
  AGOQ_CHECK(embed_piece_rows_ > 0, "a sparse embedding gradient for a store that holds it densely (internal)");
  const size_t C = size_t(dims_.C);
  if (!kept_.empty()) {  // tied: the rows add into the lm_head's gradient kept for them, then those blocks fold
    for (int n = 0; n < rows; ++n) {
      const int r = tokens[n] - dims_.v_begin;
      if (r < 0 || r >= dims_.V) continue;
      const size_t at = size_t(r) * C;
      const auto k = std::prev(std::upper_bound(kept_ranges_.begin(), kept_ranges_.end(), at,
                                                [](size_t x, const KeptRange& k) { return x < k.begin; }));
      float* dst = kept_.data() + k->at + (at - k->begin);
      const float* src = dout + size_t(n) * C;
      for (size_t c = 0; c < C; ++c) dst[c] += src[c];
    }
    for (const KeptRange& k : kept_ranges_) fold(0, {k.begin, k.end}, kept_.data() + k.at, first, seed);
    return;
  }
  for (const GradRange& p : pieces(0)) {
    embedding_backward(scratch_.data(), dout, tokens, rows, dims_.C, dims_.v_begin + int(p.begin / C),
                       int(p.size() / C));
    fold(0, p, scratch_.data(), first, seed);
  }
}

// The blocks of the embedding the rows of tokens (inside this shard) touch, merged into intervals in order.
void GradStore::kept_plan(const int32_t* tokens, int n) {
  const size_t C = size_t(dims_.C), block = size_t(opts_.block), size = units_[0].size();
  std::vector<int> rows;
  for (int i = 0; i < n; ++i)
    if (tokens[i] >= dims_.v_begin && tokens[i] < dims_.v_begin + dims_.V) rows.push_back(tokens[i] - dims_.v_begin);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  kept_ranges_.clear();
  size_t at = 0;
  for (const int r : rows) {
    const size_t row_end = (size_t(r) + 1) * C;  // the unit's last block may be partial
    const size_t b = size_t(r) * C / block * block, end = std::min(size, (row_end + block - 1) / block * block);
    if (!kept_ranges_.empty() && kept_ranges_.back().end >= b) {
      at += end - kept_ranges_.back().end, kept_ranges_.back().end = end;
    } else {
      kept_ranges_.push_back({b, end, at}), at += end - b;
    }
  }
  AGOQ_CHECK(at <= kept_.size(), "the kept embedding blocks outgrow their buffer (internal)");
}

void GradStore::lm_head_fold(float* dw, int v0, int rows, const int32_t* tokens, int n, bool first, uint64_t seed) {
  AGOQ_CHECK(!kept_.empty(), "an lm_head gradient in pieces for a store that holds it densely (internal)");
  const size_t C = size_t(dims_.C), begin = size_t(v0) * C, end = begin + size_t(rows) * C;
  AGOQ_CHECK(begin % size_t(opts_.block) == 0, "an lm_head piece that splits a gradient block (internal)");
  if (v0 == 0) kept_plan(tokens, n);
  size_t at = begin;  // folded up to here
  for (const KeptRange& k : kept_ranges_) {
    if (k.end <= begin || k.begin >= end) continue;
    const size_t kb = std::max(k.begin, begin), ke = std::min(k.end, end);
    if (at < kb) fold(0, {at, kb}, dw + (at - begin), first, seed);
    std::memcpy(kept_.data() + k.at + (kb - k.begin), dw + (kb - begin), (ke - kb) * sizeof(float));
    at = ke;
  }
  if (at < end) fold(0, {at, end}, dw + (at - begin), first, seed);
}

float* GradStore::unit_fp32(int u, GradRange p) {
  if (!q8()) return full_.data() + units_[u].begin + p.begin;
  const GradQ8Buffer& q = q8_[u];
  float* s = scratch(u);
  grad_q8_dequantize(q.codes.data() + p.begin, q.scales.data() + p.begin / size_t(opts_.block), p.size(), s,
                     opts_.block);
  return s;
}

double GradStore::sum_squares() const {
  if (!q8()) return grad_sum_squares(full_.data(), full_.size());
  double sum = 0;
  for (const GradQ8Buffer& q : q8_) sum += grad_q8_sum_squares(q.codes.data(), q.scales.data(), q.n, q.block);
  return sum;
}

void GradStore::quantize(int u, GradRange p, const float* in) {
  GradQ8Options o;
  o.block = opts_.block;
  GradQ8Buffer& q = q8_[u];
  grad_q8_quantize(in, p.size(), q.codes.data() + p.begin, q.scales.data() + p.begin / size_t(opts_.block), o);
}

}  // namespace agoq

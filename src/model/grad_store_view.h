// Where a model's backward writes its parameter gradients (LlamaModel's constructor): segments of the flat layout
// it adds into (arch/params.h), and, for a store that keeps the embedding's gradient in 8 bits only
// (parallel/grad_store.h), the sink that takes that gradient in sparse form instead of a segment. The model writes
// into both as backward produces the values; what the store does with a finished unit is its owner's business
// (the step calls it between the backward parts it runs, model/llama.h).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "arch/params.h"

namespace agoq {

class GradRowsSink {
 public:
  virtual ~GradRowsSink() = default;
  // The first stage's embedding gradient: row n of dout (rows x C, d loss / d embedding output, grad_scale
  // applied) adds into the embedding row of token tokens[n]. first: the step's first micro-batch (the store
  // overwrites rather than adds); seed: the micro-batch's gradient rounding (MicroBatchRun).
  virtual void embedding_fold(const float* dout, const int32_t* tokens, int rows, bool first, uint64_t seed) = 0;
  // The tied lm_head's weight gradient in vocabulary pieces: dw (rows x C) is the shard's rows [v0, v0 + rows),
  // final for this micro-batch (grad_scale applied; the store may overwrite it); tokens: the micro-batch's n
  // input ids. Pieces come in order, during the head's backward.
  virtual void lm_head_fold(float* dw, int v0, int rows, const int32_t* tokens, int n, bool first, uint64_t seed) = 0;
};

struct GradStoreView {
  GradStoreView() = default;
  GradStoreView(std::vector<ParamSegment> s, GradRowsSink* r = nullptr) : segments(std::move(s)), rows(r) {}
  // Empty: the model's own fp32 buffer. A segment whose data is null is the embedding's, whose gradient goes to
  // `rows` (and the tied lm_head's too).
  std::vector<ParamSegment> segments;
  GradRowsSink* rows = nullptr;
};

}  // namespace agoq

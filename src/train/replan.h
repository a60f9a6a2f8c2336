// Dynamic activation bit allocation during training (`agoq train --mem-budget`, docs/plan.md): after the warm-up
// steps, every stage's measured peak and calibrated slot sensitivities are gathered, plan_replan_bits chooses new
// bits for every stage, and each rank reallocates its own stage's activation stores.
#pragma once
#include <string>
#include <vector>

#include "model/llama.h"
#include "parallel/grid.h"

namespace agoq {

struct ReplanResult {
  std::string log;    // the one-line change report
  std::string error;  // non-empty: the budget cannot hold some stage even at the lowest bits (nothing changed)
};

// Collective over the grid, between steps (nothing in flight). m: micro-batches per step and replica; rows: tokens
// per micro-batch; capacity: the per-rank memory budget. Every rank computes the same plan and the same result.
ReplanResult replan_activation_bits(LlamaModel& model, const ParallelGrid& grid, const std::vector<ModelStage>& stages,
                                    int m, size_t rows, size_t capacity);

}  // namespace agoq

// The CPU step's phases 4 and 5 (optim/step.h; docs/parallel.md, "Loss, norm, clipping"): the step's loss and
// gradient norm summed over the grid, the check and the clipping factor; then one AdamW per unit (ZeRO-1: per unit
// shard, after which every unit's parameters are all-gathered).
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "optim/adamw.h"
#include "optim/step.h"  // StepNorm
#include "parallel/grad_reduce.h"

namespace agoq {

struct DpOptimizerOptions {
  AdamWConfig adam;
  float clip = 1.0f;
  bool zero = false;
  // The ranks holding this replica's other pipeline stages (null: the model is whole): the loss and the gradient
  // norm are summed over them too, so every rank of the grid sees the same values.
  Communicator* stages = nullptr;
  // The T tensor-parallel shards of this rank's layers (null: unsharded): the gradient norm sums their shards'
  // squares, counting the replicated tensors (the norms, alike on every shard: no quantization block mixes them with
  // a shard's slice, arch/params.h model_block_isolating_replicated) once.
  Communicator* tensor = nullptr;
};

class DpOptimizer {
 public:
  DpOptimizer(Communicator& comm, ParamSet& params, const std::vector<GradUnit>& units, const DpOptimizerOptions& o);

  // loss_sum: this rank's micro-batches' summed loss, of micro_total over all ranks (or per counted token of
  // loss_tokens, optim/step.h); the reduced gradient in reducer. Throws CommAgreedError (the same on every rank)
  // when the loss or the norm is not finite. Collective.
  StepNorm norm_and_clip(long step, double loss_sum, int micro_total, double loss_tokens, GradReducer& reducer);
  // AdamW from the reduced gradient, scaled by clip_scale. Collective with ZeRO-1.
  void update(long step, float lr, float clip_scale, GradReducer& reducer);
  // Unit u's AdamW (its moments cover the unit's own part).
  AdamW& adam(int u) { return *adam_[u]; }

 private:
  // ZeRO-1: every rank's shard of the unit's parameters, after its update, to every rank.
  void params_allgather(const GradUnit& unit);
  // Sum of squares of the reduced gradient's replicated tensors (this rank's part; ZeRO: summed over the ranks).
  double replicated_sum_squares(GradReducer& reducer);

  Communicator& comm_;
  ParamSet& params_;
  const std::vector<GradUnit>& units_;
  DpOptimizerOptions opts_;
  int D_;
  std::vector<std::unique_ptr<AdamW>> adam_;
};

}  // namespace agoq

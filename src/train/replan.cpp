#include "train/replan.h"

#include "core/memory.h"
#include "parallel/pipeline.h"
#include "plan/bit_alloc.h"

namespace agoq {

namespace {
// Layers [first, end) of a whole-model policy, as the allocator's per-stage policy.
ActPolicy stage_part(const ActPolicy& all, const ModelStage& st) {
  ActPolicy p = all;
  p.slots = {all.slots.begin() + st.first_layer, all.slots.begin() + st.end_layer};
  return p;
}
}  // namespace

ReplanResult replan_activation_bits(LlamaModel& model, const ParallelGrid& grid, const std::vector<ModelStage>& stages,
                                    int m, size_t rows, size_t capacity) {
  const int P = grid.P;
  const PlanActShape shape{model.config(), grid.T, rows, model.stage().sp};
  const ActPolicy& policy = model.store().policy();  // the same whole-model policy on every rank
  std::vector<PlanStageBudget> budgets(P);
  std::vector<PlanStageBits> current;
  for (int r = 0; r < P; ++r) {
    budgets[r].n_layers = stages[r].layer_count(), budgets[r].in_flight = pipeline_in_flight(P, r, m);
    current.push_back(plan_stage_bits_of(shape, stage_part(policy, stages[r]), budgets[r].in_flight));
  }

  // 1. Sensitivities: C per slot calibrated by this stage's stores, summed over its replicas, gathered per stage.
  std::vector<double> sens(size_t(P) * kActSlotCount, 0.0);
  for (int i = 0; i < model.store_count(); ++i) {
    for (int s = 0; s < kActSlotCount; ++s)
      sens[size_t(grid.stage) * kActSlotCount + s] += model.store(i).sensitivity()[s];
  }
  if (grid.D > 1) grid.dp->allreduce_sum(sens.data(), sens.size());
  if (grid.pipe) grid.pipe->allreduce_sum(sens.data(), sens.size());
  // A stage's T shards get one plan (their slots have the same widths): their sensitivities add up.
  if (grid.tp) grid.tp->allreduce_sum(sens.data(), sens.size());
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < kActSlotCount; ++s) {
      const double c = sens[size_t(r) * kActSlotCount + s];
      budgets[r].sensitivity[s] = c > 0 ? c : -1.0;  // not stored, so not measured: the default
    }

  // 2. Measured peaks: the largest over a stage's replicas, gathered per stage.
  double peak = double(MemoryTracker::global().peak_total());
  if (grid.D > 1) peak = grid.dp->allreduce_value(peak, CommOp::max);
  if (grid.tp) peak = grid.tp->allreduce_value(peak, CommOp::max);
  std::vector<double> peaks(P, 0.0);
  peaks[grid.stage] = peak;
  if (grid.pipe) grid.pipe->allreduce_sum(peaks.data(), peaks.size());

  // 3. The plan; refuse a budget that some stage cannot meet even at the lowest bits.
  const PlanReplan plan =
      plan_replan_bits(shape, budgets, current, std::vector<size_t>(peaks.begin(), peaks.end()), capacity);
  ReplanResult out;
  out.log = plan.log;
  for (int r = 0; r < P; ++r)
    if (plan.min_capacity[r] > capacity) {
      out.error = "--mem-budget " + format_bytes(capacity) + " cannot hold " +
                  (P > 1 ? "pipeline stage " + std::to_string(r) : std::string("the model")) +
                  " even with the lowest activation bits: it needs at least " + format_bytes(plan.min_capacity[r]) +
                  " per rank";
      return out;
    }

  // 4. Apply: the whole-model policy with every stage's new bits (a store allocates only its own stage's layers).
  if (plan.changed) {
    ActPolicy all = policy;
    for (int r = 0; r < P; ++r)
      for (int l = stages[r].first_layer; l < stages[r].end_layer; ++l)
        all.slots[l] = plan.stages[r].policy.slots[l - stages[r].first_layer];
    all.name = "replanned";
    model.set_policy(all);
  }
  return out;
}

}  // namespace agoq

// The bit allocator: optimal on its path against brute force, monotone in the budget, stage order under 1F1B,
// infeasible budgets, exact bytes through the real store, sensitivity, and the re-planning hook.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "model/act_store_cpu.h"
#include "plan/bit_alloc.h"
#include "plan/memory_model.h"

namespace agoq {
namespace {

PlanActShape small_shape(int layers = 2) {
  PlanActShape s;
  s.cfg.vocab_size = 256, s.cfg.dim = 128, s.cfg.n_layers = layers, s.cfg.n_heads = 4, s.cfg.n_kv_heads = 2;
  s.cfg.ffn_dim = 384, s.cfg.max_seq_len = 64;
  s.rows = 64;
  return s;
}

double level_error(double C, const QuantFormat& f) {
  const double b = f.kind == QuantKind::bf16 ? 9 : f.kind == QuantKind::fp32 ? 24 : f.bits;
  const double q = std::exp2(b) - 1;
  return C / (q * q);
}

// Independent of the allocator: every combination of levels of the allocatable slots, bytes from the store's own
// accounting (plan_act_bytes of the policy), minimum error among those within `budget`.
double brute_force_min_error(const PlanActShape& sh, const PlanStageBudget& st, const PlanBitsOptions& opt,
                             size_t budget) {
  const auto alloc = plan_allocatable_slots(opt);
  std::vector<int> slots;
  for (int s = 0; s < kActSlotCount; ++s)
    if (alloc[s]) slots.push_back(s);
  auto formats = [&](int s) {
    std::vector<QuantFormat> f;
    for (int b : opt.bits) f.push_back(quant_format_int(b, opt.group, ActSlot(s) != ActSlot::swiglu_out, opt.rounding));
    if (act_slot_is_attention(ActSlot(s))) f.push_back(quant_format_bf16());
    return f;
  };
  double best = INFINITY;
  ActPolicy pol = ActPolicy::parse(opt.base_policy, st.n_layers);
  std::function<void(size_t, double)> rec = [&](size_t i, double err) {
    if (i == slots.size()) {
      if (size_t(st.in_flight) * plan_act_bytes(pol, sh.cfg, sh.tp, sh.rows) <= budget) best = std::min(best, err);
      return;
    }
    const int s = slots[i];
    for (const QuantFormat& f : formats(s)) {
      for (auto& layer : pol.slots) layer[s] = {true, f};
      rec(i + 1, err + level_error(st.sensitivity[s], f));
    }
  };
  rec(0, 0.0);
  return best;
}

PlanStageBudget random_stage(Rng& rng, int layers, int in_flight) {
  PlanStageBudget st;
  st.n_layers = layers, st.in_flight = in_flight;
  for (double& c : st.sensitivity) c = std::exp(6.0 * rng.uniform());
  return st;
}

// Every point of the greedy path (budget just below the previous point) is optimal for its own bytes.
TEST(PlanBits, GreedyPathIsOptimalVsBruteForce) {
  Rng rng(42);
  for (int trial = 0; trial < 6; ++trial) {
    PlanBitsOptions opt;
    opt.quantize_attention = trial >= 4;
    if (trial == 3) opt.bits = {2, 4, 8};
    const PlanActShape sh = small_shape(trial % 2 + 1);
    const PlanStageBudget st = random_stage(rng, sh.cfg.n_layers, 1 + trial % 3);
    PlanStageBudget b = st;
    b.budget = size_t(1) << 40;
    int points = 0;
    while (true) {
      const PlanStageBits r = plan_allocate_stage(sh, b, opt);
      const double best = brute_force_min_error(sh, st, opt, r.act_bytes);
      EXPECT_NEAR(r.error, best, 1e-9 * best)
          << "trial " << trial << " point " << points << " " << plan_bits_summary(r.bits);
      ++points;
      if (r.act_bytes == plan_min_act_bytes(sh, st, opt)) break;
      b.budget = r.act_bytes - 1;
    }
    EXPECT_GE(points, 4);
  }
}

TEST(PlanBits, MonotoneInBudget) {
  Rng rng(7);
  for (bool attn : {false, true}) {
    PlanBitsOptions opt;
    opt.quantize_attention = attn;
    const PlanActShape sh = small_shape(3);
    PlanStageBudget st = random_stage(rng, 3, 2);
    const size_t lo = plan_min_act_bytes(sh, st, opt);
    st.budget = size_t(1) << 40;
    const size_t hi = plan_allocate_stage(sh, st, opt).act_bytes;
    std::array<int, kActSlotCount> prev{};
    for (int i = 0; i <= 400; ++i) {
      st.budget = lo + (hi - lo) * size_t(i) / 400;
      const PlanStageBits r = plan_allocate_stage(sh, st, opt);
      EXPECT_LE(r.act_bytes, st.budget);
      for (int s = 0; s < kActSlotCount; ++s) EXPECT_GE(r.bits[s], prev[s]) << "budget " << st.budget << " slot " << s;
      prev = r.bits;
    }
    EXPECT_EQ(prev[int(ActSlot::gate)], 8);
  }
}

TEST(PlanBits, EarlyStagesGetNoMoreBitsUnder1F1B) {
  const PlanActShape sh = small_shape(2);
  const int P = 4;
  PlanStageBudget first;
  first.n_layers = 2, first.in_flight = P;
  const size_t min0 = plan_min_act_bytes(sh, first);
  bool some_stage_differs = false;
  for (double f : {1.0, 1.2, 1.5, 2.0, 3.0, 5.0}) {
    const size_t budget = size_t(double(min0) * f);
    std::vector<PlanStageBudget> stages(P);
    for (int r = 0; r < P; ++r) stages[r].n_layers = 2, stages[r].in_flight = P - r, stages[r].budget = budget;
    const auto bits = plan_allocate_bits(sh, stages);
    int total0 = 0, total_last = 0;
    for (int s = 0; s < kActSlotCount; ++s) {
      for (int r = 0; r + 1 < P; ++r) EXPECT_LE(bits[r].bits[s], bits[r + 1].bits[s]) << "budget " << budget;
      total0 += bits[0].bits[s], total_last += bits[P - 1].bits[s];
    }
    some_stage_differs = some_stage_differs || total0 < total_last;
  }
  EXPECT_TRUE(some_stage_differs);
}

TEST(PlanBits, InfeasibleBudgetNamesTheSmallestFeasible) {
  const PlanActShape sh = small_shape(2);
  PlanStageBudget st;
  st.n_layers = 2, st.in_flight = 3;
  const size_t need = plan_min_act_bytes(sh, st);
  st.budget = need;
  EXPECT_NO_THROW(plan_allocate_stage(sh, st));
  st.budget = need - 1;
  try {
    plan_allocate_bits(sh, {st, st});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("stage 0: ", 0), 0u) << m;
    EXPECT_NE(m.find("smallest feasible budget"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(need) + " bytes"), std::string::npos) << m;
  }
}

// The policy the allocator returns allocates exactly the bytes it reports, in the real store.
TEST(PlanBits, PolicyBytesAreExact) {
  const PlanActShape sh = small_shape(3);
  PlanStageBudget st;
  st.n_layers = 3, st.in_flight = 2;
  st.budget = (plan_min_act_bytes(sh, st) * 3) / 2;
  const PlanStageBits r = plan_allocate_stage(sh, st);
  CpuActStore store(sh.cfg, int(sh.rows), r.policy, model_stage_whole(sh.cfg));
  EXPECT_EQ(2 * (store.stored_bytes(true) + store.stored_bytes(false)), r.act_bytes);
  EXPECT_EQ(r.bits[int(ActSlot::q)], 16);  // attention stays bf16 by default
  EXPECT_EQ(r.bits[int(ActSlot::swiglu_out)], 0);
  EXPECT_EQ(r.policy.at(0, ActSlot::gate).format.rounding, QuantRounding::stochastic);
}

TEST(PlanBits, Sensitivity) {
  // A high-sensitivity slot keeps more bits than an equally large low-sensitivity one.
  const PlanActShape sh = small_shape(1);
  PlanStageBudget st;
  st.n_layers = 1;
  st.sensitivity[int(ActSlot::gate)] = 1e6;
  st.sensitivity[int(ActSlot::up)] = 1.0;
  st.budget = plan_min_act_bytes(sh, st) + 30000;
  const PlanStageBits r = plan_allocate_stage(sh, st);
  EXPECT_GT(r.bits[int(ActSlot::gate)], r.bits[int(ActSlot::up)]);
}

TEST(PlanBits, ReplanMovesBitsToSpareStages) {
  const PlanActShape sh = small_shape(2);
  std::vector<PlanStageBudget> stages(2);
  stages[0].n_layers = stages[1].n_layers = 2;
  stages[0].in_flight = 2, stages[1].in_flight = 1;
  stages[0].budget = plan_min_act_bytes(sh, stages[0]) * 2;
  stages[1].budget = plan_min_act_bytes(sh, stages[1]) * 6 / 5;
  const auto cur = plan_allocate_bits(sh, stages);
  const size_t capacity = 1 << 24;
  // Stage 0 measured over capacity (by half of what it has above the lowest bits), stage 1 with plenty to spare.
  const size_t over = (cur[0].act_bytes - plan_min_act_bytes(sh, stages[0])) / 2;
  const std::vector<size_t> peaks = {capacity + over, capacity / 2};
  const PlanReplan rp = plan_replan_bits(sh, stages, cur, peaks, capacity, {}, 0.0);
  ASSERT_EQ(rp.stages.size(), 2u);
  EXPECT_TRUE(rp.changed);
  int down = 0, up = 0;
  for (int s = 0; s < kActSlotCount; ++s) {
    EXPECT_LE(rp.stages[0].bits[s], cur[0].bits[s]);
    EXPECT_GE(rp.stages[1].bits[s], cur[1].bits[s]);
    down += rp.stages[0].bits[s]<cur[0].bits[s], up += rp.stages[1].bits[s]> cur[1].bits[s];
  }
  EXPECT_GT(down, 0);
  EXPECT_GT(up, 0);
  EXPECT_LE(rp.stages[0].act_bytes, cur[0].act_bytes - over);
  EXPECT_EQ(rp.stages[1].bits[int(ActSlot::gate)], 8);
  EXPECT_NE(rp.log.find("stage 0 -"), std::string::npos) << rp.log;
  EXPECT_NE(rp.log.find("->"), std::string::npos) << rp.log;
  EXPECT_EQ(rp.log.find('\n'), std::string::npos);
  // Unchanged measurements: unchanged bits. Hopeless: lowest bits and a warning, no throw.
  const PlanReplan same = plan_replan_bits(sh, stages, cur, {capacity - 0, capacity - 0}, capacity, {}, 0.0);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(same.stages[r].bits, cur[r].bits) << same.log;
  EXPECT_FALSE(same.changed);
  const PlanReplan bad = plan_replan_bits(sh, stages, cur, {capacity * 4, capacity}, capacity, {}, 0.0);
  EXPECT_NE(bad.log.find("WARNING"), std::string::npos) << bad.log;
  EXPECT_EQ(bad.stages[0].bits[int(ActSlot::gate)], 2);
}

TEST(PlanBits, Summary) {
  std::array<int, kActSlotCount> b{};
  b[int(ActSlot::attn_norm_in)] = 4, b[int(ActSlot::mlp_norm_in)] = 3;
  b[int(ActSlot::q)] = b[int(ActSlot::k)] = b[int(ActSlot::v)] = b[int(ActSlot::attn_out)] = 16;
  b[int(ActSlot::gate)] = b[int(ActSlot::up)] = 8;
  EXPECT_EQ(plan_bits_summary(b), "norm=4/3 norm_out=- attn=bf16 mlp=8 swiglu=-");
}

}  // namespace
}  // namespace agoq

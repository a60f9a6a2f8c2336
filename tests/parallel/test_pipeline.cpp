// Pipeline parallelism (1F1B): the schedule against its definition, a stage's gradients against the whole model's,
// P-stage and P x D training against one process, and the memory model against each stage's measured peaks.
// Runs on every rank of the job (np 1, 2 and 4 from tests/mpi_tests.cmake); tests that need a pipeline skip on one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/llama.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "parallel_test_util.h"
#include "plan/memory_model.h"
#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

// The definition of non-interleaved 1F1B for stage r of P over m micro-batches, checked op by op: a warm-up of
// min(P - r - 1, m) forwards, then strict F/B alternation while forwards remain, then the remaining backwards;
// forwards and backwards each in micro-batch order; a micro-batch's backward after its forward; never more than
// min(P - r, m) micro-batches in flight.
void expect_1f1b(const std::vector<PipeOp>& ops, int P, int r, int m) {
  SCOPED_TRACE("stage " + std::to_string(r) + " of " + std::to_string(P) + ", m = " + std::to_string(m));
  ASSERT_EQ(ops.size(), size_t(2 * m));
  const int warmup = std::min(P - r - 1, m);
  int next_f = 0, next_b = 0, in_flight = 0, most = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    if (op.kind == PipeOpKind::forward) {
      EXPECT_EQ(op.micro, next_f++) << "op " << i;
      most = std::max(most, ++in_flight);
    } else {
      EXPECT_EQ(op.micro, next_b++) << "op " << i;
      EXPECT_LT(op.micro, next_f) << "backward before its forward, op " << i;
      --in_flight;
    }
    const bool in_warmup = int(i) < warmup;
    const int k = int(i) - warmup;  // position after the warm-up
    const bool in_steady = !in_warmup && k < 2 * (m - warmup);
    const PipeOpKind want = in_warmup   ? PipeOpKind::forward
                            : in_steady ? (k % 2 == 0 ? PipeOpKind::forward : PipeOpKind::backward)
                                        : PipeOpKind::backward;  // cool-down
    EXPECT_EQ(op.kind, want) << "op " << i << (in_warmup ? " (warm-up)" : in_steady ? " (steady)" : " (cool-down)");
  }
  EXPECT_EQ(most, std::min(P - r, m));
  EXPECT_EQ(pipeline_in_flight(P, r, m), std::min(P - r, m));
}

TEST(PipelineSchedule, FollowsTheOneFOneBDefinition) {
  for (int P = 1; P <= 6; ++P)
    for (int r = 0; r < P; ++r)
      for (int m = 1; m <= 9; ++m) expect_1f1b(pipeline_schedule_1f1b(P, r, m), P, r, m);
}

TEST(PipelineSchedule, ExactOrderOfFourStages) {
  using K = PipeOpKind;
  auto str = [](const std::vector<PipeOp>& ops) {
    std::ostringstream os;
    for (const PipeOp& o : ops) os << (o.kind == K::forward ? 'F' : 'B') << o.micro << ' ';
    return os.str();
  };
  EXPECT_EQ(str(pipeline_schedule_1f1b(4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(str(pipeline_schedule_1f1b(4, 2, 6)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 ");
  EXPECT_EQ(str(pipeline_schedule_1f1b(4, 3, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  EXPECT_EQ(str(pipeline_schedule_1f1b(4, 0, 2)), "F0 F1 B0 B1 ");  // fewer micro-batches than stages
}

TEST(PipelineStages, SplitAndErrors) {
  LlamaConfig cfg;
  cfg.n_layers = 7;
  const auto even = model_stages_split(cfg, 3);
  ASSERT_EQ(even.size(), 3u);
  EXPECT_EQ(even[0].layer_count(), 2);  // the remainder goes to the last stages (fewer micro-batches in flight)
  EXPECT_EQ(even[2].layer_count(), 3);
  EXPECT_TRUE(even[0].embed && !even[0].head && even[2].head && !even[1].embed && !even[1].head);
  EXPECT_EQ(even[1].first_layer, 2);
  const auto custom = model_stages_split(cfg, 2, "5,2");
  EXPECT_EQ(custom[0].end_layer, 5);
  EXPECT_EQ(custom[1].first_layer, 5);
  size_t total = 0;
  for (const ModelStage& s : even) total += model_stage_param_count(cfg, s);
  EXPECT_EQ(total, cfg.param_count());
  auto error_of = [&](int P, const std::string& spec) {
    try {
      model_stages_split(cfg, P, spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(8, "").find("more stages than"), std::string::npos);
  EXPECT_NE(error_of(2, "3,3").find("sums to 6"), std::string::npos);
  // Counts that each fit an int but whose sum does not (found by fuzz_flags): an error, not an overflow.
  EXPECT_NE(error_of(3, "2000000000,2000000000,1").find("sums to 4000000001"), std::string::npos);
  EXPECT_NE(error_of(2, "7").find("gives 1 stages"), std::string::npos);
  EXPECT_NE(error_of(2, "x,2").find("'x' is not a positive layer count"), std::string::npos);
  EXPECT_NE(error_of(2, "7,0").find("'0' is not a positive"), std::string::npos);
}

LlamaConfig pipe_cfg() {
  LlamaConfig c;
  c.vocab_size = 40, c.dim = 32, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 48, c.max_seq_len = 16;
  return c;
}

// One step of m micro-batches through a P-stage pipeline (P = the job's size): every stage's gradients and the
// loss equal the whole model's forward_backward over the same micro-batches (the same ops in the same order:
// fp32 reassociation only), and each stage executed exactly the 1F1B order with one store per micro-batch in flight.
TEST(Pipeline, StageGradientsEqualTheWholeModel) {
  const int P = world().size();
  if (P < 2) GTEST_SKIP() << "a pipeline needs mpirun -np >= 2";
  const LlamaConfig cfg = pipe_cfg();
  const int B = 2, T = 16, m = 5;
  const ParallelGrid grid = parallel_grid_make(world(), P);
  const auto stages = model_stages_split(cfg, P);
  const ActPolicy policy = ActPolicy::parse("fp32", cfg.n_layers);
  LlamaModel stage(cfg, B, T, policy, stages[grid.stage], pipeline_in_flight(P, grid.stage, m));
  LlamaModel whole(cfg, B, T, policy);
  stage.init_weights(7), whole.init_weights(7);
  std::vector<int32_t> in(size_t(m) * B * T), tgt(in.size());
  Rng rng(3);  // the same on every rank
  for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(rng.below(40)), tgt[i] = int32_t(rng.below(40));

  stage.grads().zero(), whole.grads().zero();
  Pipeline pipe(*grid.pipe, stage, B, T);
  const std::vector<MicroBatchRun> runs(m, {.grad_scale = 1.0f / m});
  const double loss = pipe.run(in.data(), tgt.data(), B, T, runs);
  double want = 0;
  for (int j = 0; j < m; ++j)
    want += whole.forward_backward(in.data() + size_t(j) * B * T, tgt.data() + size_t(j) * B * T, B, T, runs[j]);

  expect_1f1b(pipe.trace(), P, grid.stage, m);
  EXPECT_EQ(stage.store_count(), std::min(P - grid.stage, m));
  if (grid.stage == P - 1) {
    EXPECT_NEAR(loss, want, 1e-6 * want);
  } else {
    EXPECT_EQ(loss, 0.0);
  }
  std::vector<ParamTensor> all = whole.grads().named();
  for (const ParamTensor& g : stage.grads().named()) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const ParamTensor& t) { return t.name == g.name; });
    ASSERT_NE(it, all.end()) << g.name;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < g.numel(); ++i) {
      worst = std::max(worst, double(std::abs(g.data[i] - it->data[i])));
      scale = std::max(scale, double(std::abs(it->data[i])));
    }
    EXPECT_LE(worst, 1e-6 * scale) << g.name;
  }
}

// "L-P+1,1,1,...": all but one layer per other stage on the first.
std::string first_stage_heavy(int layers, int P) {
  std::ostringstream os;
  os << layers - (P - 1);
  for (int r = 1; r < P; ++r) os << ",1";
  return os.str();
}

TrainOptions pipe_tiny(const fs::path& data, const std::string& out, int accum) {
  TrainOptions o = tiny(data, out, accum);
  o.model.n_layers = 4;
  o.eval_every = 4;
  return o;
}

// P stages (D = 1) vs one process, fp32 path: the same losses to 1e-6 relative, validation through the pipeline.
TEST(Pipeline, TrainingMatchesOneProcess) {
  const int P = world().size();
  if (P < 2) GTEST_SKIP() << "a pipeline needs mpirun -np >= 2";
  const fs::path data = shared_data("pp");
  TrainOptions o = pipe_tiny(data, "pp", 4);
  o.pp = P;
  const TrainResult pp = train_run(o);
  const TrainResult ref = single_reference(o, 1);
  if (world().rank() == 0) {
    ASSERT_EQ(pp.losses.size(), ref.losses.size());
    EXPECT_LE(max_rel_diff(pp.losses, ref.losses), 1e-6) << "P = " << P;
    EXPECT_LE(std::abs(pp.final_val_loss - ref.final_val_loss), 1e-6 * ref.final_val_loss);
    EXPECT_LT(pp.losses.back(), pp.losses.front());
  }
  // An uneven split (all but one layer on the first stage) trains the same model.
  o.stage_layers = first_stage_heavy(4, P);
  o.out_dir = (data / "uneven").string();
  const TrainResult uneven = train_run(o);
  if (world().rank() == 0) {
    EXPECT_LE(max_rel_diff(uneven.losses, ref.losses), 1e-6) << o.stage_layers;
  }
  shared_cleanup(data);
}

// A P x D grid (np 4: 2 stages x 2 replicas), without and with ZeRO-1, against one process running all D x m
// micro-batches, and the 8-bit paths on the grid: within the data-parallel tolerance
// (tests/parallel/test_data_parallel.cpp).
TEST(Pipeline, GridMatchesOneProcess) {
  const int W = world().size();
  if (W < 4) GTEST_SKIP() << "a 2 x 2 grid needs mpirun -np 4";
  const fs::path data = shared_data("grid");
  TrainOptions o = pipe_tiny(data, "grid", 2);
  o.pp = 2;
  const TrainResult grid = train_run(o);  // fp32 buckets reduced on their thread while the pipeline sends
  const TrainResult ref = single_reference(o, W / 2);
  o.zero = 1, o.out_dir = (data / "grid_zero").string();
  const TrainResult grid_zero = train_run(o);
  o.grad_store = GradStoreKind::q8, o.allreduce = GradReduce::q8;
  o.out_dir = (data / "grid_q8").string();
  const TrainResult q8 = train_run(o);
  if (world().rank() == 0) {
    EXPECT_LE(max_rel_diff(grid.losses, ref.losses), 1e-6);
    EXPECT_LE(max_rel_diff(grid_zero.losses, ref.losses), 1e-6);
    EXPECT_LE(max_rel_diff(q8.losses, ref.losses), 0.01);
  }
  shared_cleanup(data);
}

// Resume on a pipeline (the checkpoint holds the whole model, gathered from the stages): bit-identical.
TEST(Pipeline, ResumeIsBitIdentical) {
  const int P = world().size();
  if (P < 2) GTEST_SKIP() << "a pipeline needs mpirun -np >= 2";
  const fs::path data = shared_data("ppresume");
  TrainOptions o = pipe_tiny(data, "straight", 2);
  o.pp = P;
  expect_resume_bit_identical(o, data);
  // 8-bit moments: every stage's codes and unit scales gathered into the one checkpoint, and back; and the
  // conversion from fp32 moments.
  o.adam.state = OptimState::q8;
  o.out_dir = (data / "q8" / "straight").string();
  expect_resume_bit_identical(o, data / "q8");
  o.out_dir = (data / "fp32_to_q8").string();
  expect_resume_converts(o, data / "convert", OptimState::fp32, OptimState::q8);
  shared_cleanup(data);
}

// The memory model of one pipeline rank (plan_memory_cpu_trainer with its stage and micro-batches in flight)
// against the tracker's peaks of a real P-stage run (P = 2, 4): within 10% per category and in total.
TEST(Pipeline, MemoryModelMatchesEachStage) {
  const int P = world().size();
  if (P < 2) GTEST_SKIP() << "a pipeline needs mpirun -np >= 2";
  const fs::path data = shared_data("ppmem");
  for (const char* policy : {"fp32", "agoq", "agoq+q8 states"}) {
    const bool optim_q8 = std::string(policy) == "agoq+q8 states";
    TrainOptions o = pipe_tiny(data, std::string("mem_") + (optim_q8 ? "q8" : policy), 4);
    o.pp = P, o.act_policy = optim_q8 ? "agoq" : policy, o.steps = 2, o.eval_every = 0;
    o.adam.state = optim_q8 ? OptimState::q8 : OptimState::fp32;
    const TrainResult r = train_run(o);
    LlamaConfig cfg = o.model;
    cfg.vocab_size = 50, cfg.max_seq_len = o.seq;
    const int stage = world().rank();
    PlanCpuOptions c;
    c.batch = o.batch, c.seq = o.seq, c.pp = P, c.stage = model_stages_split(cfg, P)[stage];
    c.in_flight = pipeline_in_flight(P, stage, o.accum);
    c.optim_q8 = optim_q8;
    const PlanMemory want = plan_memory_cpu_trainer(cfg, ActPolicy::parse(o.act_policy, cfg.n_layers), c);
    EXPECT_EQ(r.peak.bytes[int(MemCategory::optimizer)], want[MemCategory::optimizer]) << policy << ", stage " << stage;
    for (int k = 0; k < kMemCategoryCount; ++k) {
      const double got = double(r.peak.bytes[k]);
      EXPECT_LE(std::abs(double(want.bytes[k]) - got), 0.10 * got)
          << policy << ", stage " << stage << ", " << mem_category_name(MemCategory(k)) << ": model " << want.bytes[k]
          << ", tracker " << got;
    }
  }
  shared_cleanup(data);
}

// Dynamic re-planning after the warm-up steps: with a budget a little below what the first stage (most micro-batches
// in flight) measured, it must lower its bits while the last stage, which has room, raises them; a budget that
// nothing fits is one clear error naming the smallest that would.
TEST(Pipeline, ReplanShiftsBitsBetweenStages) {
  const int P = world().size();
  if (P < 2) GTEST_SKIP() << "a pipeline needs mpirun -np >= 2";
  const fs::path data = shared_data("replan");
  TrainOptions o = pipe_tiny(data, "measure", 4);
  o.pp = P, o.act_policy = "agoq", o.steps = 4, o.eval_every = 0;
  o.stage_layers = first_stage_heavy(4, P);  // the first stage the heaviest: layers and micro-batches
  const TrainResult measured = train_run(o);
  // Stage 0's peak with 10% of its activations to give back, as a capacity the re-planner keeps 5% under.
  double budget =
      (double(measured.peak_total) - 0.1 * double(measured.peak.bytes[int(MemCategory::activations)])) / 0.95;
  world().broadcast(&budget, sizeof budget, 0);
  o.mem_budget = size_t(budget), o.replan_after = 2, o.out_dir = (data / "replan").string();
  const TrainResult r = train_run(o);
  std::vector<std::string> parts;  // "replan: stage 0 ...; stage 1 ..."
  for (size_t at = 0, next; at < r.replan_log.size(); at = next + 1) {
    next = r.replan_log.find(';', at);
    if (next == std::string::npos) next = r.replan_log.size();
    parts.push_back(r.replan_log.substr(at, next - at));
  }
  ASSERT_EQ(parts.size(), size_t(P)) << r.replan_log;
  EXPECT_TRUE(parts[0].find("4->3") != std::string::npos || parts[0].find("4->2") != std::string::npos) << r.replan_log;
  EXPECT_EQ(parts[0].find("->8"), std::string::npos) << r.replan_log;
  EXPECT_NE(parts[P - 1].find("4->8"), std::string::npos) << r.replan_log;
  for (float l : r.losses) EXPECT_TRUE(std::isfinite(l));

  o.mem_budget = 1024, o.out_dir = (data / "tiny").string();
  try {
    train_run(o);
    ADD_FAILURE() << "no error for a 1 KiB budget";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("even with the lowest activation bits: it needs at least"), std::string::npos)
        << e.what();
  }
  shared_cleanup(data);
}

}  // namespace
}  // namespace agoq

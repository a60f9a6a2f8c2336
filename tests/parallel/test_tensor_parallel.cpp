// Tensor parallelism under MPI (the layers' collectives over a communicator; the shards against the whole model
// gradient by gradient: tests/model/test_tensor_parallel.cpp): T = the job's ranks and the 4-rank grids TP 2 x PP 2
// and TP 2 x DP 2 against one process, resume, checkpoints that resume on one process, the memory model against
// every rank's peaks, bad grids; the same with sequence parallelism (--sp). Tests that need more ranks skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "parallel_test_util.h"
#include "plan/memory_model.h"
#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

constexpr int kVocab = 48;  // divisible by T = 2 and 4 (agoq does not pad the vocabulary)

// tiny() with kv heads that T divides.
TrainOptions tp_tiny(const fs::path& data, const std::string& out, int T, int accum) {
  TrainOptions o = tiny(data, out, accum);
  o.tp = T, o.model.n_kv_heads = T > 2 ? 4 : 2;
  o.eval_every = 4;  // a validation loss at steps 4 and 8
  return o;
}

void expect_matches(const TrainResult& got, const TrainResult& ref, const std::string& what, double tol) {
  if (world().rank() != 0) return;
  const double dl = max_rel_diff(got.losses, ref.losses), dn = max_rel_diff(got.grad_norms, ref.grad_norms),
               dv = std::abs(double(got.final_val_loss) - ref.final_val_loss) / ref.final_val_loss;
  std::printf("[ measured ] %s vs one process: losses %.2e, gradient norms %.2e, validation loss %.2e\n", what.c_str(),
              dl, dn, dv);
  EXPECT_LE(dl, tol) << what;
  EXPECT_LE(dn, tol) << what;
  EXPECT_LE(dv, tol) << what;
  EXPECT_LT(got.losses.back(), got.losses.front()) << what;
}

// T = every rank of the job, fp32: the training curve, norms and validation loss of one process.
TEST(TensorParallel, MatchesOneProcess) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tp", kVocab);
  const TrainOptions o = tp_tiny(data, "tp", W, 2);
  expect_matches(train_run(o), single_reference(o, 1), "TP=" + std::to_string(W), 1e-5);
  shared_cleanup(data);
}

// TP 2 x PP 2 and TP 2 x DP 2 (ZeRO-1 on fp32; the q8 store with the q8 all-reduce) on 4 ranks.
TEST(TensorParallel, GridsOfFourMatchOneProcess) {
  if (world().size() != 4) GTEST_SKIP() << "the grids need mpirun -np 4";
  const fs::path data = shared_data("tpgrid", kVocab);
  TrainOptions pp = tp_tiny(data, "tp2pp2", 2, 2);
  pp.pp = 2;
  expect_matches(train_run(pp), single_reference(pp, 1), "TP2xPP2", 1e-5);
  TrainOptions dp = tp_tiny(data, "tp2dp2", 2, 2);
  dp.zero = 1;
  const TrainResult ref = single_reference(dp, 2);
  expect_matches(train_run(dp), ref, "TP2xDP2 ZeRO-1", 1e-5);
  // The q8 paths' tolerance is the data-parallel one (test_data_parallel.cpp, Q8PathsFollowTheFp32Curve).
  dp.grad_store = GradStoreKind::q8, dp.allreduce = GradReduce::q8, dp.zero = 0,
  dp.out_dir = (data / "tp2dp2q8").string();
  const TrainResult q = train_run(dp);
  if (world().rank() == 0) {
    const double d = max_rel_diff(q.losses, ref.losses);
    std::printf("[ measured ] TP2xDP2 q8 store + q8 all-reduce vs one process fp32: losses %.2e\n", d);
    EXPECT_LE(d, 0.01);
  }
  shared_cleanup(data);
}

// Sequence parallelism (fp32): TP = W + SP, and (np 4) TP 2 + SP x PP 2 (each TP rank sends its rows of the
// residual stream to the next stage), against one process.
TEST(TensorParallel, SequenceParallelMatchesOneProcess) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tpsp", kVocab);
  TrainOptions o = tp_tiny(data, "tpsp", W, 2);
  o.sp = true;
  expect_matches(train_run(o), single_reference(o, 1), "TP=" + std::to_string(W) + " + SP", 1e-5);
  if (W == 4) {
    TrainOptions pp = tp_tiny(data, "tp2sppp2", 2, 2);
    pp.sp = true, pp.pp = 2;
    expect_matches(train_run(pp), single_reference(pp, 1), "TP2 + SP x PP2", 1e-5);
  }
  shared_cleanup(data);
}

TEST(TensorParallel, SequenceParallelResumeIsBitIdentical) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tpspresume", kVocab);
  TrainOptions o = tp_tiny(data, "straight", 2, 2);
  o.pp = W / 2, o.sp = true;  // np 4: TP 2 + SP x PP 2
  o.eval_every = 0;
  expect_resume_bit_identical(o, data);
  shared_cleanup(data);
}

TEST(TensorParallel, ResumeIsBitIdentical) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tpresume", kVocab);
  TrainOptions o = tp_tiny(data, "straight", 2, 2);
  o.pp = W / 2;  // np 4: TP 2 x PP 2
  o.eval_every = 0;
  expect_resume_bit_identical(o, data);
  shared_cleanup(data);
}

// A checkpoint holds the whole HF model whatever the grid: 4 steps on TP = W, then 4 more on one process, follow
// the TP run's own last 4 steps.
TEST(TensorParallel, CheckpointResumesOnOneProcess) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tpckpt", kVocab);
  TrainOptions o = tp_tiny(data, "straight", W, 2);
  o.eval_every = 0;
  const TrainResult straight = train_run(o);
  o.out_dir = (data / "first").string(), o.stop_after = 4;
  train_run(o);
  o.stop_after = 0, o.resume = (data / "first" / "ckpt").string(), o.out_dir = (data / "rest").string();
  const TrainResult rest = single_reference(o, 1);
  if (world().rank() == 0) {
    ASSERT_EQ(rest.losses.size(), 4u);
    const std::vector<float> want(straight.losses.begin() + 4, straight.losses.end());
    const double d = max_rel_diff(rest.losses, want);
    std::printf("[ measured ] TP=%d checkpoint resumed on one process: losses %.2e\n", W, d);
    EXPECT_LE(d, 1e-5);
  }
  shared_cleanup(data);
}

// 8-bit moments under TP 2 (np 4: TP 2 x PP 2): the curve near one process's with 8-bit moments (their blocks lie
// otherwise on a shard, so the rounding differs: the q8 states' tolerance, test_data_parallel.cpp); a resume on the
// same grid bit-identical (each shard's codes and scales saved as they are, the norms the same on every shard); the
// checkpoint resumed on one process and a one-process checkpoint resumed on TP 2 (converting through fp32: the
// first loss is the weights', the rest near the straight run's).
TEST(TensorParallel, Q8StatesTrainResumeAndConvert) {
  const int W = world().size();
  if (W < 2 || W % 2 != 0) GTEST_SKIP() << "tensor parallelism needs mpirun -np 2 or 4";
  const fs::path data = shared_data("tpq8", kVocab);
  TrainOptions o = tp_tiny(data, "straight", 2, 2);
  o.pp = W / 2, o.eval_every = 0, o.adam.state = OptimState::q8;
  const TrainResult ref = single_reference(o, 1);
  o.out_dir = (data / "tp").string();
  expect_resume_bit_identical(o, data / "tp");
  o.out_dir = (data / "again").string();
  const TrainResult straight = train_run(o);  // expect_resume_bit_identical's straight run again
  auto expect_continues = [&](const TrainResult& rest, const TrainResult& want, const char* what) {
    if (world().rank() != 0) return;
    ASSERT_EQ(rest.losses.size(), 4u) << what;
    const std::vector<float> tail(want.losses.begin() + 4, want.losses.end());
    const double first = std::abs(double(rest.losses[0]) - tail[0]) / tail[0], d = max_rel_diff(rest.losses, tail);
    std::printf("[ measured ] %s: first loss %.2e, losses %.2e\n", what, first, d);
    EXPECT_LE(first, 1e-5) << what;
    EXPECT_LE(d, 1e-3) << what;
  };
  if (world().rank() == 0) {
    const double d = max_rel_diff(straight.losses, ref.losses);
    std::printf("[ measured ] TP=2 8-bit moments vs one process with 8-bit moments: losses %.2e\n", d);
    EXPECT_LE(d, 0.02);
  }
  TrainOptions half = o;  // TP 2's checkpoint at step 4 on one process
  half.out_dir = (data / "half").string(), half.stop_after = 4;
  train_run(half);
  TrainOptions one = o;
  one.resume = (data / "half" / "ckpt").string(), one.out_dir = (data / "to_one").string();
  expect_continues(single_reference(one, 1), straight, "TP=2 8-bit checkpoint resumed on one process");
  TrainOptions first = o;  // one process's checkpoint at step 4 on TP 2
  first.out_dir = (data / "one").string(), first.stop_after = 4;
  single_reference(first, 1);
  TrainOptions two = o;
  two.resume = (data / "one_single" / "ckpt").string(), two.out_dir = (data / "to_two").string();
  expect_continues(train_run(two), ref, "one-process 8-bit checkpoint resumed on TP=2");
  shared_cleanup(data);
}

// fp32 moments of TP 2 resumed as 8-bit ones and the reverse, on the same grid.
TEST(TensorParallel, ResumeConvertsBetweenFp32AndQ8States) {
  const int W = world().size();
  if (W < 2 || W % 2 != 0) GTEST_SKIP() << "tensor parallelism needs mpirun -np 2 or 4";
  const fs::path data = shared_data("tpconvert", kVocab);
  TrainOptions o = tp_tiny(data, "a", 2, 2);
  o.pp = W / 2, o.eval_every = 0;
  expect_resume_converts(o, data / "to_q8", OptimState::fp32, OptimState::q8);
  o.out_dir = (data / "b").string();
  expect_resume_converts(o, data / "to_fp32", OptimState::q8, OptimState::fp32);
  shared_cleanup(data);
}

// plan_memory_cpu_trainer with this rank's shard against the tracker's peaks, every category, on every rank of
// TP = W and (np 4) TP 2 x PP 2, fp32 and agoq, without and with sequence parallelism; and `agoq plan`'s
// activations for the same grid.
TEST(TensorParallel, MemoryModelMatchesEveryRank) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "tensor parallelism needs mpirun -np >= 2";
  const fs::path data = shared_data("tpmem", kVocab);
  for (int P : {1, 2}) {
    if (W % (2 * P) != 0 || (P == 1 && W > 4)) continue;
    const int T = W / P;
    for (const bool sp : {false, true})
      for (const char* policy : {"fp32", "agoq"}) {
        TrainOptions o = tp_tiny(data, "mem" + std::to_string(P) + policy + (sp ? "sp" : ""), T, 4);
        o.pp = P, o.act_policy = policy, o.steps = 2, o.eval_every = 0, o.sp = sp;
        const TrainResult r = train_run(o);
        LlamaConfig cfg = o.model;
        cfg.vocab_size = kVocab, cfg.max_seq_len = o.seq;
        const ParallelGrid g = parallel_grid_make(world(), P, T);
        PlanCpuOptions c;
        c.batch = o.batch, c.seq = o.seq, c.pp = P, c.in_flight = pipeline_in_flight(P, g.stage, o.accum);
        c.stage = model_stage_shard(cfg, model_stages_split(cfg, P)[g.stage], T, g.tp_rank, sp);
        PlanMemory want = plan_memory_cpu_trainer(cfg, ActPolicy::parse(policy, cfg.n_layers), c);
        // The token files, loaded in workspace, are the data's (what the model leaves out: plan/memory_model.h).
        want[MemCategory::workspace] += MemoryTracker::global().tag_peak("data");
        for (int k = 0; k < kMemCategoryCount; ++k)
          EXPECT_EQ(want.bytes[k], r.peak.bytes[k])
              << policy << ", TP " << T << (sp ? " + SP" : "") << " x PP " << P << ", rank " << world().rank() << ", "
              << mem_category_name(MemCategory(k));
        // `agoq plan`'s model of the same grid (plan_memory_per_rank, the GPU one) stores the same activations.
        const PlanParallel par{W, T, P, false, sp};
        const PlanWorkload work{o.seq, o.batch, o.accum};
        const PlanStage st = plan_stages(cfg, par, work)[g.stage];
        const PlanMemory planned =
            plan_memory_per_rank(cfg, par, work, st, PlanSystem::agoq, ActPolicy::parse(policy, st.n_layers));
        EXPECT_EQ(planned[MemCategory::activations], r.peak.bytes[int(MemCategory::activations)])
            << "agoq plan, " << policy << ", TP " << T << (sp ? " + SP" : "") << " x PP " << P << ", rank "
            << world().rank();
      }
  }
  shared_cleanup(data);
}

// Grids the job or the model cannot form: one line, the same on every rank.
TEST(TensorParallel, BadGridsAreOneLineErrors) {
  const fs::path data = shared_data("tpbad", kVocab);
  auto error_of = [&](TrainOptions o) {
    try {
      train_run(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const int W = world().size();
  TrainOptions o = tp_tiny(data, "bad", 2, 1);
  o.tp = 3 * W;
  EXPECT_NE(error_of(o).find("needs a multiple of " + std::to_string(3 * W) + " ranks"), std::string::npos);
  if (W % 2 == 0) {
    o = tp_tiny(data, "bad", 2, 1);
    o.model.n_kv_heads = 1;
    EXPECT_NE(error_of(o).find("--tp 2 does not divide the model's 1 kv heads"), std::string::npos);
    o = tp_tiny(data, "bad", 2, 1);
    o.model.ffn_dim = 45;
    EXPECT_NE(error_of(o).find("--tp 2 does not divide the MLP width (--ffn) 45"), std::string::npos);
    o = tp_tiny(data, "bad", 2, 1);
    o.sp = true, o.batch = 1, o.seq = 15;
    EXPECT_NE(error_of(o).find("--sp: --tp 2 does not divide the 15 rows (batch 1 x seq 15)"), std::string::npos);
  }
  o = tp_tiny(data, "bad", 1, 1);
  o.sp = true;
  EXPECT_NE(error_of(o).find("--sp (sequence parallelism) shards over the tensor-parallel ranks: it needs --tp > 1"),
            std::string::npos);
  shared_cleanup(data);
}

}  // namespace
}  // namespace agoq

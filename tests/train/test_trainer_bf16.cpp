// Training with bf16 GEMMs (`--compute bf16`, model/gemm_bf16.h) against the fp32 reference: the losses and gradient
// norms follow the fp32 run within bf16's rounding, a resumed run is bit-identical (the weights' bf16 copies are
// remade from the loaded masters), the memory model counts the copies and the scratch to the byte, and a CPU
// without native bf16 products refuses `--compute bf16` and runs auto as fp32. Skipped, with the reason, on a CPU
// without AVX512-BF16 or AMX-BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/gemm_bf16.h"
#include "tests/common/synthetic_corpus.h"
#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

#define AGOQ_REQUIRE_BF16()                                                                                \
  do {                                                                                                     \
    std::string isa;                                                                                       \
    if (!gemm_bf16_supported(&isa)) GTEST_SKIP() << "no native bf16 products on this CPU (" << isa << ")"; \
  } while (0)

TrainOptions bf16_options(const fs::path& data, const std::string& out, ComputeMode compute) {
  TrainOptions o = train_options_reference();  // the unquantized fp32 run; each test opts in
  o.data_dir = data.string();
  o.out_dir = (data / out).string();
  o.model.dim = 64, o.model.n_layers = 2, o.model.n_heads = 4, o.model.n_kv_heads = 2, o.model.ffn_dim = 96;
  o.batch = 4, o.seq = 32, o.accum = 2, o.steps = 12, o.warmup = 3, o.lr = 1e-2f, o.min_lr = 1e-3f;
  o.eval_every = 0, o.eval_batches = 2, o.quiet = true;
  o.act_policy = "agoq", o.grad_store = GradStoreKind::q8;
  o.compute = compute;
  return o;
}

// bf16 inputs carry 8 significant bits: the step's loss moves by about 2^-9 relative per product, and the run's
// curve stays within 2% of the fp32 one (the GPU's bar, tests/train_cuda) while it learns.
TEST(TrainerBf16, FollowsTheFp32CurveAndLearns) {
  AGOQ_REQUIRE_BF16();
  const fs::path data = synthetic_corpus_make("trainer_bf16_curve", 50, 8000);
  const TrainResult f = train_run(bf16_options(data, "fp32", ComputeMode::fp32));
  const TrainResult b = train_run(bf16_options(data, "bf16", ComputeMode::bf16));
  ASSERT_EQ(b.losses.size(), f.losses.size());
  // The first step is one forward and backward on the same weights: its loss and gradient norm are the fp32 step's
  // within the rounding of the products' inputs.
  EXPECT_NEAR(b.losses[0], f.losses[0], 0.002 * f.losses[0]) << "the first step's loss";
  EXPECT_NEAR(b.grad_norms[0], f.grad_norms[0], 0.01 * f.grad_norms[0]) << "the first step's gradient norm";
  // Later steps compute on weights that have drifted apart (lr 1e-2): the curve within 2%, the gradient norms 10%.
  for (size_t i = 0; i < f.losses.size(); ++i) {
    EXPECT_NEAR(b.losses[i], f.losses[i], 0.02 * f.losses[i]) << "step " << i + 1;
    EXPECT_NEAR(b.grad_norms[i], f.grad_norms[i], 0.1 * f.grad_norms[i]) << "step " << i + 1;
  }
  EXPECT_NE(b.losses, f.losses) << "the bf16 run computed in fp32";
  EXPECT_LT(b.losses.back(), 0.8 * b.losses.front());
  fs::remove_all(data);
}

TEST(TrainerBf16, ResumeIsBitIdentical) {
  AGOQ_REQUIRE_BF16();
  const fs::path data = synthetic_corpus_make("trainer_bf16_resume", 50, 8000);
  const TrainResult straight = train_run(bf16_options(data, "straight", ComputeMode::bf16));
  TrainOptions first = bf16_options(data, "split", ComputeMode::bf16);
  first.stop_after = 5;
  train_run(first);
  TrainOptions second = bf16_options(data, "split", ComputeMode::bf16);
  second.resume = (data / "split" / "ckpt").string();
  const TrainResult rest = train_run(second);
  ASSERT_EQ(rest.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(rest.losses[i], straight.losses[5 + i]) << "step " << 6 + i;
  fs::remove_all(data);
}

// Rounding each weight when a GEMM reads it gives the bits its cached copy holds: the same run, step for step.
TEST(TrainerBf16, PerGemmWeightsEqualCachedCopies) {
  AGOQ_REQUIRE_BF16();
  const fs::path data = synthetic_corpus_make("trainer_bf16_per_gemm", 50, 8000);
  const TrainResult cached = train_run(bf16_options(data, "cached", ComputeMode::bf16));
  TrainOptions o = bf16_options(data, "per_gemm", ComputeMode::bf16);
  o.bf16_weights = Bf16Weights::per_gemm;
  const TrainResult per_gemm = train_run(o);
  EXPECT_EQ(per_gemm.losses, cached.losses);
  EXPECT_EQ(per_gemm.grad_norms, cached.grad_norms);
  fs::remove_all(data);
}

// The weights' bf16 copies (weights) and the rounding scratch (workspace) are in the memory model, to the byte;
// with per-GEMM rounding there are no copies and a third scratch.
TEST(TrainerBf16, MemoryModelCountsTheCopiesAndTheScratch) {
  AGOQ_REQUIRE_BF16();
  const fs::path data = synthetic_corpus_make("trainer_bf16_memory", 50, 8000);
  for (int run = 0; run < 4; ++run) {
    const bool pieces = run % 2, per_gemm = run >= 2;
    TrainOptions o =
        bf16_options(data, std::string(pieces ? "pieces" : "whole") + (per_gemm ? "_per_gemm" : ""), ComputeMode::bf16);
    o.steps = 3, o.adam.state = OptimState::q8, o.model.tie_embeddings = true;
    if (pieces) o.lm_head_grad = LmHeadGrad::pieces;
    if (per_gemm) o.bf16_weights = Bf16Weights::per_gemm;
    train_run(o);
    std::ifstream f(fs::path(o.out_dir) / "metrics.jsonl");
    std::string line, last;
    while (std::getline(f, line))
      if (!line.empty()) last = line;
    const nlohmann::json rec = nlohmann::json::parse(last);
    EXPECT_EQ(rec.at("compute"), "bf16");
    const nlohmann::json& mem = rec.at("memory");
    for (const auto& [cat, bytes] : mem["peak"].items())
      EXPECT_EQ(mem["model"].at(cat), bytes)
          << (pieces ? "pieces" : "whole") << (per_gemm ? ", per gemm: " : ": ") << cat;
  }
  fs::remove_all(data);
}

}  // namespace
}  // namespace agoq

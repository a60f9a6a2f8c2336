// The training loop end to end: exact resume, determinism, and learning on the prepared corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "tests/common/synthetic_corpus.h"
#include "tests/common/temp_path.h"

#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

fs::path make_synthetic_data(const std::string& name, int vocab = 50, int n = 6000) {
  return synthetic_corpus_make("trainer_" + name, vocab, n);
}

TrainOptions tiny_options(const fs::path& data, const std::string& out) {
  TrainOptions o = train_options_reference();  // the unquantized fp32 run; each test opts in
  o.data_dir = data.string();
  o.out_dir = (data / out).string();
  o.model.dim = 32, o.model.n_layers = 2, o.model.n_heads = 4, o.model.n_kv_heads = 2, o.model.ffn_dim = 48;
  o.batch = 4, o.seq = 16, o.accum = 2, o.steps = 12, o.warmup = 3, o.lr = 1e-2f, o.min_lr = 1e-3f;
  o.eval_every = 5, o.eval_batches = 2, o.quiet = true;
  return o;
}

// N steps straight vs N/2 + resume + N/2: identical losses, bit for bit (stochastic rounding included: its
// seeds derive from the step).
void check_resume(const std::string& policy, OptimState state = OptimState::fp32) {
  const fs::path data = make_synthetic_data("resume_" + policy + optim_state_name(state));
  TrainOptions straight_opt = tiny_options(data, "straight");
  straight_opt.act_policy = policy;
  straight_opt.adam.state = state;
  const TrainResult straight = train_run(straight_opt);
  ASSERT_EQ(straight.losses.size(), 12u);

  TrainOptions first = tiny_options(data, "split");
  first.act_policy = policy;
  first.adam.state = state;
  first.stop_after = 5;
  const TrainResult a = train_run(first);
  TrainOptions second = tiny_options(data, "split");
  second.act_policy = policy;
  second.adam.state = state;
  second.resume = (data / "split" / "ckpt").string();
  const TrainResult b = train_run(second);
  ASSERT_EQ(a.losses.size(), 5u);
  ASSERT_EQ(b.losses.size(), 7u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.losses[i], straight.losses[i]) << "step " << i + 1;
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b.losses[i], straight.losses[5 + i]) << "step " << i + 6;
  EXPECT_EQ(b.final_val_loss, straight.final_val_loss);
  fs::remove_all(data);
}

TEST(Trainer, ResumeIsBitIdentical) { check_resume("fp32"); }
TEST(Trainer, ResumeIsBitIdenticalUnderAgoq) { check_resume("agoq"); }
TEST(Trainer, ResumeIsBitIdenticalQ8States) { check_resume("agoq", OptimState::q8); }

// Every step's record holds the memory model's figure for the run beside the tracker's peaks: equal, every
// category, unquantized and with AGoQ's stores and 8-bit AdamW states (one process: no collective buffers).
TEST(Trainer, MetricsRecordTheMemoryModelBesideThePeaks) {
  const fs::path data = make_synthetic_data("memory_model");
  for (const char* policy : {"fp32", "agoq"}) {
    TrainOptions o = tiny_options(data, policy);
    o.act_policy = policy, o.steps = 3;
    if (std::string(policy) == "agoq") o.grad_store = GradStoreKind::q8, o.adam.state = OptimState::q8;
    train_run(o);
    std::ifstream f(fs::path(o.out_dir) / "metrics.jsonl");
    std::string line, last;
    while (std::getline(f, line))
      if (!line.empty()) last = line;
    const nlohmann::json mem = nlohmann::json::parse(last).at("memory");
    ASSERT_TRUE(mem.contains("model")) << policy;
    ASSERT_EQ(mem["model"].size(), mem["peak"].size()) << policy;
    for (const auto& [cat, bytes] : mem["peak"].items())
      EXPECT_EQ(mem["model"].at(cat), bytes) << policy << ": " << cat;
  }
  fs::remove_all(data);
}

TEST(Trainer, SameSeedSameLossesBf16Store) {
  const fs::path data = make_synthetic_data("bf16");
  TrainOptions o = tiny_options(data, "a");
  o.act_policy = "baseline-bf16";
  const TrainResult a = train_run(o);
  o.out_dir = (data / "b").string();
  const TrainResult b = train_run(o);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_LT(a.losses.back(), a.losses.front());
  fs::remove_all(data);
}

// Learning on the real corpus prepared by scripts/test.sh. Uniform guessing scores ln(4096) = 8.32 and the best
// context-free guess (the corpus' unigram entropy) 6.36; after 150 steps of a small model the validation loss
// must be below 6.0, so the model has learnt to use context.
TEST(Trainer, LearnsThePreparedCorpus) {
  const fs::path data = fs::path(AGOQ_SOURCE_DIR) / "data" / "austen";
  ASSERT_TRUE(fs::exists(data / "train.bin")) << data << " is missing: scripts/test.sh fetches and prepares it";
  TrainOptions o = train_options_reference();  // the unquantized fp32 run; each test opts in
  o.data_dir = data.string();
  o.out_dir = (fs::temp_directory_path() / ("agoq_trainer_austen_" + std::to_string(::getpid()))).string();
  fs::remove_all(o.out_dir);  // a run killed earlier must not make this one a refused "fresh run into a run"
  o.model.dim = 128, o.model.n_layers = 2, o.model.n_heads = 4, o.model.n_kv_heads = 4, o.model.ffn_dim = 344;
  o.batch = 8, o.seq = 128, o.steps = 150, o.warmup = 15, o.lr = 3e-3f, o.min_lr = 3e-4f;
  o.eval_every = 0, o.eval_batches = 4, o.quiet = true;
  const TrainResult r = train_run(o);
  const double ln_vocab = std::log(4096.0);
  EXPECT_LT(r.final_val_loss, 6.0) << "initial " << r.losses.front();
  EXPECT_NEAR(r.losses.front(), ln_vocab, 0.3);
  fs::remove_all(o.out_dir);
}

}  // namespace
}  // namespace agoq

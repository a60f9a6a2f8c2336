// Packed prompt/completion data (token files with loss and document flags, data/examples.h): the loss is a mean
// per counted target over the step's whole global batch (optim/step.h), with attention masked by document.
//  * One process: m micro-batches of B windows equal one micro-batch of m·B windows (the same windows, drawn in
//    the same order), which holds only when the normalisation is global: micro-batches count different numbers
//    of completion tokens, so averaging their means would weigh tokens unequally.
//  * DP, PP and TP grids against one process running all D·m micro-batches; a stopped run resumes bit for bit.
// With tests/train/test_torch_parity.cpp (one batch's masked loss and gradients equal PyTorch's with ignore_index
// and a block-diagonal causal mask), every grid computes PyTorch's global masked mean.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/examples.h"
#include "data/token_file.h"
#include "tests/parallel/parallel_test_util.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

constexpr int kVocab = 48;  // divisible by TP 2 and 4
constexpr int kSeq = 16;    // tiny()'s

// Examples of 3 to 12 tokens, a prompt of 1 to half of them, the completion the rest; the tokens follow a noisy
// periodic pattern (learnable), packed into windows of kSeq + 1 as `prepare --format prompt-completion` packs them.
std::vector<Example> synthetic_examples(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<Example> out(n);
  int at = 0;
  for (Example& e : out) {
    const int len = 3 + int(rng.below(10)), prompt = 1 + int(rng.below(uint32_t(len / 2)));
    for (int i = 0; i < len; ++i, ++at) {
      e.tokens.push_back(rng.below(10) == 0 ? int32_t(rng.below(kVocab)) : int32_t((at * 7) % kVocab));
      e.loss.push_back(i >= prompt);
    }
  }
  return out;
}

void masked_corpus_write(const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int32_t pad = 0;
  for (const auto& [name, n, seed] : {std::tuple{"train.bin", 600, 3}, std::tuple{"val.bin", 60, 4}}) {
    const PackedExamples p = examples_pack(synthetic_examples(n, seed), kSeq + 1, pad);
    token_file_write((dir / name).string(), p.tokens, kVocab, p.flags, kSeq + 1);
  }
}

fs::path shared_masked_data(const std::string& name) {
  Communicator& w = world();
  int64_t pid = int64_t(getpid());
  w.broadcast(&pid, sizeof pid, 0);
  const fs::path dir = fs::temp_directory_path() / ("agoq_mask_" + std::to_string(pid) + "_" + name);
  if (w.rank() == 0) masked_corpus_write(dir);
  w.barrier();
  return dir;
}

TrainOptions masked_tiny(const fs::path& data, const std::string& out, int accum) {
  TrainOptions o = tiny(data, out, accum);
  o.model.n_kv_heads = 4;  // TP 4 divides it
  o.eval_every = 4;
  return o;
}

// same_val: whether both validated on the same windows (their count depends on the micro-batch size).
void expect_same_training(const TrainResult& got, const TrainResult& ref, const std::string& what,
                          bool same_val = true) {
  if (world().rank() != 0) return;
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  const double dl = max_rel_diff(got.losses, ref.losses), dn = max_rel_diff(got.grad_norms, ref.grad_norms),
               dv = std::abs(double(got.final_val_loss) - ref.final_val_loss) / ref.final_val_loss;
  std::printf("[ measured ] %s: losses %.2e, gradient norms %.2e, validation loss %.2e\n", what.c_str(), dl, dn, dv);
  EXPECT_LE(dl, 1e-5) << what;
  EXPECT_LE(dn, 1e-4) << what;
  if (same_val) {
    EXPECT_LE(dv, 1e-5) << what;
  }
  EXPECT_LT(got.losses.back(), got.losses.front()) << what;
}

TEST(LossMasks, MicroBatchesNormaliseOverTheirWholeStep) {
  Communicator& w = world();
  std::unique_ptr<Communicator> self = w.split(w.rank(), 0);
  const fs::path data = shared_masked_data("accum");
  if (w.rank() == 0) {
    TrainOptions o = masked_tiny(data, "m4", 4);
    o.comm = self.get();
    o.batch = 1;
    const TrainResult split = train_run(o);
    o.accum = 1, o.batch = 4, o.out_dir = (data / "m1").string();
    const TrainResult whole = train_run(o);
    expect_same_training(split, whole, "4 micro-batches of 1 vs 1 of 4", false);
  }
  shared_cleanup(data);
}

// Stopped after 4 steps and resumed: the window draws, masks and losses continue bit for bit.
TEST(LossMasks, ResumeIsBitIdentical) {
  const fs::path data = shared_masked_data("resume");
  expect_resume_bit_identical(masked_tiny(data, "straight", 2), data);
  shared_cleanup(data);
}

TEST(LossMasks, EveryGridMatchesOneProcess) {
  const int W = world().size();
  if (W < 2) GTEST_SKIP() << "grids need mpirun -np >= 2";
  const fs::path data = shared_masked_data("grids");
  struct Grid {
    const char* name;
    int pp, tp;
  };
  for (const Grid g : {Grid{"PP 1, TP 1", 1, 1}, Grid{"PP 2", 2, 1}, Grid{"TP 2", 1, 2}}) {
    TrainOptions o = masked_tiny(data, g.name, 2);
    o.pp = g.pp, o.tp = g.tp;
    if (g.pp > 1) o.model.n_layers = 4;
    const int D = W / (g.pp * g.tp);
    const TrainResult grid = train_run(o);
    const TrainResult ref = single_reference(o, D);
    expect_same_training(grid, ref, std::string(g.name) + " x DP " + std::to_string(D) + " vs one process");
  }
  shared_cleanup(data);
}

}  // namespace
}  // namespace agoq

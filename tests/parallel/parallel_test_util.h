// Shared by test_parallel's main and tests: a small synthetic corpus (a noisy periodic sequence, learnable but not
// trivial) in agoq's token-file format, and the helpers the data- and pipeline-parallel tests share.
#pragma once
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "comm/communicator.h"
#include "core/rng.h"
#include "data/token_file.h"
#include "tests/common/synthetic_corpus.h"
#include "train/trainer.h"

namespace agoq {

inline void dp_test_write_corpus(const std::filesystem::path& dir, int vocab = 50, int n = 6000) {
  synthetic_corpus_write(dir, vocab, n);
}

inline Communicator& world() { return comm_world(); }

// A per-job folder (rank 0's pid) with the corpus, written by rank 0 and seen by all.
inline std::filesystem::path shared_data(const std::string& name, int vocab = 50) {
  Communicator& w = world();
  int64_t pid = int64_t(getpid());
  w.broadcast(&pid, sizeof pid, 0);
  const auto dir = std::filesystem::temp_directory_path() / ("agoq_dp_" + std::to_string(pid) + "_" + name);
  if (w.rank() == 0) dp_test_write_corpus(dir, vocab);
  w.barrier();
  return dir;
}

inline void shared_cleanup(const std::filesystem::path& dir) {
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}

inline TrainOptions tiny(const std::filesystem::path& data, const std::string& out, int accum) {
  TrainOptions o = train_options_reference();  // the unquantized fp32 run; each test opts in
  o.data_dir = data.string();
  o.out_dir = (data / out).string();
  o.model.dim = 32, o.model.n_layers = 2, o.model.n_heads = 4, o.model.n_kv_heads = 2, o.model.ffn_dim = 48;
  o.batch = 4, o.seq = 16, o.accum = accum, o.steps = 8, o.warmup = 2, o.lr = 1e-2f, o.min_lr = 1e-3f;
  o.eval_every = 0, o.eval_batches = 2, o.quiet = true;
  return o;
}

// The reference: one process (a communicator of one, on rank 0 only) running all D*m micro-batches per step.
inline TrainResult single_reference(TrainOptions o, int D) {
  Communicator& w = world();
  std::unique_ptr<Communicator> self = w.split(w.rank(), 0);  // collective: every rank gets a world of one
  TrainResult r;
  if (w.rank() == 0) {
    o.comm = self.get();
    o.accum *= D;
    o.pp = 1, o.tp = 1, o.sp = false, o.stage_layers.clear();
    o.out_dir += "_single";
    r = train_run(o);
  }
  w.barrier();
  return r;
}

// o.steps (8) straight vs 4 + resume + 4 into folders below data: bit-identical losses.
inline void expect_resume_bit_identical(TrainOptions o, const std::filesystem::path& data) {
  const TrainResult straight = train_run(o);
  o.out_dir = (data / "split").string();
  o.stop_after = 4;
  const TrainResult a = train_run(o);
  o.stop_after = 0;
  o.resume = (data / "split" / "ckpt").string();
  const TrainResult b = train_run(o);
  ASSERT_EQ(a.losses.size() + b.losses.size(), straight.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], straight.losses[i]) << "step " << i + 1;
  for (size_t i = 0; i < b.losses.size(); ++i) EXPECT_EQ(b.losses[i], straight.losses[4 + i]) << "step " << i + 5;
}

// A checkpoint written with moments `from` resumed with moments `to` (fp32 <-> 8-bit, converted on load): the first
// resumed loss is the straight run's (it comes from the checkpointed weights), the rest stay within 1e-3 of it
// (measured: ~2e-5, the 8-bit states' rounding; resuming with zero moments instead, i.e. no conversion, moves them
// by ~5e-3).
inline void expect_resume_converts(TrainOptions o, const std::filesystem::path& data, OptimState from, OptimState to) {
  o.adam.state = from;
  const TrainResult straight = train_run(o);
  o.out_dir = (data / "convert").string();
  o.stop_after = 4;
  train_run(o);
  o.stop_after = 0;
  o.adam.state = to;
  o.resume = (data / "convert" / "ckpt").string();
  const TrainResult b = train_run(o);
  ASSERT_EQ(b.losses.size() + 4, straight.losses.size());
  EXPECT_EQ(b.losses[0], straight.losses[4]);
  for (size_t i = 1; i < b.losses.size(); ++i)
    EXPECT_NEAR(b.losses[i], straight.losses[4 + i], 1e-3 * straight.losses[4 + i]) << "step " << i + 5;
  EXPECT_LT(b.losses.back(), straight.losses.front());
}

inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::abs(double(b[i])));
  return worst;
}

}  // namespace agoq

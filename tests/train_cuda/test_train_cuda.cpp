// Whole trainings on the GPU (`agoq train --device cuda`, train_run with device "cuda") against the CPU's: the loss
// curve, an exact resume, and checkpoints that move between the devices. They skip without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "arch/params.h"
#include "quant/grad_q8.h"
#include "tests/common/synthetic_corpus.h"
#include "tests/cuda/cuda_test_util.h"
#include "train/trainer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

fs::path make_data(const std::string& name) { return synthetic_corpus_make("train_cuda_" + name, 50, 8000); }

TrainOptions options(const fs::path& data, const std::string& out, const std::string& device, long steps) {
  TrainOptions o = train_options_reference();  // the unquantized fp32 run; each test opts in
  o.data_dir = data.string();
  o.out_dir = (data / out).string();
  o.device = enum_parse(kDeviceNames, device, "device");
  o.model.dim = 64, o.model.n_layers = 2, o.model.n_heads = 4, o.model.n_kv_heads = 2, o.model.ffn_dim = 96;
  o.batch = 4, o.seq = 32, o.accum = 2, o.steps = steps, o.warmup = 5, o.lr = 1e-2f, o.min_lr = 1e-3f;
  o.eval_every = 0, o.eval_batches = 2, o.quiet = true;
  o.act_policy = "agoq";
  if (o.device == TrainDevice::cuda) o.compute = ComputeMode::bf16;  // against the CPU's fp32 reference
  return o;
}

// The bar: 50 steps of AGoQ with bf16 GEMMs within 2% of the CPU's loss at every step.
TEST(TrainCuda, FiftyStepsFollowTheCpuLossCurve) {
  AGOQ_REQUIRE_GPU();
  const fs::path data = make_data("curve");
  const TrainResult cpu = train_run(options(data, "cpu", "cpu", 50));
  const TrainResult gpu = train_run(options(data, "gpu", "cuda", 50));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 0.02 * cpu.losses[i]) << "step " << i + 1;
  EXPECT_LT(gpu.losses.back(), 0.7 * gpu.losses.front());  // and it learns
  EXPECT_NEAR(gpu.final_val_loss, cpu.final_val_loss, 0.02 * cpu.final_val_loss);
  fs::remove_all(data);
}

// With the 8-bit gradient store on both devices (AGoQ's whole recipe on one GPU: agoq activations, q8 gradients).
TEST(TrainCuda, EightBitGradientsFollowTheCpuLossCurve) {
  AGOQ_REQUIRE_GPU();
  const fs::path data = make_data("q8");
  TrainOptions c = options(data, "cpu", "cpu", 30), g = options(data, "gpu", "cuda", 30);
  c.grad_store = g.grad_store = GradStoreKind::q8;
  const TrainResult cpu = train_run(c), gpu = train_run(g);
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 0.02 * cpu.losses[i]) << "step " << i + 1;
  // The store's bytes, not 4 per parameter: the codes, a scale per block of 256, one unit's fp32 scratch.
  LlamaConfig cfg = g.model;
  cfg.vocab_size = 50, cfg.max_seq_len = std::max(cfg.max_seq_len, g.seq);  // as the run resolves them
  size_t bytes = 0, largest = 0;
  for (const ParamSegment& u : model_grad_units(cfg, model_stage_whole(cfg))) {
    const size_t n = u.end - u.begin;
    bytes += n + grad_q8_blocks(n, 256) * sizeof(float), largest = std::max(largest, n);
  }
  EXPECT_EQ(gpu.peak.bytes[size_t(MemCategory::gradients)], bytes + largest * sizeof(float));
  fs::remove_all(data);
}

// N steps straight vs N/2, a checkpoint, and a resume: the same losses, bit for bit.
TEST(TrainCuda, ResumeIsBitIdentical) {
  AGOQ_REQUIRE_GPU();
  const fs::path data = make_data("resume");
  const TrainResult straight = train_run(options(data, "straight", "cuda", 10));
  TrainOptions first = options(data, "split", "cuda", 10);
  first.stop_after = 5;
  const TrainResult a = train_run(first);
  TrainOptions second = options(data, "split", "cuda", 10);
  second.resume = (data / "split" / "ckpt").string();
  const TrainResult b = train_run(second);
  ASSERT_EQ(a.losses.size(), 5u);
  ASSERT_EQ(b.losses.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.losses[i], straight.losses[i]) << "step " << i + 1;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.losses[i], straight.losses[5 + i]) << "step " << i + 6;
  EXPECT_EQ(b.final_val_loss, straight.final_val_loss);
  fs::remove_all(data);
}

// A CPU checkpoint resumes on the GPU and a GPU checkpoint on the CPU (HF safetensors, fp32 masters and moments):
// the continued curves stay within the 2% the devices differ by.
TEST(TrainCuda, CheckpointsMoveBetweenTheDevices) {
  AGOQ_REQUIRE_GPU();
  const fs::path data = make_data("move");
  const TrainResult cpu = train_run(options(data, "cpu", "cpu", 10));
  for (const auto& [from, to] : {std::pair{"cpu", "cuda"}, std::pair{"cuda", "cpu"}}) {
    const std::string out = std::string(from) + "_to_" + to;
    TrainOptions first = options(data, out, from, 10);
    first.stop_after = 5;
    train_run(first);
    TrainOptions second = options(data, out, to, 10);
    second.resume = (data / out / "ckpt").string();
    const TrainResult b = train_run(second);
    ASSERT_EQ(b.losses.size(), 5u);
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(b.losses[i], cpu.losses[5 + i], 0.02 * cpu.losses[5 + i]) << out << " step " << i + 6;
  }
  fs::remove_all(data);
}

// The run's report counts the device's bytes: weights, gradients and moments of the model, by category.
TEST(TrainCuda, PeaksAreTheDevicesBytes) {
  AGOQ_REQUIRE_GPU();
  const fs::path data = make_data("peaks");
  TrainOptions o = options(data, "gpu", "cuda", 2);
  o.compute = ComputeMode::fp32;  // no bf16 copies of the weights: weights are the fp32 masters alone
  const TrainResult r = train_run(o);
  LlamaConfig cfg = o.model;
  cfg.vocab_size = 50, cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  const size_t params = cfg.param_count() * sizeof(float);
  EXPECT_EQ(r.peak.bytes[size_t(MemCategory::weights)], params);
  EXPECT_EQ(r.peak.bytes[size_t(MemCategory::gradients)], params);
  EXPECT_EQ(r.peak.bytes[size_t(MemCategory::optimizer)], 2 * params);
  EXPECT_GT(r.peak.bytes[size_t(MemCategory::activations)], 0u);
  fs::remove_all(data);
}

}  // namespace
}  // namespace agoq

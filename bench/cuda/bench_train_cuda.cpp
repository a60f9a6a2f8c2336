// `agoq bench train --device cuda` and `agoq bench act --device cuda` (bench/cuda/bench_cuda.h).
#if AGOQ_HAVE_GPU_MODEL
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_util.h"
#include "bench/cuda/bench_cuda.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "cuda_train/step_cuda.h"
#include "train/forward_backward.h"

namespace agoq {

namespace {

struct PolicyRun {
  std::string policy;
  double step_s = 0, act_bytes_per_token_layer = 0;
  size_t peak_total = 0;
};

// Warm-up steps, then `steps` timed ones (each ends when the device has finished it) on random tokens. `name`: an
// activation policy, with "+q8" for the 8-bit gradient store (else fp32 gradients).
PolicyRun policy_run(const BenchTrainCudaOptions& o, const LlamaConfig& cfg, const std::string& name) {
  MemoryTracker& device = MemoryTracker::of(MemDevice::cuda);
  device.reset_peaks();
  const bool q8 = name.size() > 3 && name.compare(name.size() - 3, 3, "+q8") == 0;
  const std::string policy = q8 ? name.substr(0, name.size() - 3) : name;
  CudaBackend gpu(o.gemm == "fp32" ? GemmPrecision::fp32 : GemmPrecision::bf16);
  const ModelStage whole = model_stage_whole(cfg);
  auto grads = q8 ? std::make_unique<CudaGradStore>(gpu, cfg, whole, 256, QuantRounding::stochastic) : nullptr;
  LlamaModel model(cfg, o.B, o.T, ActPolicy::parse(policy, cfg.n_layers), whole, 1,
                   grads ? grads->model_storage() : std::vector<ParamSegment>{}, nullptr, gpu);
  model.init_weights(7);
  CudaStep step(model, gpu, std::move(grads), AdamWConfig{}, 1.0f, 7);
  std::vector<int32_t> in(size_t(o.B) * o.T), tgt(in.size());
  Rng rng(3);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  auto one = [&](long s) {
    const std::vector<MicroBatchRun> runs = step.step_begin(s, 1);
    step_finish(step, 1e-4f, train_forward_backward(step, model, in.data(), tgt.data(), o.B, o.T, runs));
  };
  for (int s = 0; s < o.warmup; ++s) one(s + 1);
  gpu.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) one(o.warmup + s + 1);
  gpu.synchronize();
  PolicyRun r{name};
  r.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  r.act_bytes_per_token_layer =
      double(model.store().stored_bytes(true) + model.store().stored_bytes(false)) / (double(o.B) * o.T * cfg.n_layers);
  r.peak_total = device.peak_total();
  return r;
}

}  // namespace

void bench_train_cuda_flags(CLI::App& c, BenchTrainCudaOptions& o) {
  c.add_option("--policies", o.policies,
               "activation policies, compared with the first; a name+q8 with the 8-bit gradient store")
      ->delimiter(',');
  c.add_option("--dim", o.dim, "--device cuda: hidden size")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--layers", o.layers, "--device cuda: decoder layers")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--heads", o.heads, "--device cuda: attention heads")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--kv-heads", o.kv_heads, "--device cuda: key/value heads")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c.add_option("--ffn", o.ffn, "--device cuda: SwiGLU width")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--vocab", o.vocab, "--device cuda: vocabulary")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--batch", o.B, "--device cuda: sequences per step")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--seq", o.T, "--device cuda: sequence length")->capture_default_str()->check(cli_at_least(1));
  c.add_option("--peak-tflops", o.peak_tflops, "--device cuda: the GPU's bf16 dense peak, for MFU")
      ->capture_default_str();
}

void bench_train_cuda(const BenchTrainCudaOptions& o) {
  LlamaConfig cfg;
  cfg.dim = o.dim, cfg.n_layers = o.layers, cfg.n_heads = o.heads, cfg.n_kv_heads = o.kv_heads, cfg.ffn_dim = o.ffn;
  cfg.vocab_size = o.vocab, cfg.max_seq_len = o.T;
  cfg.validate();
  AGOQ_CHECK(!o.policies.empty(), "--policies: give at least one");
  for (const std::string& p : o.policies)  // every name checked before the first run
    ActPolicy::parse(p.size() > 3 && p.compare(p.size() - 3, 3, "+q8") == 0 ? p.substr(0, p.size() - 3) : p,
                     cfg.n_layers);
  std::vector<PolicyRun> runs;
  for (const std::string& p : o.policies) runs.push_back(policy_run(o, cfg, p));
  const double flops = bench_flops_per_token(cfg, o.T), tokens = double(o.B) * o.T;
  const PolicyRun& base = runs.front();
  nlohmann::json out = nlohmann::json::array();
  if (!o.json)
    std::printf(
        "agoq bench train --device cuda: dim %d, %d layers, %d heads (kv %d), ffn %d, vocab %d, batch %d x "
        "seq %d, %s GEMMs, %d timed steps\n  %-14s %9s %10s %6s %12s %8s %8s %12s\n",
        cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size, o.B, o.T, o.gemm.c_str(),
        o.steps, "policy", "step ms", "tokens/s", "MFU", "act B/tok/L", "act vs", "step vs", "peak memory");
  for (const PolicyRun& r : runs) {
    const double mfu = flops * tokens / r.step_s / (o.peak_tflops * 1e12);
    const double act_ratio = r.act_bytes_per_token_layer / base.act_bytes_per_token_layer;
    const double step_ratio = r.step_s / base.step_s;
    if (o.json) {
      out.push_back({{"policy", r.policy},
                     {"step_ms", r.step_s * 1e3},
                     {"tokens_per_s", tokens / r.step_s},
                     {"mfu", mfu},
                     {"act_bytes_per_token_layer", r.act_bytes_per_token_layer},
                     {"act_vs_first", act_ratio},
                     {"step_vs_first", step_ratio},
                     {"peak_bytes", r.peak_total},
                     {"dim", cfg.dim},
                     {"layers", cfg.n_layers},
                     {"batch", o.B},
                     {"seq", o.T},
                     {"gemm", o.gemm}});
      continue;
    }
    std::printf("  %-14s %9.1f %10.0f %5.1f%% %12.0f %7.2fx %7.2fx %12s\n", r.policy.c_str(), r.step_s * 1e3,
                tokens / r.step_s, 100 * mfu, r.act_bytes_per_token_layer, act_ratio, step_ratio,
                format_bytes(r.peak_total).c_str());
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace agoq
#endif

// `agoq bench act`: what each activation policy costs and saves, measured in one run on one model config:
// saved-activation bytes, peak tracked bytes by category, and training step time relative to baseline-bf16.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#if AGOQ_HAVE_GPU_MODEL
#include "bench/cuda/bench_cuda.h"
#endif
#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/memory_json.h"
#include "core/rng.h"
#include "model/llama.h"
#include "optim/adamw.h"

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  LlamaConfig model;
  int batch = 16, seq = 512, steps = 2, warmup = 1;
  std::vector<std::string> policies = {"fp32", "baseline-bf16", "agoq", "uniform4"};
  bool json = false;
  Args() { model.dim = 512, model.n_layers = 8, model.n_heads = 8, model.n_kv_heads = 8, model.ffn_dim = 1376; }
};

struct PolicyResult {
  std::string policy;
  size_t act_bytes = 0, act_attention = 0, act_other = 0, peak_total = 0;
  MemSnapshot at_peak;
  double step_s = 0;
};

// Model, optimizer and a few full training steps under one policy, from a clean tracker peak.
struct PolicyRun {
  PolicyRun(const Args& a, const std::string& policy)
      : model(a.model, a.batch, a.seq, ActPolicy::parse(policy, a.model.n_layers)),
        adam(model.params(), AdamWConfig{}) {
    model.init_weights(7);
    Rng rng(3);
    const size_t n = size_t(a.batch) * a.seq;
    in.resize(n), tgt.resize(n);
    for (size_t i = 0; i < n; ++i)
      in[i] = int32_t(rng.below(a.model.vocab_size)), tgt[i] = int32_t(rng.below(a.model.vocab_size));
  }
  double step(const Args& a) {
    const auto t0 = Clock::now();
    ++s;
    model.grads().zero();
    model.forward_backward(in.data(), tgt.data(), a.batch, a.seq, {.act_seed = uint64_t(s)});
    adam.step(model.params().data(), model.grads().data(), 1e-4f, s);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  LlamaModel model;
  AdamW adam;
  std::vector<int32_t> in, tgt;
  long s = 0;
};

void bench_act_run(const Args& a) {
  a.model.validate();
  AGOQ_CHECK(a.steps >= 1 && a.warmup >= 1, "--steps and --warmup must be >= 1");
  std::vector<PolicyResult> results;
  std::vector<std::unique_ptr<PolicyRun>> runs;
  // Memory: each policy's model is built and stepped from a clean peak; the runs built before it stay alive for
  // the timing below, so their bytes (`before`) are subtracted.
  for (const std::string& p : a.policies) {
    auto& tracker = MemoryTracker::global();
    const MemSnapshot before = tracker.current();
    tracker.reset_peaks();
    runs.push_back(std::make_unique<PolicyRun>(a, p));
    for (int i = 0; i < a.warmup; ++i) runs.back()->step(a);
    PolicyResult r;
    r.policy = p;
    r.act_attention = runs.back()->model.store().stored_bytes(true);
    r.act_other = runs.back()->model.store().stored_bytes(false);
    r.act_bytes = r.act_attention + r.act_other;
    r.at_peak = tracker.at_peak_total();
    for (int c = 0; c < kMemCategoryCount; ++c) r.at_peak.bytes[c] -= before.bytes[c];
    r.peak_total = tracker.peak_total() - before.total();
    results.push_back(r);
  }
  // Time: the policies take turns, step by step, so each sees the same machine conditions (ratios in one run).
  for (int round = 0; round < a.steps; ++round)
    for (size_t i = 0; i < runs.size(); ++i) results[i].step_s += runs[i]->step(a) / a.steps;
  double base = 0;
  for (const PolicyResult& r : results)
    if (r.policy == "baseline-bf16") base = r.step_s;
  const size_t base_act = [&] {
    for (const PolicyResult& r : results)
      if (r.policy == "baseline-bf16") return r.act_bytes;
    return size_t(0);
  }();

  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const PolicyResult& r : results) {
      nlohmann::json j = {{"policy", r.policy},
                          {"activation_bytes", r.act_bytes},
                          {"activation_attention_bytes", r.act_attention},
                          {"activation_other_bytes", r.act_other},
                          {"peak_bytes", r.peak_total},
                          {"step_ms", r.step_s * 1e3}};
      j["step_time_ratio"] = base > 0 ? nlohmann::json(r.step_s / base) : nlohmann::json(nullptr);
      j["activation_ratio"] = base_act > 0 ? nlohmann::json(double(r.act_bytes) / base_act) : nlohmann::json(nullptr);
      j["peak_by_category"] = mem_bytes_json(r.at_peak.bytes);
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("agoq bench act: dim %d, %d layers, %d heads (kv %d), ffn %d, vocab %d, seq %d, batch %d\n", a.model.dim,
              a.model.n_layers, a.model.n_heads, a.model.n_kv_heads, a.model.ffn_dim, a.model.vocab_size, a.seq,
              a.batch);
  std::printf("%-15s %12s %9s %12s %12s %12s %12s %10s %9s\n", "policy", "activations", "vs bf16", "attention", "other",
              "workspace", "peak total", "step ms", "vs bf16");
  for (const PolicyResult& r : results) {
    std::printf("%-15s %12s %8.3fx %12s %12s %12s %12s %10.0f %8.3fx\n", r.policy.c_str(),
                format_bytes(r.act_bytes).c_str(), base_act ? double(r.act_bytes) / base_act : 0.0,
                format_bytes(r.act_attention).c_str(), format_bytes(r.act_other).c_str(),
                format_bytes(r.at_peak.bytes[int(MemCategory::workspace)]).c_str(), format_bytes(r.peak_total).c_str(),
                r.step_s * 1e3, base > 0 ? r.step_s / base : 0.0);
  }
}

const CliCommand kBenchAct("bench", 25, [](CLI::App& bench) {
  auto a = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand("act", "activation policies: saved bytes, peak memory by category, step time");
  c->add_option("--dim", a->model.dim, "model width (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--layers", a->model.n_layers, "decoder layers (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--heads", a->model.n_heads, "attention heads (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--kv-heads", a->model.n_kv_heads, "key/value heads (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--ffn", a->model.ffn_dim, "MLP hidden size (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--vocab", a->model.vocab_size, "model vocabulary size (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--seq", a->seq, "tokens per sequence (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--batch", a->batch, "sequences per step (CPU default; --device cuda: its own)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--steps", a->steps, "timed steps per policy")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--warmup", a->warmup, "untimed steps per policy (at least 1 on the CPU)")
      ->capture_default_str()
      ->check(cli_at_least(0));
  c->add_option("--policies", a->policies, "policies to compare (names or specs)")->delimiter(' ');
  c->add_flag("--json", a->json, "print a JSON array, one record per policy");
  auto device = std::make_shared<std::string>("cpu");
  auto gpu =
      std::make_shared<std::pair<ComputeMode, double>>(ComputeMode::automatic, 989.0);  // --compute, --peak-tflops
  c->add_option("--device", *device, "cpu, or cuda (the 1B-class model unless the shape flags say; docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cli_add_compute(c, gpu->first)->description("--device cuda: the GEMM inputs, bf16 (auto) or fp32");
  c->add_option("--peak-tflops", gpu->second, "--device cuda: the GPU's bf16 dense peak, for MFU")
      ->capture_default_str();
  c->callback([a, c, device, gpu] {
    a->model.max_seq_len = std::max(a->model.max_seq_len, a->seq);
    if (*device == "cpu") return bench_act_run(*a);
#if AGOQ_HAVE_GPU_MODEL
    BenchTrainCudaOptions g;  // the GPU's defaults, overridden by the flags given
    g.policies = {"baseline-bf16", "fp32", "agoq", "uniform4"};
    auto given = [&](const char* flag, auto& into, const auto& value) {
      if (c->count(flag)) into = value;
    };
    given("--dim", g.dim, a->model.dim), given("--layers", g.layers, a->model.n_layers);
    given("--heads", g.heads, a->model.n_heads), given("--kv-heads", g.kv_heads, a->model.n_kv_heads);
    given("--ffn", g.ffn, a->model.ffn_dim), given("--vocab", g.vocab, a->model.vocab_size);
    given("--seq", g.T, a->seq), given("--batch", g.B, a->batch), given("--steps", g.steps, a->steps);
    given("--warmup", g.warmup, a->warmup), given("--policies", g.policies, a->policies);
    g.gemm = enum_name(kGemmPrecisionNames, model_compute_choose(gpu->first, true).gemm), g.peak_tflops = gpu->second,
    g.json = a->json;
    bench_train_cuda(g);
#else
    (void)c, (void)gpu;
    fail("--device cuda: this agoq was built without the CUDA backend (no nvcc at configure time, or -DAGOQ_CUDA=OFF)");
#endif
  });
});

}  // namespace
}  // namespace agoq

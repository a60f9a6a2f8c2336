// `agoq bench ops`: speed of each op of the table (model/op_table.h) as the model calls it. One LLaMA model of the
// shape flags (dim 256, 8 heads of 32, ffn 688, vocab 4096, 2 layers, batch 8 x seq 256 by default; on the GPU two
// llama-8b layers at 2 x 4096 tokens; fp32 activations, so the store's quantize passes -- `bench act`'s -- stay out)
// runs forward and backward on the timed backend (model/backend_timed.h), which rates every call by the table's cost
// column: GFLOP/s for the GEMMs and the attention, GB/s (every array read or written once) for all. A row is one op
// at one shape (its integer arguments, the table's order); each is the best of --reps passes after one warm-up.
// First, what the GEMM rows compare with: this machine's practical fp32 peak, or the GPU's bf16 peak as given.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/backend_timed.h"
#include "model/llama.h"
#if AGOQ_HAVE_GPU_MODEL
#include "cuda_train/backend_cuda.h"
#endif

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string device = "cpu";
  ComputeMode compute = ComputeMode::automatic;
  bool json = false;
  int reps = 10;
  int B = 8, T = 256, dim = 256, heads = 8, kv_heads = 8, ffn = 688, vocab = 4096, layers = 2;
  double peak_tflops = 989;  // --device cuda: the bf16 dense peak of an H100/H200 SXM, for MFU
};

struct Passes {
  std::map<OpShape, OpCalls> best;  // per op and shape, the pass whose calls took least time
  double pass_s = 1e30;             // the fastest pass's wall time
  double store_s = 0;               // the activation store's time in that pass
};

// The model's forward and backward passes on `device` through the timed backend, reps + 1 of them (the first a
// warm-up).
Passes model_passes(const Args& a, ModelBackend& device) {
  LlamaConfig cfg;
  cfg.vocab_size = a.vocab, cfg.dim = a.dim, cfg.n_layers = a.layers, cfg.n_heads = a.heads;
  cfg.n_kv_heads = a.kv_heads, cfg.ffn_dim = a.ffn, cfg.max_seq_len = a.T;
  cfg.validate();
  TimedBackend timed(device);
  LlamaModel model(timed, cfg, a.B, a.T, ActPolicy::parse("fp32", cfg.n_layers));
  timed.head_weights_are(model.params().lm_head, size_t(cfg.vocab_size) * cfg.dim);
  model.init_weights(1);
  std::vector<int32_t> in(size_t(a.B) * a.T), tgt(in.size());
  Rng rng(2);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  Passes p;
  for (int r = 0; r <= a.reps; ++r) {
    const auto t0 = Clock::now();
    model.forward_backward(in.data(), tgt.data(), a.B, a.T);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::map<OpShape, OpCalls> calls = timed.take_calls();
    const OpSeconds classes = timed.take();
    if (r == 0) continue;
    for (const auto& [key, c] : calls)
      if (!p.best.count(key) || c.seconds < p.best[key].seconds) p.best[key] = c;
    if (s < p.pass_s) p.pass_s = s, p.store_s = classes[OpClass::act_store];
  }
  return p;
}

// What the GEMM and attention rows are compared with: a rate and where it comes from; on the CPU both peaks
// measured in the run (as bench train's), the bf16 one 0 where the CPU has no native bf16 products.
struct Peak {
  double gflops;
  std::string what;
  double sgemm_gflops = 0, bf16_matmul_gflops = 0;
};

void bench_ops_run(const Args& a, ModelBackend& device, const Peak& peak) {
  const Passes p = model_passes(a, device);
  std::vector<bool> called(kModelOpCount, false);
  double op_s = 0;
  for (const auto& [key, c] : p.best) called[int(key.first)] = true, op_s += c.seconds;
  std::string not_called;
  for (int op = 0; op < kModelOpCount; ++op)
    if (!called[op]) not_called += std::string(not_called.empty() ? "" : ", ") + model_op_name(ModelOp(op));

  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [key, c] : p.best) {
      nlohmann::json e = {{"op", model_op_name(key.first)},
                          {"shape", key.second},
                          {"calls", c.calls},
                          {"ms", c.seconds * 1e3},
                          {"gbytes_per_s", c.bytes / c.seconds / 1e9}};
      if (c.flops > 0) e["gflops"] = c.flops / c.seconds / 1e9, e["of_peak"] = c.flops / c.seconds / 1e9 / peak.gflops;
      rows.push_back(e);
    }
    nlohmann::json j = {{"device", a.device},
                        {"peak_gflops", peak.gflops},
                        {"peak", peak.what},
                        {"pass_ms", p.pass_s * 1e3},
                        {"ops_ms", op_s * 1e3},
                        {"act_store_ms", p.store_s * 1e3},
                        {"threads", omp_get_max_threads()},
                        {"ops", rows}};
    if (peak.sgemm_gflops > 0) j["sgemm_gflops"] = peak.sgemm_gflops, j["bf16_matmul_gflops"] = peak.bf16_matmul_gflops;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "agoq bench ops on %s: the model's forward + backward, dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, "
      "batch %d x seq %d; %d threads, best of %d\n",
      a.device.c_str(), a.dim, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.B, a.T, omp_get_max_threads(), a.reps);
  std::printf("  peak: %.1f GFLOP/s (%s)\n", peak.gflops, peak.what.c_str());
  if (peak.sgemm_gflops > 0)
    std::printf("  measured: sgemm 1536^3 %.1f GFLOP/s, oneDNN bf16 matmul 1536^3 %s\n", peak.sgemm_gflops,
                peak.bf16_matmul_gflops > 0 ? (std::to_string(int(peak.bf16_matmul_gflops)) + " GFLOP/s").c_str()
                                            : "none (no native bf16 products)");
  std::printf("\n");
  std::printf("  %-30s %-22s %6s %9s %9s %6s %8s %6s\n", "op", "shape", "calls", "ms", "GFLOP/s", "peak", "GB/s",
              "share");
  for (const auto& [key, c] : p.best) {
    std::printf("  %-30s %-22s %6ld %9.3f", model_op_name(key.first), key.second.c_str(), c.calls, c.seconds * 1e3);
    const double gflops = c.flops / c.seconds / 1e9;
    c.flops > 0 ? std::printf(" %9.1f %5.1f%%", gflops, 100 * gflops / peak.gflops) : std::printf(" %9s %6s", "", "");
    std::printf(" %8.1f %5.1f%%\n", c.bytes / c.seconds / 1e9, 100.0 * c.seconds / p.pass_s);
  }
  std::printf(
      "\n  pass %.2f ms: ops %.2f ms, activation store %.2f ms, the rest (the model's own loops, tensor "
      "copies) %.2f ms\n",
      p.pass_s * 1e3, op_s * 1e3, p.store_s * 1e3, (p.pass_s - op_s - p.store_s) * 1e3);
  if (!not_called.empty()) std::printf("  not called by this model: %s\n", not_called.c_str());
}

// --device cuda: two llama-8b layers at 2 x 4096 tokens, where the shape flags do not say otherwise.
void bench_ops_cuda(Args a, const CLI::App& c) {
#if AGOQ_HAVE_GPU_MODEL
  const auto unless_given = [&c](const char* flag, int& into, int value) {
    if (!c.count(flag)) into = value;
  };
  unless_given("--batch", a.B, 2), unless_given("--seq", a.T, 4096), unless_given("--dim", a.dim, 4096);
  unless_given("--heads", a.heads, 32), unless_given("--kv-heads", a.kv_heads, 8);
  unless_given("--ffn", a.ffn, 14336), unless_given("--vocab", a.vocab, 32000), unless_given("--reps", a.reps, 5);
  CudaBackend gpu(model_compute_choose(a.compute, true).gemm);
  bench_ops_run(a, gpu, {a.peak_tflops * 1e3, "the GPU's bf16 dense peak, --peak-tflops"});
#else
  (void)a, (void)c;
  fail(
      "--device cuda: this agoq was built without the GPU model (no nvcc or no OpenBLAS at configure time, or "
      "-DAGOQ_CUDA=OFF; docs/cuda.md)");
#endif
}

const CliCommand kBenchOps("bench", 30, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand("ops", "GFLOP/s and GB/s of each op as the model calls it");
  c->add_flag("--json", args->json, "print one JSON object");
  c->add_option("--reps", args->reps, "timed passes (the best is reported)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--batch", args->B, "batch size")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--seq", args->T, "sequence length")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--dim", args->dim, "model dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--heads", args->heads, "attention heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--kv-heads", args->kv_heads, "key/value heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--ffn", args->ffn, "feed-forward dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--vocab", args->vocab, "vocabulary size")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--layers", args->layers, "decoder layers")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--device", args->device, "cpu, or cuda (two llama-8b layers unless the shape flags say; docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cli_add_compute(c, args->compute);
  c->add_option("--peak-tflops", args->peak_tflops, "--device cuda: the GPU's bf16 dense peak, for MFU")
      ->capture_default_str();
  c->callback([args, c] {
    if (args->device == "cuda") return bench_ops_cuda(*args, *c);
    const double sgemm = bench_gemm_peak_gflops(GemmPrecision::fp32, args->reps);
    const double bf16_peak = gemm_bf16_supported() ? bench_gemm_peak_gflops(GemmPrecision::bf16, args->reps) : 0;
    if (model_compute_choose(args->compute, false).gemm == GemmPrecision::fp32)
      return bench_ops_run(*args, model_backend_cpu(),
                           {sgemm, "sgemm 1536^3, this machine's fp32 peak", sgemm, bf16_peak});
    const std::unique_ptr<ModelBackend> bf16 = model_backend_cpu_bf16();
    bench_ops_run(*args, *bf16, {bf16_peak, "oneDNN bf16 matmul 1536^3, this CPU's peak", sgemm, bf16_peak});
  });
});

}  // namespace
}  // namespace agoq

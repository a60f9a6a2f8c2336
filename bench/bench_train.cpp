// `agoq bench train`: training throughput and model FLOPs utilisation on the reference config, and the peak
// memory breakdown of a larger config. Both measured in one run.
#include <cblas.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_util.h"
#if AGOQ_HAVE_GPU_MODEL
#include "bench/cuda/bench_cuda.h"
#endif
#include "cli/commands.h"
#include "core/cpu_share.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/memory_json.h"
#include "core/rng.h"
#include "model/gemm_bf16.h"
#include "model/llama.h"
#include "optim/adamw.h"

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct StepStats {
  double seconds_per_step;
  MemSnapshot at_peak;
  size_t peak_total;
};

// Builds the model and optimizer, runs warm-up steps, then times `steps` full training steps on random tokens.
// With `threads`, the OpenMP team follows the machine's load between steps, as `agoq train` does.
StepStats bench_steps(const LlamaConfig& cfg, int B, int T, int warmup, int steps, const std::string& policy,
                      CpuThreads* threads = nullptr, GemmPrecision gemm = GemmPrecision::fp32) {
  MemoryTracker::global().reset_peaks();
  const std::unique_ptr<ModelBackend> bf16 = gemm == GemmPrecision::bf16 ? model_backend_cpu_bf16() : nullptr;
  LlamaModel model(bf16 ? *bf16 : model_backend_cpu(), cfg, B, T, ActPolicy::parse(policy, cfg.n_layers));
  model.init_weights(7);
  AdamW adam(model.params(), AdamWConfig{});
  std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
  Rng rng(3);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  auto one_step = [&](long s) {
    if (threads) threads->adapt();
    model.grads().zero();
    model.forward_backward(in.data(), tgt.data(), B, T);
    adam.step(model.params().data(), model.grads().data(), 1e-4f, s);
    model.backend().weights_changed();
  };
  for (int s = 0; s < warmup; ++s) one_step(s + 1);
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) one_step(warmup + s + 1);
  const double dt = seconds_since(t0) / steps;
  return {dt, MemoryTracker::global().at_peak_total(), MemoryTracker::global().peak_total()};
}

struct Args {
  bool json = false;
  int steps = 10;
  bool skip_memory = false;
  bool busy_neighbour = false;
  std::string device = "cpu";
  ComputeMode compute = ComputeMode::automatic;
#if AGOQ_HAVE_GPU_MODEL
  BenchTrainCudaOptions gpu;  // --device cuda
#endif
};

// A CPU-bound process beside the benchmark (a spinning child), for as long as this object lives.
struct BusyLoop {
  pid_t pid = fork();
  BusyLoop() {
    if (pid == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    AGOQ_CHECK(pid > 0, "bench train: cannot start the busy loop: ", std::strerror(errno));
  }
  ~BusyLoop() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

// Tokens/s on the reference config on a quiet machine, then beside one busy loop: with the team following the
// load (agoq's default), and with one thread per core as OpenMP would start it.
void bench_train_busy(const Args& a, const LlamaConfig& ref, int B, int T) {
  const int cores = omp_get_max_threads();
  CpuThreads threads(0.5);
  AGOQ_CHECK(threads.active(), "bench train --busy-neighbour: unset OMP_NUM_THREADS (the team size is then agoq's)");
  const double quiet = B * T / bench_steps(ref, B, T, 2, a.steps, "fp32", &threads).seconds_per_step;
  double adaptive = 0, fixed = 0;
  {
    BusyLoop busy;
    adaptive = B * T / bench_steps(ref, B, T, 2, a.steps, "fp32", &threads).seconds_per_step;
    omp_set_num_threads(cores);
    fixed = B * T / bench_steps(ref, B, T, 0, 2, "fp32").seconds_per_step;
  }
  if (a.json) {
    nlohmann::json j = {{"cores", cores},
                        {"quiet_tokens_per_s", quiet},
                        {"busy_adaptive_tokens_per_s", adaptive},
                        {"busy_fixed_tokens_per_s", fixed},
                        {"adaptive_vs_quiet", adaptive / quiet},
                        {"fixed_vs_quiet", fixed / quiet}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("agoq bench train --busy-neighbour: reference config, %d cores, one busy loop beside the run\n", cores);
  std::printf("  %-44s %10s %8s\n", "", "tokens/s", "vs quiet");
  std::printf("  %-44s %10.0f %8.2f\n", "quiet machine", quiet, 1.0);
  std::printf("  %-44s %10.0f %8.2f\n", "busy loop, threads follow the load (default)", adaptive, adaptive / quiet);
  std::printf("  %-44s %10.0f %8.2f\n", "busy loop, one thread per core", fixed, fixed / quiet);
}

void bench_train_run(const Args& a) {
  LlamaConfig ref;  // dim 256, 6 layers, 8 heads (kv 8), ffn 688, vocab 4096
  ref.max_seq_len = 256;
  const int B = 8, T = 256;
  if (a.busy_neighbour) return bench_train_busy(a, ref, B, T);
  const ComputeChoice compute = model_compute_choose(a.compute, false);
  const bool bf16 = compute.gemm == GemmPrecision::bf16;
  const double sgemm = bench_gemm_peak_gflops(GemmPrecision::fp32, 5);
  const double bf16_peak = gemm_bf16_supported() ? bench_gemm_peak_gflops(GemmPrecision::bf16, 5) : 0;
  const double peak = bf16 ? bf16_peak : sgemm;  // MFU against the peak of the precision in use
  const StepStats s = bench_steps(ref, B, T, 2, a.steps, "fp32", nullptr, compute.gemm);
  const double tokens_per_s = B * T / s.seconds_per_step;
  const double flops_per_token = bench_flops_per_token(ref, T);
  const double achieved = flops_per_token * tokens_per_s / 1e9;
  const double mfu = achieved / peak;

  LlamaConfig big;
  big.dim = 512, big.n_layers = 8, big.n_heads = 8, big.n_kv_heads = 8, big.ffn_dim = 1376, big.max_seq_len = 512;
  StepStats m{};
  if (!a.skip_memory) m = bench_steps(big, 16, 512, 0, 1, "fp32", nullptr, compute.gemm);

  if (a.json) {
    nlohmann::json j = {{"tokens_per_s", tokens_per_s},
                        {"mfu", mfu},
                        {"compute", enum_name(kGemmPrecisionNames, compute.gemm)},
                        {"sgemm_gflops", sgemm},
                        {"bf16_matmul_gflops", bf16_peak},
                        {"model_gflops", achieved},
                        {"step_ms", s.seconds_per_step * 1e3}};
    if (!a.skip_memory) {
      j["memory"] = mem_bytes_json(m.at_peak.bytes);
      j["memory"]["total"] = m.peak_total;
      j["memory_config"] = {{"dim", 512}, {"layers", 8}, {"ffn", 1376}, {"seq", 512}, {"batch", 16}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "agoq bench train: dim %d, %d layers, %d heads (kv %d), ffn %d, vocab %d, seq %d, batch %d, fp32 "
      "activations, compute %s\n",
      ref.dim, ref.n_layers, ref.n_heads, ref.n_kv_heads, ref.ffn_dim, ref.vocab_size, T, B, compute.why.c_str());
  std::printf("  %-26s %12.1f\n", "sgemm peak (GFLOP/s)", sgemm);
  if (bf16_peak > 0) std::printf("  %-26s %12.1f\n", "bf16 matmul peak (GFLOP/s)", bf16_peak);
  std::printf("  %-26s %12.1f\n", "step time (ms)", s.seconds_per_step * 1e3);
  std::printf("  %-26s %12.0f\n", "tokens/s", tokens_per_s);
  std::printf("  %-26s %12.1f\n", "model GFLOP/s", achieved);
  std::printf("  %-26s %11.1f%%\n", bf16 ? "MFU (vs bf16 matmul peak)" : "MFU (vs sgemm peak)", 100 * mfu);
  if (!a.skip_memory) {
    std::printf("\npeak memory, dim 512, 8 layers, ffn 1376, seq 512, batch 16, fp32 activations:\n");
    for (int c = 0; c < kMemCategoryCount; ++c)
      std::printf("  %-26s %12s\n", mem_category_name(MemCategory(c)), format_bytes(m.at_peak.bytes[c]).c_str());
    std::printf("  %-26s %12s\n", "total", format_bytes(m.peak_total).c_str());
  }
}

const CliCommand kBenchTrain("bench", 20, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand("train", "training tokens/s, MFU and peak memory by category");
  c->add_flag("--json", args->json, "print one JSON object");
  c->add_option("--steps", args->steps, "timed steps")->capture_default_str()->check(cli_at_least(1));
  c->add_flag("--skip-memory", args->skip_memory, "skip the (slow) large-config memory measurement");
  c->add_flag("--busy-neighbour", args->busy_neighbour,
              "tokens/s quiet and beside a busy-loop process: threads following the load vs one per core");
  c->add_option("--device", args->device, "cpu, or cuda (the 1B-class model unless the shape flags say; docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cli_add_compute(c, args->compute);
#if AGOQ_HAVE_GPU_MODEL
  bench_train_cuda_flags(*c, args->gpu);
#endif
  c->callback([args, c] {
    if (args->device == "cpu") {
      for (const char* gpu_only : {"--policies", "--dim", "--layers", "--heads", "--kv-heads", "--ffn", "--vocab",
                                   "--batch", "--seq", "--peak-tflops"})
        AGOQ_CHECK(!c->get_option_no_throw(gpu_only) || c->count(gpu_only) == 0, gpu_only,
                   " applies to --device cuda (the CPU benchmark runs its reference model)");
      return bench_train_run(*args);
    }
#if AGOQ_HAVE_GPU_MODEL
    if (c->count("--steps")) args->gpu.steps = args->steps;
    args->gpu.gemm = enum_name(kGemmPrecisionNames, model_compute_choose(args->compute, true).gemm);
    args->gpu.json = args->json;
    bench_train_cuda(args->gpu);
#else
    (void)c;
    fail("--device cuda: this agoq was built without the CUDA backend (no nvcc at configure time, or -DAGOQ_CUDA=OFF)");
#endif
  });
});

}  // namespace
}  // namespace agoq

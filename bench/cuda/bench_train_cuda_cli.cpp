// `agoq bench train|act --device cuda` in the GPU-only build (AGOQ_GPU_ONLY with an OpenBLAS, docs/cuda.md), whose
// binary has no CPU training benchmarks: the GPU's only. The full build registers bench_train.cpp and bench_act.cpp.
#if AGOQ_GPU_ONLY && AGOQ_HAVE_GPU_MODEL
#include <memory>

#include "bench/cuda/bench_cuda.h"
#include "cli/commands.h"

namespace agoq {
namespace {

void bench_train_cuda_command(CLI::App& bench, const char* name, const char* what,
                              const std::vector<std::string>& policies) {
  auto g = std::make_shared<BenchTrainCudaOptions>();
  g->policies = policies;
  auto device = std::make_shared<std::string>("cuda");
  CLI::App* c = bench.add_subcommand(name, what);
  c->add_option("--device", *device, "cuda (this build has no CPU training)")->check(CLI::IsMember({"cuda"}));
  c->add_option("--steps", g->steps, "timed steps per policy")->capture_default_str()->check(cli_at_least(1));
  c->add_flag("--json", g->json, "print one JSON array");
  bench_train_cuda_flags(*c, *g);
  c->callback([g] { bench_train_cuda(*g); });
}

const CliCommand kBenchTrainCuda("bench", 20, [](CLI::App& bench) {
  bench_train_cuda_command(bench, "train", "training steps on the GPU: tokens/s, MFU, activation bytes, peak memory",
                           {"baseline-bf16", "agoq", "agoq+q8"});
});
const CliCommand kBenchActCuda("bench", 25, [](CLI::App& bench) {
  bench_train_cuda_command(bench, "act", "activation policies on the GPU: saved bytes, step time, peak memory",
                           {"baseline-bf16", "fp32", "agoq", "uniform4"});
});

}  // namespace
}  // namespace agoq
#endif

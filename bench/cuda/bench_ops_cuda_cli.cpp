// `agoq bench ops --device cuda` in the GPU-only build (AGOQ_GPU_ONLY, docs/cuda.md), whose binary has no CPU model
// ops: the same subcommand and flags as bench/bench_ops.cpp's, the GPU's only. The full build registers bench_ops.cpp.
#if AGOQ_GPU_ONLY
#include <memory>

#include "bench/cuda/bench_cuda.h"
#include "cli/commands.h"

namespace agoq {
namespace {

const CliCommand kBenchOpsCuda("bench", 30, [](CLI::App& bench) {
  auto g = std::make_shared<BenchOpsCudaOptions>();
  auto device = std::make_shared<std::string>("cuda");
  CLI::App* c = bench.add_subcommand("ops", "TFLOP/s (GEMMs, attention) and GB/s (the rest) of each op on the GPU");
  c->add_option("--device", *device, "cuda (this build has no CPU ops)")->check(CLI::IsMember({"cuda"}));
  c->add_flag("--json", g->json, "print one JSON array");
  c->add_option("--reps", g->reps, "timed runs per op (the median is reported)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--batch", g->B, "batch size")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--seq", g->T, "sequence length")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--dim", g->dim, "model dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--heads", g->heads, "attention heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--kv-heads", g->kv_heads, "key/value heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--ffn", g->ffn, "feed-forward dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--peak-tflops", g->peak_tflops, "the GPU's bf16 dense peak, for MFU")->capture_default_str();
  c->callback([g] { bench_ops_cuda(*g); });
});

}  // namespace
}  // namespace agoq
#endif

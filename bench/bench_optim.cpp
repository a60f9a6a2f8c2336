// `agoq bench optim`: one AdamW step with fp32 moments vs 8-bit moments (--optim-state q8) over the same
// parameters and gradients, taking turns rep by rep so both see the same machine; the ratio is within one run.
// Also the q8 step on the portable scalar path, to show what the AVX2 kernel buys.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cli/commands.h"
#include "core/rng.h"
#include "optim/adamw.h"
#include "quant/simd.h"

namespace agoq {
namespace {

struct Options {
  int dim = 1024, layers = 2, vocab = 8192, reps = 9, threads = 0;
  bool json = false, scalar = true;
};

struct Row {
  std::string name;
  double seconds = 0, state_bytes = 0, bytes_moved = 0;
};

double time_step(AdamW& adam, ParamSet& p, const ParamSet& g, long step) {
  const auto t0 = std::chrono::steady_clock::now();
  adam.step(p.data(), g.data(), 1e-4f, step);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  LlamaConfig cfg;
  cfg.dim = o.dim, cfg.n_layers = o.layers, cfg.n_heads = 8, cfg.n_kv_heads = 8, cfg.ffn_dim = o.dim * 11 / 4;
  cfg.vocab_size = o.vocab, cfg.max_seq_len = 64;
  cfg.validate();
  ParamSet p32(cfg, MemCategory::weights, "bench.optim"), p8(cfg, MemCategory::weights, "bench.optim"),
      grads(cfg, MemCategory::gradients, "bench.optim");
  Rng rng(1);
  for (size_t i = 0; i < grads.size(); ++i)
    p32.data()[i] = p8.data()[i] = rng.normal() * 0.02f, grads.data()[i] = rng.normal() * 1e-3f;
  AdamWConfig c32, c8;
  c8.state = OptimState::q8;
  AdamW fp32(p32, c32), q8(p8, c8);
  const double n = double(p32.size());
  std::vector<double> t32, t8, t8s;
  for (int r = 0; r <= o.reps; ++r) {  // rep 0 warms up (page faults of the first touch)
    const long step = r + 1;
    const double a = time_step(fp32, p32, grads, step), b = time_step(q8, p8, grads, step);
    double c = 0;
    if (o.scalar && r < 3) {  // a few reps suffice for the slow path
      quant_set_simd(false);
      c = time_step(q8, p8, grads, step);
      quant_set_simd(true);
    }
    if (r == 0) continue;
    t32.push_back(a), t8.push_back(b);
    if (c > 0) t8s.push_back(c);
  }
  // Bytes each step reads and writes: fp32 reads p g m v and writes p m v (28 B/value); q8 reads p g and the codes
  // and writes p and the codes (12 B/value plus the scales).
  const double q8_state = double(q8.q8_state().bytes());
  std::vector<Row> rows = {{"fp32", bench_median(t32), 8 * n, 28 * n},
                           {"q8", bench_median(t8), q8_state, 12 * n + 2 * q8_state}};
  if (!t8s.empty()) rows.push_back({"q8 (scalar path)", bench_median(t8s), q8_state, 12 * n + 2 * q8_state});
  const double base = rows[0].seconds;
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows)
      j.push_back({{"state", r.name},
                   {"params", n},
                   {"threads", omp_get_max_threads()},
                   {"seconds", r.seconds},
                   {"ratio_vs_fp32", r.seconds / base},
                   {"state_bytes", r.state_bytes},
                   {"gb_per_s", r.bytes_moved / r.seconds / 1e9}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("AdamW step over %.1fM parameters (dim %d, %d layers, vocab %d), %d threads, median of %d reps\n",
              n / 1e6, o.dim, o.layers, o.vocab, omp_get_max_threads(), o.reps);
  std::printf("%-18s %12s %12s %14s %10s\n", "moments", "step ms", "vs fp32", "state MiB", "GB/s");
  for (const Row& r : rows)
    std::printf("%-18s %12.2f %11.3fx %14.1f %10.1f\n", r.name.c_str(), r.seconds * 1e3, r.seconds / base,
                r.state_bytes / double(1 << 20), r.bytes_moved / r.seconds / 1e9);
}

const CliCommand kBenchOptim("bench", 60, [](CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* c = bench.add_subcommand("optim", "AdamW step time: fp32 moments vs 8-bit moments (--optim-state q8)");
  c->add_option("--dim", o->dim, "model width of the parameter layout")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--layers", o->layers, "decoder layers of the layout")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--vocab", o->vocab, "vocabulary of the layout")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--reps", o->reps, "timed steps per kind")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--threads", o->threads, "OpenMP threads (0: default)")->check(cli_at_least(0));
  c->add_flag("--json", o->json, "print JSON");
  c->callback([o] { run(*o); });
});

}  // namespace
}  // namespace agoq

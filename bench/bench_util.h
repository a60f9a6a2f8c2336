// Small helpers shared by the benchmarks.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "arch/config.h"
#include "core/memory.h"

namespace agoq {

// The median of repeated timings (the upper one of an even count); 0 for none.
inline double bench_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Model FLOPs per token of a training step (forward and backward) on sequences of T: 6 x the GEMMs' parameters (all
// but an untied input embedding) + causal attention, whose two T x T products cost 2·T·C per token forward (half
// of the full square) and 3x that with backward.
inline double bench_flops_per_token(const LlamaConfig& c, int T) {
  const double gemm_params = double(c.param_count()) - (c.tie_embeddings ? 0.0 : double(c.vocab_size) * c.dim);
  return 6.0 * gemm_params + 6.0 * c.n_layers * double(T) * c.dim;
}

// The flags and model of the grid benchmarks (bench pipe, bench tp): 8 heads (kv 4), a SwiGLU width of about 8/3 dim.
struct BenchGridArgs {
  int dim = 256, layers = 8, vocab = 4096, batch = 4, seq = 128, micro = 8;
  int steps = 3, rounds = 2;
  bool json = false;
};
inline void bench_grid_args_add(CLI::App& c, BenchGridArgs& a) {
  c.add_option("--dim", a.dim, "hidden size")->capture_default_str();
  c.add_option("--layers", a.layers, "decoder layers")->capture_default_str();
  c.add_option("--seq", a.seq, "sequence length")->capture_default_str();
  c.add_option("--batch", a.batch, "sequences per micro-batch")->capture_default_str();
  c.add_option("--micro", a.micro, "micro-batches per step (global)")->capture_default_str();
  c.add_option("--steps", a.steps, "timed steps per configuration and round")->capture_default_str();
  c.add_option("--rounds", a.rounds, "rounds over the configurations")->capture_default_str();
  c.add_flag("--json", a.json, "print JSON");
}
inline LlamaConfig bench_grid_model(const BenchGridArgs& a) {
  LlamaConfig c;
  c.dim = a.dim, c.n_layers = a.layers, c.n_heads = 8, c.n_kv_heads = 4, c.vocab_size = a.vocab;
  c.ffn_dim = (a.dim * 8 / 3 + 63) / 64 * 64, c.max_seq_len = a.seq;
  return c;
}

// The table of every rank's peak memory by category (each category's own peak), one block of rows per
// configuration: names[i] and peaks[i] (per world rank).
inline void bench_print_rank_memory(const std::vector<std::string>& names,
                                    const std::vector<std::vector<MemSnapshot>>& peaks) {
  std::printf("\npeak memory per rank (each category's own peak over the steps)\n%-34s %4s", "configuration", "rank");
  for (int k = 0; k < kMemCategoryCount; ++k) std::printf(" %13s", mem_category_name(MemCategory(k)));
  std::printf(" %13s\n", "sum");
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t r = 0; r < peaks[i].size(); ++r) {
      std::printf("%-34s %4zu", r == 0 ? names[i].c_str() : "", r);
      for (int k = 0; k < kMemCategoryCount; ++k) std::printf(" %13s", format_bytes(peaks[i][r].bytes[k]).c_str());
      std::printf(" %13s\n", format_bytes(peaks[i][r].total()).c_str());
    }
}

}  // namespace agoq

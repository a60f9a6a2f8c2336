// Small helpers shared by the benchmarks.
#pragma once
#include <CLI/CLI.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "arch/config.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/gemm_bf16.h"

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

// This machine's practical GEMM peaks in GFLOP/s, best of `reps` timed runs (after one warm-up) of 1536^3: OpenBLAS's
// sgemm (fp32), and oneDNN's matmul on bf16 inputs with fp32 accumulation (`--compute bf16`). MFU is taken against the
// peak of the precision in use.
inline double bench_gemm_peak_gflops(GemmPrecision precision, int reps) {
  const int n = 1536;
  const size_t elems = size_t(n) * n;
  Buffer<float> x(elems, MemCategory::workspace), y(elems, MemCategory::workspace), z(elems, MemCategory::workspace);
  Buffer<uint16_t> x16(elems, MemCategory::workspace), y16(elems, MemCategory::workspace);
  Rng rng(1);
  for (size_t i = 0; i < elems; ++i) x[i] = rng.uniform() - 0.5f, y[i] = rng.uniform() - 0.5f;
  f32_to_bf16_rows(x16.data(), x.data(), elems), f32_to_bf16_rows(y16.data(), y.data(), elems);
  GemmBf16 bf16;
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (precision == GemmPrecision::bf16)
      bf16.multiply(n, n, n, {x16.data(), false, n}, {y16.data(), false, n}, z.data(), n, false);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f, z.data(),
                  n);
    if (r > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best / 1e9;
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

// Small helpers shared by the benchmarks.
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/config.h"

namespace agoq {

// The median of repeated timings (the upper one of an even count); 0 for none.
inline double bench_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The model of the grid benchmarks (bench pipe, bench tp): 8 heads (kv 4), a SwiGLU width of about 8/3 dim.
inline LlamaConfig bench_grid_model(int dim, int layers, int vocab, int seq) {
  LlamaConfig c;
  c.dim = dim, c.n_layers = layers, c.n_heads = 8, c.n_kv_heads = 4, c.vocab_size = vocab;
  c.ffn_dim = (dim * 8 / 3 + 63) / 64 * 64, c.max_seq_len = seq;
  return c;
}

// The table of every rank's peak memory by category (each category's own peak), one block of rows per
// configuration: names[i] and peaks[i] (per world rank).
inline void bench_print_rank_memory(const std::vector<std::string>& names, const std::vector<std::vector<MemSnapshot>>& peaks) {
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

// Shared by test_parallel's main and tests: a small synthetic corpus (a noisy periodic sequence, learnable but not
// trivial) in agoq's token-file format.
#pragma once
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/token_file.h"

namespace agoq {

inline void dp_test_write_corpus(const std::filesystem::path& dir, int vocab = 50, int n = 6000) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Rng rng(5);
  std::vector<int32_t> tok(n);
  for (int i = 0; i < n; ++i) tok[i] = rng.below(10) == 0 ? int32_t(rng.below(vocab)) : int32_t((i * 7) % vocab);
  token_file_write((dir / "train.bin").string(), std::span(tok).subspan(0, n * 9 / 10), vocab);
  token_file_write((dir / "val.bin").string(), std::span(tok).subspan(n * 9 / 10), vocab);
}

}  // namespace agoq

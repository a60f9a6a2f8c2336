// A small synthetic corpus for whole trainings: a noisy periodic sequence, learnable but not trivial, as train.bin
// (90%) and val.bin (10%) in a fresh folder (synthetic_corpus_make: a temporary one of this test process).
#pragma once
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/token_file.h"
#include "tests/common/temp_path.h"

namespace agoq {

inline void synthetic_corpus_write(const std::filesystem::path& dir, int vocab = 50, int n = 6000) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Rng rng(5);
  std::vector<int32_t> tok(n);
  for (int i = 0; i < n; ++i) tok[i] = rng.below(10) == 0 ? int32_t(rng.below(vocab)) : int32_t((i * 7) % vocab);
  token_file_write((dir / "train.bin").string(), std::span(tok).subspan(0, n * 9 / 10), vocab);
  token_file_write((dir / "val.bin").string(), std::span(tok).subspan(n * 9 / 10), vocab);
}

inline std::filesystem::path synthetic_corpus_make(const std::string& name, int vocab = 50, int n = 6000) {
  const std::filesystem::path dir = test_temp_path(name);
  synthetic_corpus_write(dir, vocab, n);
  return dir;
}

}  // namespace agoq

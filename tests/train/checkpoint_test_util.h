// What the checkpoint tests share (tests/train/test_checkpoint*.cpp): a temporary folder, file helpers, a tiny
// config, and a fake model whose parameters and moments live in plain vectors.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"

namespace agoq::ckpt_test {

namespace fs = std::filesystem;

struct TmpDir {
  fs::path path;
  TmpDir() {
    static int counter = 0;
    path =
        fs::temp_directory_path() / ("agoq_test_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TmpDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

inline std::string file_read(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
inline void file_write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

inline LlamaConfig tiny_config(bool tie) {
  LlamaConfig c;
  c.vocab_size = 11, c.dim = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.ffn_dim = 12;
  c.max_seq_len = 16, c.rope_theta = 500000.0f, c.norm_eps = 1e-6f, c.tie_embeddings = tie;
  return c;
}

// Parameters and Adam-like state in plain vectors, as a model owner would expose them.
struct FakeModel {
  LlamaConfig config;
  std::vector<std::vector<float>> params, moments;
  NamedTensors weights, optimizer;
  FakeModel(const LlamaConfig& c, uint64_t seed) : config(c) {
    Rng rng(seed);
    const auto names = hf_tensors(c);
    params.resize(names.size());
    moments.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const size_t n = size_t(safetensors_numel(names[i].shape));
      for (size_t k = 0; k < n; ++k) params[i].push_back(rng.normal()), moments[i].push_back(rng.uniform());
    }
    // Pointers only after every vector has its final size.
    for (size_t i = 0; i < names.size(); ++i) {
      weights.push_back({names[i].name, names[i].shape, params[i].data()});
      optimizer.push_back({"adam.m." + names[i].name, names[i].shape, moments[i].data()});
    }
  }
  void zero() {
    for (auto& p : params) std::fill(p.begin(), p.end(), 0.0f);
    for (auto& m : moments) std::fill(m.begin(), m.end(), 0.0f);
  }
};

inline void save(const std::string& dir, FakeModel& m, int64_t step) {
  checkpoint_save(dir, m.config, m.weights, m.optimizer, {{"lr", 0.001}, {"data_pos", step * 7}}, step);
}

}  // namespace agoq::ckpt_test

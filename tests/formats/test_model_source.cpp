// The model reader's promises that need no Python: an HF folder of bf16 shards widens exactly, an import holds at
// most one tensor besides the model it fills (peak resident memory, measured), and the path's kind is found.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "arch/hf.h"
#include "core/rng.h"
#include "formats/checkpoint.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "quant/half.h"
#include "tests/common/expect_error.h"
#include "tests/common/temp_path.h"
#include "tests/formats/formats_test_util.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

// An HF folder holding `c` in bf16, in two shards with an index; returns the bf16 values of every tensor.
std::map<std::string, std::vector<uint16_t>> hf_folder_write(const fs::path& dir, const LlamaConfig& c) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_to_hf_json(c).dump(2);
  std::map<std::string, std::vector<uint16_t>> values;
  SafetensorsWriter shard[2];
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  Rng rng(3);
  int i = 0;
  for (const HfTensor& t : hf_tensors(c)) {
    std::vector<uint16_t>& v = values[t.name];
    v.resize(size_t(safetensors_numel(t.shape)));
    for (uint16_t& x : v) x = f32_to_bf16(float(rng.normal()) * 0.5f);
    const int s = i++ % 2;
    shard[s].add(t.name, "BF16", t.shape, v.data(), v.size() * 2);
    index["weight_map"][t.name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s)
    shard[s].write((dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors")).string());
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  return values;
}

TEST(ModelSource, HfBf16ShardsWidenExactlyWithinOneTensorOfMemory) {
  LlamaConfig c;
  c.vocab_size = 32000, c.dim = 512, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 4, c.ffn_dim = 1408;
  c.max_seq_len = 128;
  const fs::path dir = test_temp_path("hf_bf16");
  fs::remove_all(dir);
  size_t largest = 0;
  {
    const auto values = hf_folder_write(dir, c);
    for (const auto& [name, v] : values) largest = std::max(largest, v.size() * sizeof(float));
  }
  const std::unique_ptr<ModelReader> src = model_reader_open(dir.string());
  EXPECT_EQ(src->kind(), ModelSourceKind::hf_dir);
  EXPECT_EQ(config_diff(src->config(), c), "");
  const MeasuredImport m = import_measured(*src);
  EXPECT_LE(m.peak_above, largest + (size_t(64) << 20)) << "an import may hold one tensor besides the model";

  Rng rng(3);  // the writer's values again: every float must be the bf16 widened
  size_t wrong = 0;
  for (const NamedTensor& w : m.weights)
    for (size_t k = 0; k < size_t(safetensors_numel(w.shape)); ++k)
      wrong += w.data[k] != bf16_to_f32(f32_to_bf16(float(rng.normal()) * 0.5f));
  EXPECT_EQ(wrong, 0u);
  fs::remove_all(dir);
}

TEST(ModelSource, PathsThatAreNoModelAreRefusedByName) {
  const fs::path dir = test_temp_path("not_a_model");
  fs::remove_all(dir);
  fs::create_directories(dir);
  expect_error([&] { model_reader_open(dir.string()); }, {"neither trainer.json", "nor config.json"});
  std::ofstream(dir / "x.bin") << "not a model";
  expect_error([&] { model_reader_open((dir / "x.bin").string()); }, {"x.bin", "not a GGUF file"});
  expect_error([&] { model_reader_open((dir / "missing").string()); }, {"missing", "no such file"});
  std::ofstream(dir / "config.json") << "{\"model_type\": \"llama\"}";
  expect_error([&] { model_reader_open(dir.string()); }, {"config.json", "missing"});
  fs::remove_all(dir);

  // An agoq checkpoint whose save did not complete is not read as the HF folder it resembles.
  LlamaConfig c;
  c.vocab_size = 8, c.dim = 4, c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.ffn_dim = 4, c.max_seq_len = 4;
  std::vector<float> zeros(64, 0.5f);
  NamedTensors weights;
  for (const HfTensor& t : hf_tensors(c)) weights.push_back({t.name, t.shape, zeros.data()});
  checkpoint_save(dir.string(), c, weights, {}, nlohmann::json::object(), 3);
  EXPECT_EQ(model_reader_open(dir.string())->kind(), ModelSourceKind::agoq_checkpoint);
  fs::remove(dir / "trainer.json");
  expect_error([&] { model_reader_open(dir.string()); }, {"save did not complete", "trainer.json is missing"});
  fs::remove_all(dir);
}

// Tied embeddings beside a stored lm_head.weight: a copy of the embedding loads, another head is refused
// (transformers 4 and 5 disagree on which one the model uses).
TEST(ModelSource, TiedEmbeddingsWithAnotherStoredHeadAreRefused) {
  LlamaConfig c;
  c.vocab_size = 16, c.dim = 8, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.ffn_dim = 8, c.max_seq_len = 8;
  c.tie_embeddings = true;
  const fs::path dir = test_temp_path("hf_tied_head");
  for (const bool same : {true, false}) {
    fs::remove_all(dir), fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config_to_hf_json(c).dump(2);
    std::vector<std::vector<float>> values;
    SafetensorsWriter w;
    Rng rng(5);
    for (const HfTensor& t : hf_tensors(c)) {
      values.emplace_back(size_t(safetensors_numel(t.shape)));
      for (float& x : values.back()) x = float(rng.normal());
      w.add_f32(t.name, t.shape, values.back().data());
    }
    std::vector<float> head = values.front();  // hf_tensors' first: the embedding
    if (!same) head[5] += 1;
    w.add_f32("lm_head.weight", {c.vocab_size, c.dim}, head.data());
    w.write((dir / "model.safetensors").string());
    if (same) EXPECT_EQ(model_reader_open(dir.string())->config().tie_embeddings, true);
    else expect_error([&] { model_reader_open(dir.string()); }, {"ties the embeddings", "lm_head.weight is not"});
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace agoq

// One model reader, three sources (docs/checkpoint-format.md, "Importing"): given a path, what it is and the same
// thing back from each: the model's LlamaConfig, its weights as fp32 tensors under HF names in HF layout (arch/hf.h:
// hf_tensors), and its tokenizer.
//   * an agoq checkpoint (a folder with trainer.json; formats/checkpoint.h);
//   * a Hugging Face model folder (config.json + model.safetensors or shards with model.safetensors.index.json;
//     formats/hf_model.cpp);
//   * a GGUF file (llama.cpp's format; formats/gguf_model.cpp).
// Weights stream tensor by tensor into caller memory: an import holds at most one tensor besides the model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "arch/config.h"
#include "arch/hf.h"
#include "data/tokenizer.h"

namespace agoq {

enum class ModelSourceKind : uint8_t { agoq_checkpoint, hf_dir, gguf };
const char* model_source_kind_name(ModelSourceKind k);  // "agoq checkpoint", "Hugging Face folder", "GGUF file"

class ModelReader {
 public:
  virtual ~ModelReader() = default;
  virtual ModelSourceKind kind() const = 0;
  const std::string& path() const { return path_; }
  const LlamaConfig& config() const { return config_; }
  // How the weights are stored, for `agoq inspect`: tensor count by dtype or quantization type ("BF16 x 22").
  virtual std::vector<std::pair<std::string, size_t>> storage_types() const = 0;
  // Reads tensor `t` (one of hf_tensors(config())) as float32 in HF layout into dst (numel(t.shape) floats):
  // widened or dequantized exactly; a damaged or mis-shaped tensor is one error naming the file and the tensor.
  virtual void read_f32(const HfTensor& t, float* dst) const = 0;
  // The model's tokenizer; throws, naming the source, when it has none.
  virtual Tokenizer tokenizer() const = 0;
  // Its config.json as read (a fine-tune's checkpoints carry the fields agoq does not use); null for a GGUF file.
  const nlohmann::json& hf_config() const { return hf_config_; }

 protected:
  std::string path_;
  LlamaConfig config_;
  nlohmann::json hf_config_;
};

// Finds what `path` is and opens it (headers only); an unknown kind, or a model agoq does not compute exactly, is
// one error naming the path and the field.
std::unique_ptr<ModelReader> model_reader_open(const std::string& path);
// The per-format openers behind it.
std::unique_ptr<ModelReader> checkpoint_model_open(const std::string& dir);
std::unique_ptr<ModelReader> hf_model_open(const std::string& dir);
std::unique_ptr<ModelReader> gguf_model_open(const std::string& path);

// A tokenizer from wherever a model keeps one: a tokenizer.model or tokenizer.json, a folder holding either (a
// Hugging Face model, an agoq checkpoint or prepared data), or a GGUF file's metadata.
Tokenizer tokenizer_open(const std::string& path);

// Reads every tensor of `weights` (a subset of hf_tensors(config), by name; NamedTensor.shape must match) from src.
void model_reader_load(const ModelReader& src, const NamedTensors& weights);

}  // namespace agoq

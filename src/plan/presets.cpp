#include "plan/presets.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "arch/hf.h"
#include "core/error.h"

namespace agoq {

namespace {
struct Preset {
  const char* name;
  LlamaConfig cfg;
};

LlamaConfig shape(int vocab, int dim, int layers, int heads, int kv, int ffn, int max_seq, float theta, float eps) {
  LlamaConfig c;
  c.vocab_size = vocab, c.dim = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv, c.ffn_dim = ffn;
  c.max_seq_len = max_seq, c.rope_theta = theta, c.norm_eps = eps;
  return c;
}

// Public configs (docs/plan.md): Meta-Llama-3-8B, Llama-2-13b-hf, Qwen2.5-32B (its q/k/v biases are ignored: a
// LLaMA of that shape; they are 0.01% of the parameters).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"llama-8b", shape(128256, 4096, 32, 32, 8, 14336, 8192, 500000.0f, 1e-5f)},
      {"llama-13b", shape(32000, 5120, 40, 40, 40, 13824, 4096, 10000.0f, 1e-5f)},
      {"llama-32b", shape(152064, 5120, 64, 40, 8, 27648, 32768, 1000000.0f, 1e-6f)},
  };
  return p;
}
}  // namespace

std::vector<std::string> plan_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

LlamaConfig plan_preset(const std::string& name) {
  std::string known;
  for (const Preset& p : presets()) {
    if (name == p.name) return p.cfg;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  fail("unknown model '", name, "' (presets: ", known, "; or a path to a Hugging Face config.json)");
}

LlamaConfig plan_model_resolve(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (!looks_like_path || !fs::exists(name_or_path)) {
    AGOQ_CHECK(!looks_like_path, "model config '", name_or_path, "' does not exist");
    return plan_preset(name_or_path);
  }
  const nlohmann::json j = json_object_read_file(name_or_path, "model config");
  try {
    return config_from_hf_json(j);
  } catch (const Error& e) {
    fail("model config '", name_or_path, "': ", e.what());
  }
}

}  // namespace agoq

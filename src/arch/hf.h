// Hugging Face's view of a LLaMA model, in one place: config.json <-> LlamaConfig, and the tensor names and
// shapes of LlamaForCausalLM in its order (which is also ParamSet's flat layout, arch/params.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "arch/config.h"
#include "arch/stage.h"

namespace agoq {

// A named float32 tensor in caller memory (read on save, filled on load). Optimizer state may also be integer
// codes (8-bit Adam moments): then dtype names their type ("I8", "U8"), raw points at them and data is null.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data;
  std::string dtype = "F32";
  void* raw = nullptr;
};
using NamedTensors = std::vector<NamedTensor>;

// HF config.json for a config. bos/eos ids are written only when given.
nlohmann::json config_to_hf_json(const LlamaConfig& c, std::optional<int> bos_token_id = {},
                                 std::optional<int> eos_token_id = {});
// Parses an HF LlamaConfig (missing required keys are all named in one error; features agoq lacks, e.g.
// rope_scaling or attention_bias, are refused) and validates it.
LlamaConfig config_from_hf_json(const nlohmann::json& j);
// A JSON object read from a file (a model config): missing, unreadable, empty, not JSON (with the byte where it
// stops) or not an object is one line naming `what` and the path.
nlohmann::json json_object_read_file(const std::string& path, const std::string& what);
// The first field in which two configs differ, as "hf_key a vs b"; "" when equal.
std::string config_diff(const LlamaConfig& a, const LlamaConfig& b);

// Which tensor of the model an HF name is (ParamSet and LayerParams, arch/params.h, hold one pointer each).
enum class ModelTensor : uint8_t {
  embed,
  attn_norm,
  wq,
  wk,
  wv,
  wo,
  mlp_norm,
  w_gate,
  w_up,
  w_down,
  final_norm,
  lm_head
};

// Which dimension of an (out, in) weight the tensor-parallel shards split (arch/stage.h): 0, rows (column-parallel
// q/k/v and gate/up; the vocabulary of the embedding and lm_head), 1, columns (row-parallel o and down), or -1:
// replicated (the norms).
int model_tensor_split_dim(ModelTensor role);
// Where shard r of T, a (rows, cols) tensor (1-D: cols = 1) split along split_dim, lies in the whole tensor of
// (whole_rows, whole_cols): its element (i, j) is the whole's (row0 + i, col0 + j).
struct TensorSlice {
  size_t rows, cols, whole_rows, whole_cols, row0, col0;
};
TensorSlice model_tensor_slice(const std::vector<int64_t>& shard_shape, int split_dim, int T, int r);

struct HfTensor {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // row-major, [out, in] for projections; a tensor-parallel shard's own shape
  ModelTensor role;
  int layer = -1;  // decoder layer, -1 for the embedding, final norm and lm_head
};
// A stage's tensors in HF order (the whole model's by default); lm_head.weight only when untied. A shard's tensors
// keep their HF names with the shard's shapes.
std::vector<HfTensor> hf_tensors(const LlamaConfig& c, const ModelStage& stage);
std::vector<HfTensor> hf_tensors(const LlamaConfig& c);

}  // namespace agoq

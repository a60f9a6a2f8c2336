#include "arch/hf.h"

#include <cfloat>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "arch/config_fields.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"

namespace agoq {

using json = nlohmann::json;

namespace {

// The shortest decimal that reads back as the same float, so config.json says 1e-05 rather than 9.99999974e-06.
double float_clean(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

template <class T>
json hf_value(T v) {
  if constexpr (std::is_same_v<T, float>) return float_clean(v);
  else return v;
}

json rope_scaling_to_hf_json(const RopeScaling& r) {
  switch (r.type) {
    case RopeScaling::Type::linear: return {{"rope_type", "linear"}, {"factor", float_clean(r.factor)}};
    case RopeScaling::Type::llama3:
      return {{"rope_type", "llama3"},
              {"factor", float_clean(r.factor)},
              {"low_freq_factor", float_clean(r.low_freq_factor)},
              {"high_freq_factor", float_clean(r.high_freq_factor)},
              {"original_max_position_embeddings", r.original_max_positions}};
    default: return nullptr;
  }
}

// A JSON number as the float32 agoq computes with. One a float cannot hold is refused by name rather than changed:
// beyond 3.4e38 it would be infinite, and so small that it is 0 or denormal (rms_norm_eps 1e-300 read as 0).
float float_of(const json& v, const std::string& key) {
  const double d = v.get<double>();
  const float f = float(d);
  AGOQ_CHECK(std::isfinite(f) && (d == 0 || std::fabs(f) >= FLT_MIN), "LlamaConfig key ", key, " = ", json_excerpt(v),
             " is beyond the range of a float32 (", FLT_MIN, " to ", FLT_MAX, " in magnitude)");
  return f;
}

// RoPE's settings as transformers reads them: the 4.x key rope_scaling (null, or {"rope_type" (or "type"): ...}) or,
// where it is absent, null or empty, the 5.x key rope_parameters ({"rope_type", "rope_theta", ...}, which its
// save_pretrained writes instead of both). A rope_theta inside the dict wins over the top-level one; a missing type is
// "default"; llama3's original context is the top-level original_max_position_embeddings, else the dict's, else
// max_position_embeddings (transformers 5's order). Refused: the types that change more than the frequencies
// (dynamic, yarn, longrope: attention factors, per-length tables) and a partial rotary factor.
struct HfRope {
  RopeScaling scaling;
  std::optional<float> theta;
};

HfRope rope_from_hf_json(const json& config) {
  HfRope out;
  auto given = [](const json& from, const char* k) { return from.contains(k) && !from[k].is_null(); };
  auto number = [&](const json& from, const std::string& k, const std::string& what) {
    AGOQ_CHECK(from[k].is_number(), "LlamaConfig ", what, " must be a number (got ", json_excerpt(from[k]), ")");
    return from[k];
  };
  const char* key = given(config, "rope_scaling") && !config["rope_scaling"].empty()         ? "rope_scaling"
                    : given(config, "rope_parameters") && !config["rope_parameters"].empty() ? "rope_parameters"
                                                                                             : nullptr;
  const json none = json::object();
  const json& j = key ? config[key] : none;
  AGOQ_CHECK(j.is_object(), "LlamaConfig key ", key, " must be null or an object (got ", json_excerpt(j), ")");
  // (the dict's, else the top-level one: transformers 5's order)
  if (const json& from = given(j, "partial_rotary_factor") ? j : config; given(from, "partial_rotary_factor")) {
    const std::string what = (&from == &j ? std::string(key) + "." : "") + "partial_rotary_factor";
    AGOQ_CHECK(number(from, "partial_rotary_factor", what) == 1.0, "LlamaConfig ", what, " = ",
               json_excerpt(from["partial_rotary_factor"]),
               " is not supported (agoq rotates every dimension of a head)");
  }
  if (!key) return out;
  if (j.contains("rope_theta")) {
    const std::string what = std::string(key) + ".rope_theta";
    out.theta = float_of(number(j, "rope_theta", what), what);
  }
  const char* type_key = j.contains("rope_type") ? "rope_type" : "type";
  AGOQ_CHECK(!j.contains(type_key) || j[type_key].is_string(), "LlamaConfig ", key, ".", type_key,
             " must be a string (got ", json_excerpt(j[type_key]), ")");
  const std::string type = j.value(type_key, std::string("default"));
  auto factor = [&](const char* k) {
    AGOQ_CHECK(j.contains(k), "LlamaConfig ", key, ".", k, " must be a number for rope_type ", type, " (got nothing)");
    return float_of(number(j, k, std::string(key) + "." + k), std::string(key) + "." + k);
  };
  RopeScaling& r = out.scaling;
  if (type == "default") return out;
  if (type == "linear") {
    r.type = RopeScaling::Type::linear, r.factor = factor("factor");
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::llama3, r.factor = factor("factor");
    r.low_freq_factor = factor("low_freq_factor"), r.high_freq_factor = factor("high_freq_factor");
    const char* ctx_key = "original_max_position_embeddings";
    const json& from = config.contains(ctx_key) ? config : j.contains(ctx_key) ? j : config;
    const char* k = from.contains(ctx_key) ? ctx_key : "max_position_embeddings";
    AGOQ_CHECK(from.contains(k), "LlamaConfig ", key, ".", ctx_key, " must be a number for rope_type llama3");
    const std::string what = (&from == &j ? std::string(key) + "." : "") + k;
    const double ctx = number(from, k, what).get<double>();
    AGOQ_CHECK(ctx >= 1 && ctx <= LlamaConfig::kMaxPositions && ctx == double(int(ctx)), "LlamaConfig ", what,
               " must be a positive integer (got ", ctx, ")");
    r.original_max_positions = int(ctx);
  } else {
    fail("LlamaConfig ", key, ".rope_type = \"", type,
         "\" is not supported (agoq computes \"default\", \"linear\" and \"llama3\")");
  }
  return out;
}

}  // namespace

json config_to_hf_json(const LlamaConfig& c, std::optional<int> bos_token_id, std::optional<int> eos_token_id) {
  c.validate();
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"head_dim", c.head_dim()},
            {"rope_scaling", rope_scaling_to_hf_json(c.rope_scaling)},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"mlp_bias", false},
            {"pretraining_tp", 1},
            {"initializer_range", 0.02},
            {"use_cache", true},
            {"torch_dtype", "float32"}};
  for (const ConfigField& f : kConfigFields) std::visit([&](auto m) { j[f.hf_key] = hf_value(c.*m); }, f.member);
  if (c.sliding_window) j["sliding_window"] = c.sliding_window;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  return j;
}

LlamaConfig config_from_hf_json(const json& j) {
  AGOQ_CHECK(j.is_object(), "LlamaConfig JSON is not an object");
  std::string missing;
  for (const ConfigField& f : kConfigFields)
    if (f.hf_required && !j.contains(f.hf_key)) missing += (missing.empty() ? "" : ", ") + std::string(f.hf_key);
  AGOQ_CHECK(missing.empty(), "LlamaConfig JSON is missing ", missing);

  auto get_int = [&](const char* k, int dflt) {
    if (!j.contains(k) || j[k].is_null()) return dflt;
    const json& v = j[k];
    AGOQ_CHECK(v.is_number_integer(), "LlamaConfig key ", k, " must be an integer (got ", json_excerpt(v), ")");
    // (an unsigned beyond int64 read as int64 wraps: 2^64 - 1 would be -1)
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT_MAX)
                                             : v.get<int64_t>() >= INT_MIN && v.get<int64_t>() <= INT_MAX;
    AGOQ_CHECK(fits, "LlamaConfig key ", k, " = ", json_excerpt(v), " is out of range (at most ", INT_MAX, ")");
    return int(v.get<int64_t>());
  };
  // A field's value, or (absent) its default; a required integer that is null reads as 0, which validate() refuses.
  auto read = [&](const ConfigField& f, auto& into) {
    using T = std::decay_t<decltype(into)>;
    const char* k = f.hf_key;
    if constexpr (std::is_same_v<T, int>) {
      into = get_int(k, f.hf_required ? 0 : into);
    } else if constexpr (std::is_same_v<T, float>) {
      if (!j.contains(k)) return;
      AGOQ_CHECK(j[k].is_number(), "LlamaConfig key ", k, " must be a number (got ", json_excerpt(j[k]), ")");
      into = float_of(j[k], k);
    } else {
      if (!j.contains(k)) return;
      AGOQ_CHECK(j[k].is_boolean(), "LlamaConfig key ", k, " must be a boolean");
      into = j[k].get<bool>();
    }
  };
  // Options agoq does not implement are refused rather than silently trained differently.
  auto require = [&](const char* k, const json& want) {
    AGOQ_CHECK(!j.contains(k) || j[k] == want, "LlamaConfig key ", k, " = ", j.contains(k) ? json_excerpt(j[k]) : "",
               " is not supported (agoq needs ", want.dump(), ")");
  };
  // Mistral is LLaMA's architecture with a sliding attention window: exact while the window holds the sequence.
  const bool mistral = j.contains("model_type") && j["model_type"] == "mistral";  // (value() throws on a non-string)
  if (!mistral) require("model_type", "llama");
  if (j.contains("architectures")) {
    const json want = {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"};
    AGOQ_CHECK(j["architectures"] == want, "LlamaConfig key architectures = ", json_excerpt(j["architectures"]),
               " is not supported with model_type ", mistral ? "mistral" : "llama", " (agoq computes ", want.dump(),
               " for it)");
  }
  require("hidden_act", "silu");
  require("attention_bias", false);
  require("mlp_bias", false);

  LlamaConfig c;  // HF LlamaConfig's defaults: rope_theta 10000, untied embeddings, no grouping of the kv heads
  c.rope_theta = 10000.0f, c.tie_embeddings = false;
  for (const ConfigField& f : kConfigFields) std::visit([&](auto m) { read(f, c.*m); }, f.member);
  if (!j.contains("num_key_value_heads") || j["num_key_value_heads"].is_null()) c.n_kv_heads = c.n_heads;
  const HfRope rope = rope_from_hf_json(j);
  c.rope_scaling = rope.scaling;
  if (rope.theta) c.rope_theta = *rope.theta;
  // (LlamaForCausalLM ignores the key; MistralConfig's default window is 4096, null means none)
  if (mistral) c.sliding_window = j.contains("sliding_window") ? get_int("sliding_window", 0) : 4096;
  c.validate();
  const int head_dim = get_int("head_dim", c.head_dim());
  AGOQ_CHECK(head_dim == c.head_dim(), "LlamaConfig head_dim ", head_dim,
             " is not supported (agoq needs hidden_size / num_attention_heads = ", c.head_dim(), ")");
  return c;
}

std::string config_diff(const LlamaConfig& a, const LlamaConfig& b) {
  std::ostringstream os;
  auto cmp = [&](const char* key, auto x, auto y) {
    if (os.tellp() == 0 && x != y) os << key << " " << x << " vs " << y;
  };
  for (const ConfigField& f : kConfigFields) std::visit([&](auto m) { cmp(f.hf_key, a.*m, b.*m); }, f.member);
  cmp("rope_scaling", rope_scaling_to_hf_json(a.rope_scaling).dump(), rope_scaling_to_hf_json(b.rope_scaling).dump());
  cmp("sliding_window", a.sliding_window, b.sliding_window);
  return os.str();
}

int model_tensor_split_dim(ModelTensor role) {
  switch (role) {
    case ModelTensor::attn_norm:
    case ModelTensor::mlp_norm:
    case ModelTensor::final_norm: return -1;
    case ModelTensor::wo:
    case ModelTensor::w_down: return 1;
    default: return 0;
  }
}

TensorSlice model_tensor_slice(const std::vector<int64_t>& shard_shape, int split_dim, int T, int r) {
  TensorSlice s{size_t(shard_shape[0]), shard_shape.size() > 1 ? size_t(shard_shape[1]) : 1, 0, 0, 0, 0};
  s.whole_rows = split_dim == 0 ? s.rows * T : s.rows, s.whole_cols = split_dim == 1 ? s.cols * T : s.cols;
  s.row0 = split_dim == 0 ? s.rows * r : 0, s.col0 = split_dim == 1 ? s.cols * r : 0;
  return s;
}

std::vector<HfTensor> hf_tensors(const LlamaConfig& c, const ModelStage& stage) {
  const ShardDims s = model_shard_dims(c, stage);
  const int64_t d = s.C, q = s.Q, kv = s.KV, f = s.F, v = s.V;
  std::vector<HfTensor> out;
  if (stage.embed) out.push_back({"model.embed_tokens.weight", {v, d}, ModelTensor::embed});
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](const char* name, std::vector<int64_t> shape, ModelTensor role) {
      out.push_back({p + name, std::move(shape), role, l});
    };
    add("input_layernorm.weight", {d}, ModelTensor::attn_norm);
    add("self_attn.q_proj.weight", {q, d}, ModelTensor::wq);
    add("self_attn.k_proj.weight", {kv, d}, ModelTensor::wk);
    add("self_attn.v_proj.weight", {kv, d}, ModelTensor::wv);
    add("self_attn.o_proj.weight", {d, q}, ModelTensor::wo);
    add("post_attention_layernorm.weight", {d}, ModelTensor::mlp_norm);
    add("mlp.gate_proj.weight", {f, d}, ModelTensor::w_gate);
    add("mlp.up_proj.weight", {f, d}, ModelTensor::w_up);
    add("mlp.down_proj.weight", {d, f}, ModelTensor::w_down);
  }
  if (stage.head) {
    out.push_back({"model.norm.weight", {d}, ModelTensor::final_norm});
    if (!c.tie_embeddings) out.push_back({"lm_head.weight", {v, d}, ModelTensor::lm_head});
  }
  return out;
}

std::vector<HfTensor> hf_tensors(const LlamaConfig& c) { return hf_tensors(c, model_stage_whole(c)); }

nlohmann::json json_object_read_file(const std::string& path, const std::string& what) {
  const std::string text = input_file_read(path, what);
  AGOQ_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, what, " ", path, " is empty");
  const json j = json_parse(text, what + " " + path);
  AGOQ_CHECK(j.is_object(), what, " ", path, " is not a JSON object");
  return j;
}

}  // namespace agoq

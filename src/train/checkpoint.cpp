#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "train/safetensors.h"

namespace agoq {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "agoq-checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kTrainerFile = "trainer.json";

// The shortest decimal that reads back as the same float, so config.json says 1e-05 rather than 9.99999974e-06.
double float_clean(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

std::string path_join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  AGOQ_CHECK(fd >= 0, "checkpoint: cannot open ", path, " to sync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  // Directories on some file systems refuse fsync; file data must reach the disk.
  AGOQ_CHECK(rc == 0 || (flags & O_DIRECTORY), "checkpoint: fsync ", path, " failed: ", std::strerror(errno));
}

void text_write_tmp(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AGOQ_CHECK(out, "checkpoint: cannot create ", tmp);
    out << text;
    out.flush();
    AGOQ_CHECK(out, "checkpoint: write to ", tmp, " failed");
  }
  fsync_path(tmp, O_RDONLY);
}

void tmp_commit(const std::string& path) {
  AGOQ_CHECK(::rename((path + ".tmp").c_str(), path.c_str()) == 0, "checkpoint: rename ", path,
             ".tmp into place failed: ", std::strerror(errno));
}

json json_read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  AGOQ_CHECK(in, what, ": ", fs::path(path).filename().string(), " missing (not a checkpoint, or a save was interrupted)");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  AGOQ_CHECK(!j.is_discarded() && j.is_object(), what, ": ", path, " is not a valid JSON object");
  return j;
}

std::string commit_id_new(int64_t step) {
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) ^ rd() ^
                     uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ uint64_t(::getpid());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return "step" + std::to_string(step) + "-" + hex;
}

// The first field in which two configs differ, as "hf_key a vs b"; "" when equal.
std::string config_diff(const LlamaConfig& a, const LlamaConfig& b) {
  std::ostringstream os;
  auto cmp = [&](const char* key, auto x, auto y) {
    if (os.tellp() == 0 && x != y) os << key << " " << x << " vs " << y;
  };
  cmp("vocab_size", a.vocab_size, b.vocab_size);
  cmp("hidden_size", a.dim, b.dim);
  cmp("num_hidden_layers", a.n_layers, b.n_layers);
  cmp("num_attention_heads", a.n_heads, b.n_heads);
  cmp("num_key_value_heads", a.n_kv_heads, b.n_kv_heads);
  cmp("intermediate_size", a.ffn_dim, b.ffn_dim);
  cmp("max_position_embeddings", a.max_seq_len, b.max_seq_len);
  cmp("rope_theta", a.rope_theta, b.rope_theta);
  cmp("rms_norm_eps", a.norm_eps, b.norm_eps);
  cmp("tie_word_embeddings", a.tie_embeddings, b.tie_embeddings);
  return os.str();
}

// name -> tensor, refusing duplicates and null data.
std::map<std::string, const NamedTensor*> tensors_by_name(const NamedTensors& ts, const std::string& what) {
  std::map<std::string, const NamedTensor*> out;
  for (const NamedTensor& t : ts) {
    AGOQ_CHECK(out.emplace(t.name, &t).second, what, ": tensor '", t.name, "' given twice");
    AGOQ_CHECK(t.data || safetensors_numel(t.shape) == 0, what, ": tensor '", t.name, "' has no data");
  }
  return out;
}

// The caller's weights must be the model's parameters exactly.
void weights_check(const LlamaConfig& c, const NamedTensors& weights, const std::string& what, bool part) {
  auto given = tensors_by_name(weights, what);
  const auto expected = llama_param_names(c);
  for (const auto& [name, shape] : expected) {
    auto it = given.find(name);
    if (part && it == given.end()) continue;
    AGOQ_CHECK(it != given.end(), what, ": weight '", name, "' not given");
    AGOQ_CHECK(it->second->shape == shape, what, ": weight '", name, "' has shape ",
               safetensors_shape_str(it->second->shape), ", the config needs ", safetensors_shape_str(shape));
    given.erase(it);
  }
  AGOQ_CHECK(given.empty(), what, ": '", given.empty() ? "" : given.begin()->first, "' is not a weight of this config");
}

// The file must hold exactly `want` (names and shapes; at least `want` for a part), checked before any byte is
// read into caller memory.
void file_tensors_check(const SafetensorsFile& f, const NamedTensors& want, const std::string& what, bool part) {
  std::set<std::string> in_file;
  for (const std::string& n : f.names()) in_file.insert(n);
  for (const NamedTensor& t : want) {
    AGOQ_CHECK(in_file.erase(t.name) == 1, what, ": ", f.path(), " has no tensor '", t.name, "'");
    const SafeTensorInfo& info = f.get(t.name);
    AGOQ_CHECK(info.shape == t.shape, what, ": tensor '", t.name, "' has shape ", safetensors_shape_str(info.shape),
               " in ", f.path(), ", expected ", safetensors_shape_str(t.shape));
    AGOQ_CHECK(info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16", what, ": tensor '", t.name,
               "' is ", info.dtype, ", not a float type");
  }
  AGOQ_CHECK(part || in_file.empty(), what, ": ", f.path(), " has unexpected tensor '",
             in_file.empty() ? "" : *in_file.begin(), "'");
}

struct OpenCheckpoint {
  CheckpointMeta meta;
  SafetensorsFile model, optimizer;
};

OpenCheckpoint checkpoint_open(const std::string& dir) {
  const std::string what = "checkpoint " + dir;
  std::error_code ec;
  AGOQ_CHECK(fs::is_directory(dir, ec), what, ": no such directory");
  const json trainer = json_read_file(path_join(dir, kTrainerFile), what);
  AGOQ_CHECK(trainer.value("format", "") == kFormat, what, ": trainer.json is not an agoq checkpoint marker");
  AGOQ_CHECK(trainer.value("version", 0) == kFormatVersion, what, ": unsupported checkpoint version ",
             trainer.value("version", json()).dump());
  AGOQ_CHECK(trainer.contains("step") && trainer["step"].is_number_integer() && trainer.contains("commit") &&
                 trainer["commit"].is_string() && trainer.contains("config") && trainer.contains("trainer"),
             what, ": trainer.json lacks step, commit, config or trainer");

  CheckpointMeta meta;
  meta.step = trainer["step"].get<int64_t>();
  meta.commit = trainer["commit"].get<std::string>();
  meta.trainer = trainer["trainer"];
  const json config = json_read_file(path_join(dir, kConfigFile), what);
  AGOQ_CHECK(config == trainer["config"], what, ": config.json does not belong to the save committed in trainer.json",
             " (interrupted save, or edited by hand)");
  try {
    meta.config = config_from_hf_json(config);
  } catch (const Error& e) {
    fail(what, ": config.json: ", e.what());
  }

  auto open_part = [&](const char* file) {
    SafetensorsFile f = SafetensorsFile::open(path_join(dir, file));
    AGOQ_CHECK(f.metadata_value("agoq.commit") == meta.commit, what, ": ", file, " belongs to save '",
               f.metadata_value("agoq.commit"), "', trainer.json committed '", meta.commit,
               "' (interrupted save?)");
    return f;
  };
  SafetensorsFile model = open_part(kModelFile), optimizer = open_part(kOptimizerFile);
  OpenCheckpoint ck{std::move(meta), std::move(model), std::move(optimizer)};
  ck.meta.optimizer_names = ck.optimizer.names();
  return ck;
}

}  // namespace

json config_to_hf_json(const LlamaConfig& c, std::optional<int> bos_token_id, std::optional<int> eos_token_id) {
  c.validate();
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", c.dim},
            {"intermediate_size", c.ffn_dim},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_kv_heads},
            {"head_dim", c.head_dim()},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", float_clean(c.norm_eps)},
            {"rope_theta", float_clean(c.rope_theta)},
            {"rope_scaling", nullptr},
            {"tie_word_embeddings", c.tie_embeddings},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"mlp_bias", false},
            {"pretraining_tp", 1},
            {"initializer_range", 0.02},
            {"use_cache", true},
            {"torch_dtype", "float32"}};
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  return j;
}

LlamaConfig config_from_hf_json(const json& j) {
  AGOQ_CHECK(j.is_object(), "LlamaConfig JSON is not an object");
  std::string missing;
  for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                        "max_position_embeddings", "rms_norm_eps"})
    if (!j.contains(k)) missing += (missing.empty() ? "" : ", ") + std::string(k);
  AGOQ_CHECK(missing.empty(), "LlamaConfig JSON is missing ", missing);

  auto get_int = [&](const char* k, int dflt) {
    if (!j.contains(k) || j[k].is_null()) return dflt;
    AGOQ_CHECK(j[k].is_number_integer(), "LlamaConfig key ", k, " must be an integer (got ", j[k].dump(), ")");
    const int64_t v = j[k].get<int64_t>();
    AGOQ_CHECK(v >= INT_MIN && v <= INT_MAX, "LlamaConfig key ", k, " out of range (", v, ")");
    return int(v);
  };
  auto get_float = [&](const char* k, float dflt) {
    if (!j.contains(k)) return dflt;
    AGOQ_CHECK(j[k].is_number(), "LlamaConfig key ", k, " must be a number (got ", j[k].dump(), ")");
    return float(j[k].get<double>());
  };
  // Options agoq does not implement are refused rather than silently trained differently.
  auto require = [&](const char* k, const json& want) {
    AGOQ_CHECK(!j.contains(k) || j[k] == want, "LlamaConfig key ", k, " = ", j.contains(k) ? j[k].dump() : "",
               " is not supported (agoq needs ", want.dump(), ")");
  };
  require("model_type", "llama");
  require("hidden_act", "silu");
  require("attention_bias", false);
  require("mlp_bias", false);
  require("rope_scaling", nullptr);

  LlamaConfig c;
  c.dim = get_int("hidden_size", 0);
  c.ffn_dim = get_int("intermediate_size", 0);
  c.n_layers = get_int("num_hidden_layers", 0);
  c.n_heads = get_int("num_attention_heads", 0);
  c.n_kv_heads = get_int("num_key_value_heads", c.n_heads);  // HF's default: no grouping
  c.vocab_size = get_int("vocab_size", 0);
  c.max_seq_len = get_int("max_position_embeddings", 0);
  c.norm_eps = get_float("rms_norm_eps", 0);
  c.rope_theta = get_float("rope_theta", 10000.0f);
  if (j.contains("tie_word_embeddings")) {
    AGOQ_CHECK(j["tie_word_embeddings"].is_boolean(), "LlamaConfig key tie_word_embeddings must be a boolean");
    c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
  } else {
    c.tie_embeddings = false;  // HF LlamaConfig's default
  }
  c.validate();
  const int head_dim = get_int("head_dim", c.head_dim());
  AGOQ_CHECK(head_dim == c.head_dim(), "LlamaConfig head_dim ", head_dim,
             " is not supported (agoq needs hidden_size / num_attention_heads = ", c.head_dim(), ")");
  return c;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_param_names(const LlamaConfig& c) {
  const int64_t d = c.dim, kv = c.kv_dim(), f = c.ffn_dim, v = c.vocab_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out{{"model.embed_tokens.weight", {v, d}}};
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "self_attn.q_proj.weight", {d, d}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, d}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, d}});
    out.push_back({p + "self_attn.o_proj.weight", {d, d}});
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    out.push_back({p + "mlp.gate_proj.weight", {f, d}});
    out.push_back({p + "mlp.up_proj.weight", {f, d}});
    out.push_back({p + "mlp.down_proj.weight", {d, f}});
  }
  out.push_back({"model.norm.weight", {d}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {v, d}});
  return out;
}

void checkpoint_save(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                     const NamedTensors& optimizer, const json& trainer, int64_t step) {
  const std::string what = "checkpoint save to " + dir;
  config.validate();
  weights_check(config, weights, what, false);
  tensors_by_name(optimizer, what);
  std::error_code ec, ec_stat;
  fs::create_directories(dir, ec);
  AGOQ_CHECK(fs::is_directory(dir, ec_stat), what, ": cannot create the directory", ec ? ": " + ec.message() : "");

  const std::string commit = commit_id_new(step);
  const json hf = config_to_hf_json(config);
  auto write_tensors = [&](const NamedTensors& ts, const char* file, bool model_order) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");  // transformers refuses safetensors without it
    w.set_metadata("agoq.commit", commit);
    w.set_metadata("agoq.step", std::to_string(step));
    if (model_order) {  // HF order, whatever order the caller listed them in
      auto by_name = tensors_by_name(ts, what);
      for (const auto& [name, shape] : llama_param_names(config)) w.add_f32(name, shape, by_name.at(name)->data);
    } else {
      for (const NamedTensor& t : ts) w.add_f32(t.name, t.shape, t.data);
    }
    w.write_tmp(path_join(dir, file));
  };
  write_tensors(weights, kModelFile, true);
  write_tensors(optimizer, kOptimizerFile, false);
  text_write_tmp(path_join(dir, kConfigFile), hf.dump(2) + "\n");
  const json marker = {{"format", kFormat}, {"version", kFormatVersion}, {"step", step},
                       {"commit", commit},  {"config", hf},             {"trainer", trainer}};
  text_write_tmp(path_join(dir, kTrainerFile), marker.dump(2) + "\n");

  // Un-commit the old checkpoint first so a crash below leaves "no marker" rather than a marker for mixed files;
  // the commit ids in the safetensors headers catch the remaining windows anyway.
  const std::string marker_path = path_join(dir, kTrainerFile);
  AGOQ_CHECK(::unlink(marker_path.c_str()) == 0 || errno == ENOENT, what, ": cannot remove old trainer.json: ",
             std::strerror(errno));
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
  for (const char* f : {kModelFile, kOptimizerFile, kConfigFile}) tmp_commit(path_join(dir, f));
  fsync_path(dir, O_RDONLY | O_DIRECTORY);  // the data files must be in place before the marker is
  tmp_commit(marker_path);
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

CheckpointMeta checkpoint_inspect(const std::string& dir) { return checkpoint_open(dir).meta; }

CheckpointMeta checkpoint_load(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                               const NamedTensors& optimizer, bool part) {
  const std::string what = "checkpoint " + dir;
  OpenCheckpoint ck = checkpoint_open(dir);
  const std::string diff = config_diff(ck.meta.config, config);
  AGOQ_CHECK(diff.empty(), what, ": config differs from the model's (checkpoint vs model): ", diff);
  weights_check(config, weights, what + " (caller's weights)", part);
  tensors_by_name(optimizer, what + " (caller's optimizer state)");
  // Everything is checked before anything is read, so a refused load leaves the caller's memory untouched.
  file_tensors_check(ck.model, weights, what, part);
  if (!optimizer.empty()) file_tensors_check(ck.optimizer, optimizer, what, part);
  for (const NamedTensor& t : weights) ck.model.read_f32(t.name, t.data, t.shape);
  for (const NamedTensor& t : optimizer) ck.optimizer.read_f32(t.name, t.data, t.shape);
  return std::move(ck.meta);
}

}  // namespace agoq

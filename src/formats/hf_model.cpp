// A Hugging Face model folder as a model source (formats/model_source.h): config.json (arch/hf.h parses and refuses
// what agoq does not compute), the weights in model.safetensors or in shards listed by model.safetensors.index.json
// (F32, BF16 or F16, widened exactly), the tokenizer from tokenizer.json or tokenizer.model.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexFile = "model.safetensors.index.json";

// Tensors a LlamaForCausalLM file may hold that carry nothing agoq computes: the rotary table older versions saved,
// and lm_head.weight beside tied embeddings when it is a copy of the embedding (tied_head_check).
bool tensor_ignorable(const std::string& name, const LlamaConfig& c) {
  return name.ends_with("rotary_emb.inv_freq") || (c.tie_embeddings && name == "lm_head.weight");
}

// Whether two tensors hold the same bytes (dtype and shape included), read 1 MiB at a time.
bool tensors_identical(const SafetensorsFile& fa, const SafeTensorInfo& a, const SafetensorsFile& fb,
                       const SafeTensorInfo& b) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.bytes != b.bytes) return false;
  std::ifstream sa(fa.path(), std::ios::binary), sb(fb.path(), std::ios::binary);
  sa.seekg(std::streamoff(a.offset)), sb.seekg(std::streamoff(b.offset));
  std::vector<char> ba(size_t(1) << 20), bb(ba.size());
  for (uint64_t left = a.bytes; left > 0;) {
    const size_t n = size_t(std::min<uint64_t>(left, ba.size()));
    AGOQ_CHECK(sa.read(ba.data(), std::streamsize(n)) && sb.read(bb.data(), std::streamsize(n)), "model file ",
               fa.path(), " or ", fb.path(), " cannot be read");
    if (std::memcmp(ba.data(), bb.data(), n) != 0) return false;
    left -= n;
  }
  return true;
}

// The shard files of the index, by tensor name; a shard must be a plain file name in the folder.
std::map<std::string, std::string> index_read(const fs::path& dir) {
  const std::string path = (dir / kIndexFile).string();
  const json j = json_object_read_file(path, "safetensors index");
  AGOQ_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "safetensors index ", path,
             " has no \"weight_map\" object");
  std::map<std::string, std::string> where;
  for (const auto& [name, file] : j["weight_map"].items()) {
    AGOQ_CHECK(file.is_string(), "safetensors index ", path, ": the file of '", name, "' is not a string");
    const std::string f = file.get<std::string>();
    AGOQ_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", "safetensors index ", path,
               ": '", f, "' (the file of '", name, "') is not a file name in the folder");
    where[name] = f;
  }
  AGOQ_CHECK(!where.empty(), "safetensors index ", path, " lists no tensors");
  return where;
}

// Whether something is at `p`: a link that leads nowhere or into a loop is, and reading it names why it cannot be read.
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found;
}

class HfModelReader final : public ModelReader {
 public:
  explicit HfModelReader(const std::string& dir) {
    path_ = dir;
    const fs::path d(dir);
    const std::string cfg_path = (d / "config.json").string();
    try {
      hf_config_ = json_object_read_file(cfg_path, "model config");
      config_ = config_from_hf_json(hf_config_);
    } catch (const Error& e) {
      fail(cfg_path, ": ", e.what());
    }
    files_open(d);
    tensors_check();
  }

  ModelSourceKind kind() const override { return ModelSourceKind::hf_dir; }

  std::vector<std::pair<std::string, size_t>> storage_types() const override {
    std::map<std::string, size_t> n;
    for (const HfTensor& t : hf_tensors(config_)) ++n[file_of(t.name).get(t.name).dtype];
    return {n.begin(), n.end()};
  }

  void read_f32(const HfTensor& t, float* dst) const override { file_of(t.name).read_f32(t.name, dst, t.shape); }

  Tokenizer tokenizer() const override { return Tokenizer::load(path_); }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_by_tensor_;  // tensor -> index in files_

  const SafetensorsFile& file_of(const std::string& name) const {
    const auto it = file_by_tensor_.find(name);
    AGOQ_CHECK(it != file_by_tensor_.end(), "model ", path_, " has no tensor '", name, "'");
    return files_[it->second];
  }

  // One file, or the shards of the index, each header checked; every tensor in exactly one of them.
  void files_open(const fs::path& d) {
    std::error_code ec;
    std::map<std::string, std::string> listed;
    if (present(d / kIndexFile)) {
      listed = index_read(d);
    } else {
      AGOQ_CHECK(present(d / "model.safetensors"), "model ", path_, " has no model.safetensors nor ", kIndexFile,
                 fs::exists(d / "pytorch_model.bin", ec) || fs::exists(d / "pytorch_model.bin.index.json", ec)
                     ? " (its pytorch_model.bin is a pickle agoq does not read: save it with safe_serialization)"
                     : "");
    }
    std::map<std::string, size_t> index_of_file;
    auto open = [&](const std::string& file) {
      if (const auto it = index_of_file.find(file); it != index_of_file.end()) return it->second;
      files_.push_back(SafetensorsFile::open((d / file).string()));
      return index_of_file[file] = files_.size() - 1;
    };
    if (listed.empty()) listed[""] = "model.safetensors";  // (the single file: its own header lists the tensors)
    for (const auto& [name, file] : listed) open(file);
    // agoq's own checkpoints hold config.json and model.safetensors too; without their trainer.json (the commit
    // marker) they are a save that did not complete, whose files may come from two saves: never a model.
    for (const SafetensorsFile& f : files_)
      AGOQ_CHECK(f.metadata_value("agoq.commit").empty(), "model ", path_, ": ", f.path(),
                 " is an agoq checkpoint's whose save did not complete (trainer.json is missing): resume from "
                 "another checkpoint");
    for (size_t i = 0; i < files_.size(); ++i)
      for (const std::string& name : files_[i].names()) {
        const auto [it, fresh] = file_by_tensor_.emplace(name, i);
        AGOQ_CHECK(fresh, "model ", path_, ": tensor '", name, "' is in both ", files_[it->second].path(), " and ",
                   files_[i].path());
      }
    for (const auto& [name, file] : listed)
      AGOQ_CHECK(name.empty() || file_by_tensor_.count(name), "model ", path_, ": ", kIndexFile, " puts '", name,
                 "' in ", file, ", which does not hold it");
  }

  // Exactly LlamaForCausalLM's tensors with their shapes, in a float type; anything else (a bias, another
  // architecture's weights) refused by name rather than ignored.
  void tensors_check() const {
    std::set<std::string> left;
    for (const auto& [name, i] : file_by_tensor_) left.insert(name);
    for (const HfTensor& t : hf_tensors(config_)) {
      const SafeTensorInfo& info = file_of(t.name).get(t.name);
      AGOQ_CHECK(info.shape == t.shape, "model ", path_, ": tensor '", t.name, "' has shape ",
                 safetensors_shape_str(info.shape), ", config.json needs ", safetensors_shape_str(t.shape));
      AGOQ_CHECK(info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16", "model ", path_, ": tensor '",
                 t.name, "' is ", info.dtype, " (agoq reads F32, BF16 and F16)");
      left.erase(t.name);
    }
    for (const std::string& name : left)
      AGOQ_CHECK(tensor_ignorable(name, config_), "model ", path_, ": tensor '", name,
                 "' is not part of the LLaMA architecture agoq computes");
    tied_head_check();
  }

  // Tied embeddings with a stored lm_head.weight: a copy of the embedding is harmless, another head is ambiguous
  // (transformers 4 ties it to the embedding and drops the file's, transformers 5 keeps the file's), so refused.
  void tied_head_check() const {
    const char *head = "lm_head.weight", *embed = "model.embed_tokens.weight";
    if (!config_.tie_embeddings || !file_by_tensor_.count(head)) return;
    AGOQ_CHECK(tensors_identical(file_of(head), file_of(head).get(head), file_of(embed), file_of(embed).get(embed)),
               "model ", path_,
               ": config.json ties the embeddings, but its lm_head.weight is not the embedding "
               "(transformers 4 would use the embedding, 5 the stored head): remove one, or set tie_word_embeddings "
               "to false");
  }
};

}  // namespace

std::unique_ptr<ModelReader> hf_model_open(const std::string& dir) { return std::make_unique<HfModelReader>(dir); }

}  // namespace agoq

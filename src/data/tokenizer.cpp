// The Tokenizer facade: finds which engine a file or folder needs, checks ids, formats the identity.
#include "data/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"
#include "data/tokenizer_engine.h"
#include "data/tokenizer_json.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

std::string file_read_bytes(const std::string& path) { return input_file_read(path, "tokenizer"); }

// The tokenizer_config.json beside `file`, or "" when there is none.
std::string config_beside(const fs::path& file) {
  const fs::path c = file.parent_path() / "tokenizer_config.json";
  return fs::is_regular_file(c) ? file_read_bytes(c.string()) : "";
}

// What a SentencePiece model's encode_for_model adds: nothing for a tokenizer.model alone (agoq's trained models);
// with a tokenizer_config.json, LlamaTokenizer's rules (add_bos_token true and add_eos_token false by default).
std::pair<bool, bool> sentencepiece_adds(const std::string& config, const std::string& path) {
  if (config.empty()) return {false, false};
  const nlohmann::json c = json_parse(config, "tokenizer " + path + ": tokenizer_config.json beside it");
  const auto flag = [&](const char* key, bool dflt) {
    if (!c.is_object() || !c.contains(key) || c[key].is_null()) return dflt;
    AGOQ_CHECK(c[key].is_boolean(), "tokenizer ", path, ": tokenizer_config.json ", key, " is not true or false");
    return c[key].get<bool>();
  };
  return {flag("add_bos_token", true), flag("add_eos_token", false)};
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

const TokenizerEngine& Tokenizer::engine() const {
  AGOQ_CHECK(engine_, "tokenizer: no model loaded");
  return *engine_;
}

Tokenizer Tokenizer::load(const std::string& path) {
  fs::path file = path;
  if (fs::is_directory(file)) {
    const fs::path json = file / "tokenizer.json", model = file / "tokenizer.model";
    const bool has_json = fs::is_regular_file(json), has_model = fs::is_regular_file(model);
    AGOQ_CHECK(has_json || has_model, "tokenizer ", path, ": the folder has no tokenizer.json or tokenizer.model");
    // transformers' tokenizer.json of a SentencePiece model (byte fallback) is read from its tokenizer.model.
    file = has_json && !(has_model && tokenizer_json_is_sentencepiece(file_read_bytes(json.string()))) ? json : model;
  }
  const std::string name = file.string(), bytes = file_read_bytes(name), config = config_beside(file);
  Tokenizer t;
  t.origin_ = name;
  if (file.extension() == ".json") {
    TokenizerFiles files = {{"tokenizer.json", bytes}};
    BpeSpec spec = bpe_spec_from_json(bytes, config, name);
    files.emplace_back("tokenizer_config.json", config.empty() ? bpe_spec_to_json(spec)[1].second : config);
    t.engine_ = bpe_engine(std::move(spec), std::move(files), name);
  } else {
    const auto [add_bos, add_eos] = sentencepiece_adds(config, name);
    t.engine_ = sentencepiece_engine(bytes, name, add_bos, add_eos);
  }
  return t;
}

Tokenizer Tokenizer::from_serialized(std::string serialized, const std::string& what) {
  Tokenizer t;
  t.engine_ = sentencepiece_engine(std::move(serialized), what, false, false);
  t.origin_ = what;
  return t;
}

Tokenizer Tokenizer::from_bpe(BpeSpec spec, const std::string& what) {
  Tokenizer t;
  t.engine_ = bpe_engine(std::move(spec), {}, what);
  t.origin_ = what;
  return t;
}

std::vector<std::pair<std::string, std::string>> Tokenizer::files() const { return engine().files(); }

void Tokenizer::save_files(const std::string& dir) const {
  for (const auto& [name, bytes] : files()) atomic_file_write((fs::path(dir) / name).string(), bytes);
}

void Tokenizer::save(const std::string& path) const {
  AGOQ_CHECK(engine_, "tokenizer: no model to save to ", path);
  AGOQ_CHECK(kind() == TokenizerKind::sentencepiece, "tokenizer ", origin_, ": a byte-level BPE tokenizer is ",
             "saved as tokenizer.json and tokenizer_config.json (save_files), not as ", path);
  atomic_file_write(path, serialized());
}

const std::string& Tokenizer::serialized() const { return engine().serialized(); }

std::string Tokenizer::identity() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(engine().identity_hash()));
  return hex;
}

TokenizerKind Tokenizer::kind() const { return engine().kind(); }
const char* Tokenizer::kind_name() const {
  return kind() == TokenizerKind::sentencepiece ? "sentencepiece" : "byte-level bpe";
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool progress, bool* round_trips) const {
  return engine().encode(text, progress, round_trips);
}

std::vector<int32_t> Tokenizer::encode_for_model(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  if (add_bos()) ids.insert(ids.begin(), bos_id());
  if (add_eos()) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const int n = engine().vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    AGOQ_CHECK(ids[i] >= 0 && ids[i] < n, "tokenizer ", origin_, ": token id ", ids[i], " at position ", i,
               " is outside the vocabulary (size ", n, ")");
  return engine().decode(ids);
}

int Tokenizer::vocab_size() const { return engine().vocab_size(); }

std::string Tokenizer::piece(int id) const {
  AGOQ_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", origin_, ": token id ", id,
             " is outside the vocabulary (size ", vocab_size(), ")");
  return engine().piece(id);
}

int Tokenizer::piece_id(std::string_view piece) const { return engine().piece_id(piece); }
int Tokenizer::unk_id() const { return engine().unk_id(); }
int Tokenizer::bos_id() const { return engine().bos_id(); }
int Tokenizer::eos_id() const { return engine().eos_id(); }
bool Tokenizer::add_bos() const { return engine().add_bos(); }
bool Tokenizer::add_eos() const { return engine().add_eos(); }
bool Tokenizer::loaded() const { return engine_ != nullptr; }

}  // namespace agoq

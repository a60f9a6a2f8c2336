#include "formats/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "arch/hf.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/input_file.h"
#include "core/json_read.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"

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

std::string path_join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

// Not there at all (a path that is there but cannot be read is named with its reason by input_file_read).
bool path_absent(const std::string& path) {
  std::error_code ec;
  return fs::status(path, ec).type() == fs::file_type::not_found;
}

json json_read_file(const std::string& path, const std::string& what) {
  AGOQ_CHECK(!path_absent(path), what, ": ", fs::path(path).filename().string(),
             " missing (not a checkpoint, or a save was interrupted)");
  const json j = json_parse(input_file_read(path, what), what + ": " + path);
  AGOQ_CHECK(j.is_object(), what, ": ", path, " is not a valid JSON object");
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

// Bytes of a non-float tensor (NamedTensor::raw).
size_t raw_bytes(const NamedTensor& t) { return size_t(safetensors_numel(t.shape)) * safetensors_dtype_size(t.dtype); }

// name -> tensor, refusing duplicates and null data.
std::map<std::string, const NamedTensor*> tensors_by_name(const NamedTensors& ts, const std::string& what) {
  std::map<std::string, const NamedTensor*> out;
  for (const NamedTensor& t : ts) {
    AGOQ_CHECK(out.emplace(t.name, &t).second, what, ": tensor '", t.name, "' given twice");
    AGOQ_CHECK(t.data || t.raw || safetensors_numel(t.shape) == 0, what, ": tensor '", t.name, "' has no data");
  }
  return out;
}

// The caller's weights must be the model's parameters exactly.
void weights_check(const LlamaConfig& c, const NamedTensors& weights, const std::string& what, bool part) {
  auto given = tensors_by_name(weights, what);
  for (const HfTensor& want : hf_tensors(c)) {
    auto it = given.find(want.name);
    if (part && it == given.end()) continue;
    AGOQ_CHECK(it != given.end(), what, ": weight '", want.name, "' not given");
    AGOQ_CHECK(it->second->shape == want.shape, what, ": weight '", want.name, "' has shape ",
               safetensors_shape_str(it->second->shape), ", the config needs ", safetensors_shape_str(want.shape));
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
    if (t.raw) {
      AGOQ_CHECK(info.dtype == t.dtype, what, ": tensor '", t.name, "' is ", info.dtype, ", expected ", t.dtype);
    } else {
      AGOQ_CHECK(info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16", what, ": tensor '", t.name,
                 "' is ", info.dtype, ", not a float type");
    }
  }
  AGOQ_CHECK(part || in_file.empty(), what, ": ", f.path(), " has unexpected tensor '",
             in_file.empty() ? "" : *in_file.begin(), "'");
}

// The size and hash trainer.json records for a carried file.
json file_record(const std::string& bytes) {
  return {{"bytes", bytes.size()}, {"fnv1a64", std::to_string(hash_fnv1a64(bytes.data(), bytes.size()))}};
}

bool file_name_carried(const std::string& name) {
  return std::find(std::begin(kCheckpointCarriedFiles), std::end(kCheckpointCarriedFiles), name) !=
         std::end(kCheckpointCarriedFiles);
}

// A file a checkpoint writes, or the temporary it writes it through.
bool file_name_of_checkpoint(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
  return name == kModelFile || name == kOptimizerFile || name == kConfigFile || name == kTrainerFile ||
         file_name_carried(name);
}

// Every file trainer.json lists must be there with the recorded size and hash.
void files_check(const std::string& dir, const json& trainer, const std::string& what) {
  if (!trainer.contains("files")) return;  // written before checkpoints carried files
  const json& files = trainer["files"];
  AGOQ_CHECK(files.is_object(), what, ": trainer.json's \"files\" is not an object");
  for (const auto& [name, rec] : files.items()) {
    AGOQ_CHECK(file_name_carried(name), what, ": trainer.json lists '", name,
               "', which is not a file a checkpoint carries");
    const std::string path = path_join(dir, name.c_str());
    AGOQ_CHECK(!path_absent(path), what, ": ", name, " missing (the save committed it; deleted since?)");
    AGOQ_CHECK(file_record(input_file_read(path, what)) == rec, what, ": ", name,
               " is not the file this checkpoint saved (size or hash differ: damaged or replaced)");
  }
}

// What a loaded tensor's values must be, checksum or not (a file from elsewhere has none): finite (a NaN saved is a
// NaN everywhere after it: sampling "⁇ ⁇ ⁇", a resumed run diverging at once), and AdamW's second moments and every
// 8-bit scale (an absolute maximum) not negative. 8-bit codes cannot hold a bad value.
void tensor_values_check(const NamedTensor& t, const std::string& what) {
  if (t.raw) return;
  const size_t n = size_t(safetensors_numel(t.shape));
  const size_t bad = size_t(std::count_if(t.data, t.data + n, [](float x) { return !std::isfinite(x); }));
  AGOQ_CHECK(bad == 0, what, ": tensor '", t.name, "' holds ", bad, " non-finite values (NaN or infinity) of ", n);
  const bool signless = t.name.find("adam.v.") != std::string::npos || t.name.find(".scales.") != std::string::npos;
  if (!signless) return;
  const size_t negative = size_t(std::count_if(t.data, t.data + n, [](float x) { return x < 0; }));
  AGOQ_CHECK(negative == 0, what, ": tensor '", t.name, "' holds ", negative, " negative values of ", n,
             ", which it cannot (a second moment or a scale): the file is damaged");
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
  // Types are checked before any value is read (nlohmann's value() throws its own error on a wrong type).
  auto has = [&](const char* key, json::value_t type) { return trainer.contains(key) && trainer[key].type() == type; };
  AGOQ_CHECK(has("format", json::value_t::string) && trainer["format"] == kFormat, what,
             ": trainer.json is not an agoq checkpoint marker");
  AGOQ_CHECK(trainer.contains("version") && trainer["version"] == kFormatVersion, what,
             ": unsupported checkpoint version ",
             trainer.contains("version") ? json_excerpt(trainer["version"]) : "(none)");
  for (const char* key : {"step", "commit", "config", "trainer"})
    AGOQ_CHECK(trainer.contains(key), what, ": trainer.json lacks \"", key, "\"");
  AGOQ_CHECK(has("commit", json::value_t::string), what, ": trainer.json's commit is not a string");
  const json& step = trainer["step"];
  const bool whole = step.is_number_integer() || step.is_number_unsigned();
  AGOQ_CHECK(
      whole && (step.is_number_unsigned() ? step.get<uint64_t>() <= uint64_t(INT64_MAX) : step.get<int64_t>() >= 0),
      what, ": trainer.json's step ", json_excerpt(step), " is not a step count (a whole number from 0 to 2^63 - 1)");

  CheckpointMeta meta;
  meta.step = step.get<int64_t>();
  meta.commit = trainer["commit"].get<std::string>();
  meta.trainer = trainer["trainer"];
  const json config = json_read_file(path_join(dir, kConfigFile), what);
  AGOQ_CHECK(config == trainer["config"], what, ": config.json does not belong to the save committed in trainer.json",
             " (interrupted save, or edited by hand)");
  meta.hf_config = config;
  try {
    meta.config = config_from_hf_json(config);
  } catch (const Error& e) {
    fail(what, ": config.json: ", e.what());
  }

  auto open_part = [&](const char* file) {
    SafetensorsFile f = SafetensorsFile::open(path_join(dir, file));
    AGOQ_CHECK(f.metadata_value("agoq.commit") == meta.commit, what, ": ", file, " belongs to save '",
               f.metadata_value("agoq.commit"), "', trainer.json committed '", meta.commit, "' (interrupted save?)");
    AGOQ_CHECK(f.metadata_value("agoq.step") == std::to_string(meta.step), what, ": ", file, " was saved at step ",
               f.metadata_value("agoq.step"), ", trainer.json says step ", meta.step, " (edited by hand?)");
    return f;
  };
  SafetensorsFile model = open_part(kModelFile), optimizer = open_part(kOptimizerFile);
  files_check(dir, trainer, what);
  OpenCheckpoint ck{std::move(meta), std::move(model), std::move(optimizer)};
  ck.meta.optimizer_names = ck.optimizer.names();
  return ck;
}

}  // namespace

namespace {

void checkpoint_write(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                      const NamedTensors& optimizer, const json& trainer, int64_t step,
                      const std::vector<CheckpointFile>& files, const json& original_config) {
  const std::string what = "checkpoint save to " + dir;
  const std::string commit = commit_id_new(step);
  json hf = config_to_hf_json(config);
  if (original_config.is_object()) {  // its other fields kept (token ids, dtype names, ...), agoq's written over
    json merged = original_config;
    merged.update(hf);
    hf = std::move(merged);
  }
  // The config as a load will read it back must load (a number JSON cannot hold becomes null on the way).
  try {
    config_from_hf_json(json::parse(hf.dump(2))).validate();
  } catch (const Error& e) {
    fail(what, ": the config would not load back: ", e.what());
  }
  auto write_tensors = [&](const NamedTensors& ts, const char* file, bool model_order) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");  // transformers refuses safetensors without it
    w.set_metadata("agoq.commit", commit);
    w.set_metadata("agoq.step", std::to_string(step));
    if (model_order) {  // HF order, whatever order the caller listed them in
      auto by_name = tensors_by_name(ts, what);
      for (const HfTensor& t : hf_tensors(config)) w.add_f32(t.name, t.shape, by_name.at(t.name)->data);
    } else {
      for (const NamedTensor& t : ts)
        if (t.raw) w.add(t.name, t.dtype, t.shape, t.raw, raw_bytes(t));
        else w.add_f32(t.name, t.shape, t.data);
    }
    return w.write_tmp(path_join(dir, file));
  };
  auto write_text = [&](const char* file, const json& j) {
    AtomicFile f(path_join(dir, file));
    f.write(j.dump(2) + "\n");
    f.finish();
    return f;
  };
  AtomicFile model = write_tensors(weights, kModelFile, true);
  AtomicFile moments = write_tensors(optimizer, kOptimizerFile, false);
  AtomicFile hf_config = write_text(kConfigFile, hf);
  std::vector<AtomicFile> carried;
  json file_records = json::object();
  for (const CheckpointFile& f : files) {
    AGOQ_CHECK(file_name_carried(f.name) && !file_records.contains(f.name), what, ": cannot carry a file named '",
               f.name, "'");
    AtomicFile& a = carried.emplace_back(path_join(dir, f.name.c_str()));
    a.write(f.bytes);
    a.finish();
    file_records[f.name] = file_record(f.bytes);
  }
  const json marker_json = {{"format", kFormat}, {"version", kFormatVersion}, {"step", step},      {"commit", commit},
                            {"config", hf},      {"files", file_records},     {"trainer", trainer}};
  AtomicFile marker = write_text(kTrainerFile, marker_json);

  // Un-commit the old checkpoint first so a crash below leaves "no marker" rather than a marker for mixed files;
  // the commit ids in the safetensors headers catch the remaining windows anyway. Each commit() fsyncs the
  // directory, so the data files are in place before the marker is.
  AGOQ_CHECK(::unlink(marker.path().c_str()) == 0 || errno == ENOENT, what,
             ": cannot remove old trainer.json: ", std::strerror(errno));
  dir_fsync(dir);
  for (AtomicFile* f : {&model, &moments, &hf_config}) f->commit();
  for (AtomicFile& f : carried) f.commit();
  marker.commit();  // the marker last
}

}  // namespace

void checkpoint_save(const std::string& dir, const LlamaConfig& config, const NamedTensors& weights,
                     const NamedTensors& optimizer, const json& trainer, int64_t step,
                     const std::vector<CheckpointFile>& files, const json& original_config) {
  const std::string what = "checkpoint save to " + dir;
  config.validate();
  weights_check(config, weights, what, false);
  tensors_by_name(optimizer, what);
  std::error_code ec, ec_stat;
  AGOQ_CHECK(!fs::is_symlink(dir, ec), what, ": it is a link; agoq writes checkpoints only into folders of its own");
  if (fs::is_directory(dir, ec)) {
    const std::string foreign = checkpoint_foreign_entry(dir);
    AGOQ_CHECK(foreign.empty(), what, ": the folder holds '", foreign, "', which is not a checkpoint's file");
  }
  const bool created = fs::create_directories(dir, ec);
  AGOQ_CHECK(fs::is_directory(dir, ec_stat), what, ": cannot create the directory", ec ? ": " + ec.message() : "");
  try {
    // Its temporaries are gone on a throw.
    checkpoint_write(dir, config, weights, optimizer, trainer, step, files, original_config);
  } catch (const Error&) {
    if (created) fs::remove_all(dir, ec);
    throw;
  }
}

std::string checkpoint_foreign_entry(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!file_name_of_checkpoint(name) || !e.is_regular_file(ec) || e.is_symlink(ec)) return name;
  }
  return {};
}

CheckpointMarker checkpoint_marker_read(const std::string& dir) {
  CheckpointMarker m;
  json j;
  try {  // (anything unreadable is no marker: not a checkpoint)
    j = json_parse(input_file_read(path_join(dir, kTrainerFile), "checkpoint marker"), "trainer.json");
  } catch (const Error&) {
    return m;
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat) return m;
  m.is_checkpoint = true;
  if (j.contains("commit") && j["commit"].is_string()) m.commit = j["commit"].get<std::string>();
  if (j.contains("trainer") && j["trainer"].is_object() && j["trainer"].contains("run") &&
      j["trainer"]["run"].is_string())
    m.run = j["trainer"]["run"].get<std::string>();
  return m;
}

std::string checkpoint_remove(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  const std::string marker = path_join(dir, kTrainerFile);
  AGOQ_CHECK(::unlink(marker.c_str()) == 0 || errno == ENOENT, "checkpoint ", dir, ": cannot remove ", kTrainerFile,
             ": ", std::strerror(errno));
  dir_fsync(dir);
  std::string kept;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (file_name_of_checkpoint(name) && (e.is_symlink(ec) || e.is_regular_file(ec))) {
      AGOQ_CHECK(::unlink(e.path().c_str()) == 0 || errno == ENOENT, "checkpoint ", dir, ": cannot remove ", name, ": ",
                 std::strerror(errno));
    } else if (kept.empty()) {
      kept = name;
    }
  }
  if (kept.empty())
    AGOQ_CHECK(::rmdir(dir.c_str()) == 0 || errno == ENOENT, "checkpoint ", dir,
               ": cannot delete: ", std::strerror(errno));
  return kept;
}

namespace {

// An agoq checkpoint as a model source (formats/model_source.h): the save checked whole on open, tensors read with
// their checksums one at a time.
class CheckpointModelReader final : public ModelReader {
 public:
  explicit CheckpointModelReader(const std::string& dir) : ck_(checkpoint_open(dir)) {
    path_ = dir, config_ = ck_.meta.config, hf_config_ = ck_.meta.hf_config;
    NamedTensors want;
    for (const HfTensor& t : hf_tensors(config_)) want.push_back({t.name, t.shape, nullptr});
    file_tensors_check(ck_.model, want, "checkpoint " + dir, false);
  }
  ModelSourceKind kind() const override { return ModelSourceKind::agoq_checkpoint; }
  std::vector<std::pair<std::string, size_t>> storage_types() const override {
    return {{"F32", hf_tensors(config_).size()}};
  }
  void read_f32(const HfTensor& t, float* dst) const override { ck_.model.read_f32(t.name, dst, t.shape); }
  Tokenizer tokenizer() const override { return Tokenizer::load(path_); }

 private:
  OpenCheckpoint ck_;
};

}  // namespace

std::unique_ptr<ModelReader> checkpoint_model_open(const std::string& dir) {
  return std::make_unique<CheckpointModelReader>(dir);
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
  for (const NamedTensor& t : optimizer)
    if (t.raw) ck.optimizer.read_raw(t.name, t.raw, raw_bytes(t));
    else ck.optimizer.read_f32(t.name, t.data, t.shape);
  for (const NamedTensors* ts : {&weights, &optimizer})
    for (const NamedTensor& t : *ts) tensor_values_check(t, what);
  return std::move(ck.meta);
}

}  // namespace agoq

#include "formats/model_source.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "formats/safetensors.h"

namespace agoq {

namespace fs = std::filesystem;

const char* model_source_kind_name(ModelSourceKind k) {
  switch (k) {
    case ModelSourceKind::hf_dir: return "Hugging Face folder";
    case ModelSourceKind::gguf: return "GGUF file";
    default: return "agoq checkpoint";
  }
}

namespace {
bool file_is_gguf(const std::string& path) {
  char magic[4] = {};
  std::ifstream f(path, std::ios::binary);
  return f.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}
}  // namespace

std::unique_ptr<ModelReader> model_reader_open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  AGOQ_CHECK(fs::exists(st), "model ", path, ": no such file or folder");
  if (fs::is_directory(st)) {
    // trainer.json marks agoq's own checkpoints (which also hold a config.json); config.json alone, HF's folders.
    if (fs::exists(fs::path(path) / "trainer.json", ec)) return checkpoint_model_open(path);
    if (fs::exists(fs::path(path) / "config.json", ec)) return hf_model_open(path);
    fail("model ", path,
         ": the folder holds neither trainer.json (an agoq checkpoint) nor config.json (a Hugging "
         "Face model)");
  }
  if (file_is_gguf(path)) return gguf_model_open(path);
  AGOQ_CHECK(!path.ends_with(".safetensors"), "model ", path,
             ": a safetensors file alone has no config; give the folder that holds it and its config.json");
  fail("model ", path,
       ": not a GGUF file (it does not start with \"GGUF\"), an agoq checkpoint or a Hugging Face "
       "model folder");
}

Tokenizer tokenizer_open(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && file_is_gguf(path)) return gguf_model_open(path)->tokenizer();
  return Tokenizer::load(path);
}

void model_reader_load(const ModelReader& src, const NamedTensors& weights) {
  std::map<std::string, const HfTensor*> by_name;
  const std::vector<HfTensor> all = hf_tensors(src.config());
  for (const HfTensor& t : all) by_name[t.name] = &t;
  for (const NamedTensor& w : weights) {
    const auto it = by_name.find(w.name);
    AGOQ_CHECK(it != by_name.end(), "model ", src.path(), ": '", w.name, "' is not a weight of its config");
    AGOQ_CHECK(it->second->shape == w.shape, "model ", src.path(), ": tensor '", w.name, "' is ",
               safetensors_shape_str(it->second->shape), ", the caller's is ", safetensors_shape_str(w.shape));
  }
  for (const NamedTensor& w : weights) {
    src.read_f32(*by_name.at(w.name), w.data);
    // (a NaN in a weight is a NaN in every logit: refused by name rather than trained on)
    const size_t n = size_t(safetensors_numel(w.shape));
    const size_t bad = size_t(std::count_if(w.data, w.data + n, [](float x) { return !std::isfinite(x); }));
    AGOQ_CHECK(bad == 0, "model ", src.path(), ": tensor '", w.name, "' holds ", bad,
               " non-finite values (NaN or infinity) of ", n);
  }
}

}  // namespace agoq

#include "formats/model_source.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/input_file.h"
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
  const int fd = input_file_open(path, "model");
  const bool gguf = ::pread(fd, magic, 4, 0) == 4 && std::string_view(magic, 4) == "GGUF";
  ::close(fd);
  return gguf;
}

// Whether the folder holds `name`; a name that is there but cannot be looked at is refused with the system's reason
// (a folder that cannot be searched would otherwise seem to hold nothing).
bool dir_holds(const std::string& dir, const char* name) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(fs::path(dir) / name, ec);
  AGOQ_CHECK(!ec || st.type() == fs::file_type::not_found, "model ", dir, ": cannot look for ", name, ": ",
             ec.message());
  return fs::exists(st);
}
}  // namespace

std::unique_ptr<ModelReader> model_reader_open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  AGOQ_CHECK(st.type() != fs::file_type::not_found, "model ", path, ": no such file or folder");
  AGOQ_CHECK(!ec, "model ", path, ": ", ec.message());  // e.g. a symlink loop, a folder on the way not searchable
  if (fs::is_directory(st)) {
    const std::string problem = input_dir_problem(path);
    AGOQ_CHECK(problem.empty(), "model ", path, ": cannot read the folder: ", problem);
    // trainer.json marks agoq's own checkpoints (which also hold a config.json); config.json alone, HF's folders.
    if (dir_holds(path, "trainer.json")) return checkpoint_model_open(path);
    if (dir_holds(path, "config.json")) return hf_model_open(path);
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

// What the format tests share: the folders gguf_reference.py makes, and an import measured for its peak memory.
#pragma once
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "arch/hf.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "tests/common/python_ref.h"
#include "tests/common/temp_path.h"

namespace agoq {

// The files of `gguf_reference.py MODE`, made once per test process, removed when it exits.
struct GgufRefDir {
  std::filesystem::path path;
  explicit GgufRefDir(const char* mode) : path(test_temp_path(std::string("gguf_") + mode)) {
    std::filesystem::create_directories(path);
    python_ref_run("tests/formats/gguf_reference.py", std::string(mode) + " " + path.string());
  }
  ~GgufRefDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// VmRSS / VmHWM of this process in bytes (/proc/self/status).
inline size_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return size_t(std::stoull(line.substr(std::strlen(key)))) * 1024;
  return 0;
}

// A whole model imported from src into `model` (resident before the import starts), and how far the process's peak
// resident memory rose above what it held with the model in place.
struct MeasuredImport {
  std::vector<float> model;
  NamedTensors weights;
  size_t peak_above = 0;
};
inline MeasuredImport import_measured(const ModelReader& src) {
  MeasuredImport m;
  m.model.assign(src.config().param_count(), 0.0f);
  size_t at = 0;
  for (const HfTensor& t : hf_tensors(src.config())) {
    m.weights.push_back({t.name, t.shape, m.model.data() + at});
    at += size_t(safetensors_numel(t.shape));
  }
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const size_t before = proc_status_bytes("VmRSS:");
  model_reader_load(src, m.weights);
  const size_t peak = proc_status_bytes("VmHWM:");
  m.peak_above = peak > before ? peak - before : 0;
  return m;
}

}  // namespace agoq

// Fuzz target of the GGUF reader (fuzz_target.h): the header, every typed metadata read, every tensor the file
// lets through read and dequantized, then the file as a model source (config, tensors in HF layout, tokenizer).
// Seeds: tests/formats/gguf_reference.py seeds tests/fuzz/corpus/gguf.
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_quants.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

namespace agoq::fuzz {

namespace {

// Each key through every typed read (most refuse: the type does not match).
void metadata_read_all(const GgufFile& f) {
  for (const auto& kv : f.metadata()) {
    const std::string& key = kv.first;  // (a named reference: clang 14 cannot capture a structured binding)
    const auto attempt = [](auto read) {
      try {
        (void)read();
      } catch (const Error& e) {
        refused(e);
      }
    };
    attempt([&] { return f.get_int(key); });
    attempt([&] { return f.get_float(key); });
    attempt([&] { return f.get_bool(key); });
    attempt([&] { return f.get_string(key); });
    attempt([&] { return f.get_strings(key); });
    attempt([&] { return f.get_floats(key); });
    attempt([&] { return f.get_ints(key); });
  }
}

void tensors_decode_all(const GgufFile& f) {
  for (const GgufTensorInfo& t : f.tensors()) {
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    if (!ti->dequantizable || t.bytes == 0 || t.bytes > (1u << 20)) continue;
    std::vector<uint8_t> raw(t.bytes);
    f.read(t, 0, raw.data(), raw.size());
    std::vector<float> values(t.bytes / ti->bytes * ti->block);
    gguf_dequantize(t.type, raw.data(), values.data(), values.size());
  }
}

}  // namespace

int gguf(const uint8_t* data, size_t size) {
  try {
    const std::string path = file_of(text_of(data, size), "model.gguf");
    {
      const GgufFile f = GgufFile::open(path);
      metadata_read_all(f);
      tensors_decode_all(f);
    }
    const std::unique_ptr<ModelReader> m = gguf_model_open(path);
    (void)m->storage_types();
    for (const HfTensor& t : hf_tensors(m->config())) {
      std::vector<float> values(size_t(safetensors_numel(t.shape)));
      m->read_f32(t, values.data());
    }
    (void)m->tokenizer().vocab_size();
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

}  // namespace agoq::fuzz

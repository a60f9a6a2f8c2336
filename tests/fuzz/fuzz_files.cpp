// Fuzz targets of the file formats: safetensors, token files, checkpoints (fuzz_target.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "arch/hf.h"
#include "core/error.h"
#include "data/data_loader.h"
#include "data/token_file.h"
#include "formats/checkpoint.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "model/attention.h"
#include "tests/fuzz/fuzz_target.h"
#include "train/session.h"

namespace agoq::fuzz {

namespace fs = std::filesystem;

namespace {

// This process's temporary folder, removed when it exits.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = fs::path(tmp ? tmp : "/tmp") / ("agoq-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

struct FuzzCheckpoint {
  fs::path dir;
  std::string commit;  // random per save: inputs say "COMMIT" where they mean it
};

// A checkpoint of a tiny model whose trainer.json each input replaces.
const FuzzCheckpoint& fuzz_checkpoint() {
  static const FuzzCheckpoint ck = [] {
    const fs::path d = scratch_dir() / "ckpt";
    LlamaConfig c;
    c.vocab_size = 8, c.dim = 4, c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.ffn_dim = 4, c.max_seq_len = 4;
    std::vector<std::vector<float>> data;
    NamedTensors weights;
    for (const HfTensor& t : hf_tensors(c)) {
      data.emplace_back(size_t(safetensors_numel(t.shape)), 0.5f);
      weights.push_back({t.name, t.shape, data.back().data()});
    }
    checkpoint_save(d.string(), c, weights, {}, {{"loader", DataLoader::State{}.to_string()}}, 1,
                    {{"tokenizer.model", "not a tokenizer, but carried all the same"}});
    return FuzzCheckpoint{d, checkpoint_inspect(d.string()).commit};
  }();
  return ck;
}

}  // namespace

void refused(const std::exception& e) {
  static const bool trace = std::getenv("AGOQ_FUZZ_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "refused: %s\n", e.what());
}

// Plain writes, no fsync: a scratch file only this process reads, rewritten thousands of times a second.
std::string file_of(std::string_view bytes, const char* name) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

int safetensors(const uint8_t* data, size_t size) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(file_of(text_of(data, size), "t.safetensors"));
    for (const std::string& name : f.names()) {  // every read the checks let through must stay inside the file
      const SafeTensorInfo& t = f.get(name);
      std::vector<char> raw(t.bytes);
      f.read_raw(name, raw.data(), raw.size());
      std::vector<float> values(size_t(safetensors_numel(t.shape)));
      f.read_f32(name, values.data(), t.shape);
    }
    (void)f.metadata_value("agoq.commit");
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

int token_file(const uint8_t* data, size_t size) {
  try {
    const std::string path = file_of(text_of(data, size), "train.bin");
    const TokenFileHeader h = token_file_read_header(path);
    std::vector<char> payload(h.count * h.dtype);
    std::vector<uint8_t> flags(h.has_flags() ? h.count : 0);
    token_file_read_payload(path, h, payload.data(), flags.data());
    const TokenDataset d = TokenDataset::load(path);
    if (d.window() >= 2) {  // packed examples: a batch of each window, its masks and document starts
      const int T = int(d.window()) - 1;
      if (T <= 4096) {
        DataLoader loader(d, T, 1);
        std::vector<int32_t> in(T), tgt(T), docs(T);
        loader.next_batch(1, in.data(), tgt.data(), docs.data());
        attention_check_doc_start(docs.data(), 1, T);
      }
    }
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

int checkpoint(const uint8_t* data, size_t size) {
  try {
    const FuzzCheckpoint& ck = fuzz_checkpoint();
    std::string text(text_of(data, size));
    for (size_t at = text.find("COMMIT"); at != std::string::npos; at = text.find("COMMIT", at + ck.commit.size()))
      text.replace(at, 6, ck.commit);
    std::ofstream((ck.dir / "trainer.json").string(), std::ios::trunc) << text;
    const CheckpointMeta meta = checkpoint_inspect(ck.dir.string());
    (void)resume_loader_state(meta, ck.dir.string());
    (void)moments_form_of(meta.trainer);  // what a resume reads next: the moments' form, the TP degree, the tensors
    (void)moments_tp_of(meta.trainer, meta.config);
    std::vector<std::vector<float>> data;
    NamedTensors weights;
    for (const HfTensor& t : hf_tensors(meta.config)) {
      data.emplace_back(size_t(safetensors_numel(t.shape)));
      weights.push_back({t.name, t.shape, data.back().data()});
    }
    checkpoint_load(ck.dir.string(), meta.config, weights, {});
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

// A Hugging Face folder of a tiny model in two shards, whose model.safetensors.index.json each input replaces
// ("A" and "B" stand for the shard names).
const fs::path& fuzz_hf_folder() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir() / "hf";
    fs::create_directories(d);
    LlamaConfig c;
    c.vocab_size = 8, c.dim = 4, c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.ffn_dim = 4, c.max_seq_len = 4;
    std::ofstream(d / "config.json") << config_to_hf_json(c).dump();
    static std::vector<float> zeros(64, 0.25f);
    SafetensorsWriter shard[2];
    int i = 0;
    for (const HfTensor& t : hf_tensors(c)) shard[i++ % 2].add_f32(t.name, t.shape, zeros.data());
    shard[0].write((d / "A").string());
    shard[1].write((d / "B").string());
    return d;
  }();
  return dir;
}

int hf_index(const uint8_t* data, size_t size) {
  const fs::path& dir = fuzz_hf_folder();
  std::ofstream(dir / "model.safetensors.index.json", std::ios::binary)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    const std::unique_ptr<ModelReader> m = hf_model_open(dir.string());
    std::vector<float> buf(64);
    for (const HfTensor& t : hf_tensors(m->config())) m->read_f32(t, buf.data());
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

}  // namespace agoq::fuzz

// A GGUF file as a model source (formats/model_source.h): architecture `llama`, its config from the llama.* keys,
// its tensors under llama.cpp's names dequantized to fp32 in HF layout (q and k rows turned back from llama.cpp's
// rotary order), its tokenizer from the tokenizer.ggml.* keys. docs/checkpoint-format.md, "GGUF".
#include <algorithm>
#include <map>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_quants.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"

namespace agoq {
namespace {

constexpr size_t kChunkBytes = 4u << 20;  // tensor bytes read at a time

// llama.cpp's name of an HF tensor.
std::string gguf_tensor_name(const HfTensor& t) {
  const std::string blk = "blk." + std::to_string(t.layer) + ".";
  switch (t.role) {
    case ModelTensor::embed: return "token_embd.weight";
    case ModelTensor::attn_norm: return blk + "attn_norm.weight";
    case ModelTensor::wq: return blk + "attn_q.weight";
    case ModelTensor::wk: return blk + "attn_k.weight";
    case ModelTensor::wv: return blk + "attn_v.weight";
    case ModelTensor::wo: return blk + "attn_output.weight";
    case ModelTensor::mlp_norm: return blk + "ffn_norm.weight";
    case ModelTensor::w_gate: return blk + "ffn_gate.weight";
    case ModelTensor::w_up: return blk + "ffn_up.weight";
    case ModelTensor::w_down: return blk + "ffn_down.weight";
    case ModelTensor::final_norm: return "output_norm.weight";
    case ModelTensor::lm_head: return "output.weight";
  }
  return "";
}

// The HF row of row g of a q or k weight as llama.cpp's converter stores it: it permutes each head's rows from
// (2, hd/2) to (hd/2, 2) so that rotary pairs are adjacent; this is the inverse.
int64_t rope_row_hf(int64_t g, int64_t hd) {
  const int64_t h = g / hd, r = g % hd;
  return h * hd + (r % 2) * (hd / 2) + r / 2;
}

// A size of the model; below `min` (a count of heads, layers, ... that others are divided by) is refused naming it.
int config_int(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt,
               int64_t min = 0) {
  const GgufValue* v = f.find(key);
  if (v && v->type == GgufValueType::array)
    f.fail_here(key, " is an array (per-layer values), which agoq does not compute");
  std::optional<int64_t> x = f.get_int(key);
  if (!x) x = fallback;
  if (!x) f.fail_here("metadata '", key, "' is missing");
  if (*x < 0 || *x > (1ll << 30)) f.fail_here("metadata '", key, "' = ", *x, " is out of range");
  if (*x < min) f.fail_here("metadata '", key, "' = ", *x, " must be >= ", min);
  return int(*x);
}

float config_float(const GgufFile& f, const std::string& key, std::optional<float> fallback = std::nullopt) {
  const std::optional<double> x = f.get_float(key);
  if (!x && !fallback) f.fail_here("metadata '", key, "' is missing");
  return x ? float(*x) : *fallback;
}

RopeScaling rope_scaling_read(const GgufFile& f) {
  RopeScaling r;
  const std::string type = f.get_string("llama.rope.scaling.type").value_or("none");
  const std::optional<double> factor = f.get_float("llama.rope.scaling.factor");
  const std::optional<double> old_linear = f.get_float("llama.rope.scale_linear");  // the key before scaling.type
  if (type == "none" && old_linear && *old_linear != 1.0) {
    r.type = RopeScaling::Type::linear, r.factor = float(*old_linear);
  } else if (type == "linear") {
    if (!factor) f.fail_here("llama.rope.scaling.type is linear but llama.rope.scaling.factor is missing");
    r.type = RopeScaling::Type::linear, r.factor = float(*factor);
  } else if (type != "none") {
    f.fail_here("llama.rope.scaling.type '", type, "' is not supported (agoq computes none and linear)");
  }
  if (r.type == RopeScaling::Type::linear && !(r.factor > 0))
    f.fail_here("llama.rope.scaling.factor ", r.factor, " must be positive");
  return r;
}

// The sizes in the order they depend on each other (the head dim on head_count, ...), so that a bad value is named
// itself, not as a mismatch of a value derived from it.
LlamaConfig config_read(const GgufFile& f) {
  LlamaConfig c;
  c.max_seq_len = config_int(f, "llama.context_length", std::nullopt, 1);
  c.dim = config_int(f, "llama.embedding_length", std::nullopt, 1);
  c.n_layers = config_int(f, "llama.block_count", std::nullopt, 1);
  c.ffn_dim = config_int(f, "llama.feed_forward_length", std::nullopt, 1);
  c.n_heads = config_int(f, "llama.attention.head_count", std::nullopt, 1);
  c.n_kv_heads = config_int(f, "llama.attention.head_count_kv", c.n_heads, 1);
  c.rope_theta = config_float(f, "llama.rope.freq_base", 10000.0f);
  c.norm_eps = config_float(f, "llama.attention.layer_norm_rms_epsilon");
  c.rope_scaling = rope_scaling_read(f);
  const GgufTensorInfo* embd = f.tensor("token_embd.weight");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const int64_t vocab_guess = embd && embd->ne.size() == 2                     ? embd->ne[1]
                              : tokens && tokens->type == GgufValueType::array ? int64_t(tokens->count)
                                                                               : -1;
  c.vocab_size =
      config_int(f, "llama.vocab_size", vocab_guess >= 0 ? std::optional<int64_t>(vocab_guess) : std::nullopt);
  c.tie_embeddings = f.tensor("output.weight") == nullptr;
  if (c.dim % c.n_heads != 0)
    f.fail_here("llama.embedding_length ", c.dim, " is not a multiple of llama.attention.head_count ", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    f.fail_here("llama.attention.head_count ", c.n_heads, " is not a multiple of llama.attention.head_count_kv ",
                c.n_kv_heads);
  const int hd = c.dim / c.n_heads;
  for (const char* key : {"llama.rope.dimension_count", "llama.attention.key_length", "llama.attention.value_length"})
    if (f.find(key) && config_int(f, key) != hd)
      f.fail_here(key, " = ", config_int(f, key), " differs from the head dim ", hd,
                  " (embedding_length / head_count), which agoq computes");
  try {
    c.validate();
  } catch (const Error& e) {
    f.fail_here(e.what());
  }
  return c;
}

void model_kind_check(const GgufFile& f) {
  const std::optional<std::string> arch = f.get_string("general.architecture");
  if (!arch) f.fail_here("general.architecture is missing");
  if (*arch != "llama") f.fail_here("architecture '", *arch, "' is not supported (agoq computes llama)");
  if (f.get_int("llama.expert_count").value_or(0) > 0)
    f.fail_here("llama.expert_count = ", *f.get_int("llama.expert_count"),
                ": mixture-of-experts models are not supported");
  if (f.tensor("rope_freqs.weight"))
    f.fail_here(
        "tensor 'rope_freqs.weight' (llama3-style per-frequency rope factors) is not supported: agoq "
        "cannot reproduce it exactly from a GGUF; import the Hugging Face model instead");
}

class GgufModelReader final : public ModelReader {
 public:
  explicit GgufModelReader(const std::string& path) : file_(GgufFile::open(path)) {
    path_ = path;
    model_kind_check(file_);
    config_ = config_read(file_);
    tensors_map();
  }

  ModelSourceKind kind() const override { return ModelSourceKind::gguf; }

  std::vector<std::pair<std::string, size_t>> storage_types() const override {
    std::map<std::string, size_t> n;
    for (const GgufTensorInfo& t : file_.tensors()) ++n[ggml_type_name(t.type)];
    return {n.begin(), n.end()};
  }

  void read_f32(const HfTensor& t, float* dst) const override {
    const auto it = by_hf_.find(t.name);
    if (it == by_hf_.end()) file_.fail_here("'", t.name, "' is not a tensor of this model");
    const GgufTensorInfo& g = *it->second;
    if (g.shape() != t.shape)
      file_.fail_here("tensor '", g.name, "' is ", safetensors_shape_str(g.shape()), ", the caller's ",
                      safetensors_shape_str(t.shape));
    const int64_t heads = t.role == ModelTensor::wq   ? config_.n_heads
                          : t.role == ModelTensor::wk ? config_.n_kv_heads
                                                      : 0;
    rows_read(g, dst, heads);
  }

  Tokenizer tokenizer() const override;

 private:
  GgufFile file_;
  std::map<std::string, const GgufTensorInfo*> by_hf_;  // HF name -> the file's tensor

  void tensors_map();
  void rows_read(const GgufTensorInfo& g, float* dst, int64_t heads) const;
};

// Every tensor of the config present with its shape and a type agoq decodes; nothing else in the file.
void GgufModelReader::tensors_map() {
  std::map<std::string, const HfTensor*> wanted;
  const std::vector<HfTensor> all = hf_tensors(config_);
  for (const HfTensor& t : all) wanted[gguf_tensor_name(t)] = &t;
  for (const GgufTensorInfo& g : file_.tensors())
    if (!wanted.count(g.name))
      file_.fail_here("tensor '", g.name, "' is not part of a llama model agoq computes (no biases, experts or ",
                      "extra weights)");
  for (const auto& [name, t] : wanted) {
    const GgufTensorInfo* g = file_.tensor(name);
    if (!g) file_.fail_here("tensor '", name, "' (", t->name, ") is missing");
    if (g->shape() != t->shape)
      file_.fail_here("tensor '", name, "' is ", safetensors_shape_str(g->shape()), " but the config makes it ",
                      safetensors_shape_str(t->shape));
    const GgmlTypeInfo* ti = ggml_type_info(g->type);
    if (!ti->dequantizable)
      file_.fail_here("tensor '", name, "' has type ", ti->name, ", which agoq does not read (it reads ",
                      ggml_types_supported(), ")");
    by_hf_[t->name] = g;
  }
}

// Rows of the tensor, a few MiB at a time, each decoded straight into its HF row of dst (heads > 0: a q or k weight
// of that many heads, rows turned back from the rotary order).
void GgufModelReader::rows_read(const GgufTensorInfo& g, float* dst, int64_t heads) const {
  const GgmlTypeInfo& ti = *ggml_type_info(g.type);
  const uint64_t cols = g.ne.empty() ? 1 : uint64_t(g.ne[0]), rows = g.rows();
  const uint64_t row_bytes = cols / ti.block * ti.bytes;
  if (rows == 0 || row_bytes == 0) return;
  const int64_t hd = heads > 0 ? int64_t(rows) / heads : 0;
  const uint64_t chunk_rows = std::max<uint64_t>(1, kChunkBytes / row_bytes);
  std::vector<uint8_t> buf(size_t(std::min(rows, chunk_rows) * row_bytes));
  for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const uint64_t n = std::min(chunk_rows, rows - r0);
    file_.read(g, r0 * row_bytes, buf.data(), size_t(n * row_bytes));
    for (uint64_t i = 0; i < n; ++i) {
      const int64_t r = int64_t(r0 + i), out = heads > 0 ? rope_row_hf(r, hd) : r;
      gguf_dequantize(g.type, buf.data() + i * row_bytes, dst + uint64_t(out) * cols, size_t(cols));
    }
  }
}

// ---- tokenizer ----

int token_id_read(const GgufFile& f, const char* key, size_t n_tokens) {
  const std::optional<int64_t> id = f.get_int(key);
  if (!id) return -1;
  if (*id < 0 || uint64_t(*id) >= n_tokens)
    f.fail_here("metadata '", key, "' = ", *id, " is not a token id (", n_tokens, " tokens)");
  return int(*id);
}

std::vector<int32_t> token_types_read(const GgufFile& f, size_t n_tokens) {
  std::vector<int32_t> types = f.get_ints("tokenizer.ggml.token_type").value_or(std::vector<int32_t>(n_tokens, 1));
  if (types.size() != n_tokens)
    f.fail_here("tokenizer.ggml.token_type has ", types.size(), " entries for ", n_tokens, " tokens");
  return types;
}

// The split regexes (and ignore_merges) the pre-tokenizer name stands for (data/tokenizer.h).
void bpe_pre_apply(const GgufFile& f, BpeSpec& s, const std::string& pre) {
  try {
    s.split_regexes = bpe_split_regexes_for_gguf_pre(pre);
    s.ignore_merges = bpe_ignore_merges_for_gguf_pre(pre);
  } catch (const Error& e) {
    f.fail_here(e.what());
  }
}

Tokenizer bpe_read(const GgufFile& f, const std::vector<std::string>& tokens) {
  BpeSpec s;
  s.vocab = tokens;
  const std::optional<std::vector<std::string>> merges = f.get_strings("tokenizer.ggml.merges");
  if (!merges) f.fail_here("tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)");
  s.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      f.fail_here("tokenizer.ggml.merges entry ", i, " ('", m, "') is not two tokens separated by a space");
    s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  const std::vector<int32_t> types = token_types_read(f, tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == 3 || types[id] == 4)  // control, user-defined: matched in the text before splitting
      s.added.push_back({int(id), tokens[id], /*special=*/types[id] == 3});
  const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  bpe_pre_apply(f, s, pre);
  s.bos_id = token_id_read(f, "tokenizer.ggml.bos_token_id", tokens.size());
  s.eos_id = token_id_read(f, "tokenizer.ggml.eos_token_id", tokens.size());
  s.unk_id = token_id_read(f, "tokenizer.ggml.unknown_token_id", tokens.size());
  s.pad_id = token_id_read(f, "tokenizer.ggml.padding_token_id", tokens.size());
  s.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  s.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  return Tokenizer::from_bpe(std::move(s), "GGUF file " + f.path());
}

Tokenizer sentencepiece_read(const GgufFile& f, const std::vector<std::string>& tokens) {
  SentencePieceVocab v;
  v.pieces = tokens;
  v.scores = f.get_floats("tokenizer.ggml.scores").value_or(std::vector<float>(tokens.size(), 0.0f));
  if (v.scores.size() != tokens.size())
    f.fail_here("tokenizer.ggml.scores has ", v.scores.size(), " entries for ", tokens.size(), " tokens");
  v.types = token_types_read(f, tokens.size());
  v.bos_id = token_id_read(f, "tokenizer.ggml.bos_token_id", tokens.size());
  v.eos_id = token_id_read(f, "tokenizer.ggml.eos_token_id", tokens.size());
  v.unk_id = token_id_read(f, "tokenizer.ggml.unknown_token_id", tokens.size());
  v.pad_id = token_id_read(f, "tokenizer.ggml.padding_token_id", tokens.size());
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_dummy_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return Tokenizer::from_sentencepiece_vocab(v, "GGUF file " + f.path());
}

Tokenizer GgufModelReader::tokenizer() const {
  const std::optional<std::string> model = file_.get_string("tokenizer.ggml.model");
  if (!model) file_.fail_here("no tokenizer (tokenizer.ggml.model is missing)");
  const std::optional<std::vector<std::string>> tokens = file_.get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) file_.fail_here("tokenizer.ggml.tokens is missing or empty");
  if (*model == "gpt2") return bpe_read(file_, *tokens);
  if (*model == "llama") return sentencepiece_read(file_, *tokens);
  file_.fail_here("tokenizer.ggml.model '", *model, "' is not supported (agoq reads gpt2 and llama)");
}

}  // namespace

std::unique_ptr<ModelReader> gguf_model_open(const std::string& path) {
  return std::make_unique<GgufModelReader>(path);
}

}  // namespace agoq

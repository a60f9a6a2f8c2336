// A GGUF file as a model source (gguf_model_open): a random transformers LlamaForCausalLM (GQA, untied and tied)
// written by gguf-py the way llama.cpp's converter writes it (tests/formats/gguf_reference.py model) reads back as
// the HF model: the config, every tensor bit for bit in HF layout (F32; F16 as the HF value rounded to fp16; Q8_0 as
// gguf-py dequantizes it), the tokenizer; and each model agoq does not compute is refused in one line naming it.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "quant/half.h"
#include "tests/common/python_ref.h"
#include "tests/common/temp_path.h"
#include "tests/formats/formats_test_util.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

const fs::path& model_dir() {
  static const GgufRefDir dir("model");
  return dir.path;
}
std::string model_file(const std::string& name) { return (model_dir() / name).string(); }

float f16_round(float x) { return f16_to_f32(_cvtss_sh(x, 0)); }  // round to nearest even, as numpy

// Every tensor of the GGUF equals the reference safetensors' (HF names), rounded to fp16 for 2-D tensors when f16.
void expect_tensors_equal(const std::string& gguf, const std::string& safetensors, bool f16) {
  const std::unique_ptr<ModelReader> r = gguf_model_open(gguf);
  const SafetensorsFile st = SafetensorsFile::open(safetensors);
  size_t checked = 0;
  for (const HfTensor& t : hf_tensors(r->config())) {
    const size_t n = size_t(safetensors_numel(t.shape));
    std::vector<float> got(n), want(n);
    r->read_f32(t, got.data());
    st.read_f32(t.name, want.data(), t.shape);
    if (f16 && t.shape.size() > 1)
      for (float& x : want) x = f16_round(x);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << gguf << ": " << t.name << " differs in " << differ << " of " << n << " values";
    ++checked;
  }
  EXPECT_EQ(checked, st.names().size()) << "every tensor of " << safetensors;
}

LlamaConfig hf_config(const std::string& dir) {
  return config_from_hf_json(json_object_read_file(dir + "/config.json", "model config"));
}

TEST(GgufModel, UntiedF32EqualsHfBitForBit) {
  const std::string hf = model_file("hf");
  expect_tensors_equal(model_file("untied-F32.gguf"), hf + "/model.safetensors", false);
  const std::unique_ptr<ModelReader> r = gguf_model_open(model_file("untied-F32.gguf"));
  EXPECT_EQ(r->kind(), ModelSourceKind::gguf);
  EXPECT_EQ(config_diff(r->config(), hf_config(hf)), "");
  EXPECT_EQ(r->config().n_kv_heads, 2);
  EXPECT_FALSE(r->config().tie_embeddings);
  EXPECT_EQ(r->config().rope_theta, 500000.0f);
}

TEST(GgufModel, TiedF32EqualsHfBitForBit) {
  const std::string hf = model_file("hf_tied");
  expect_tensors_equal(model_file("tied-F32.gguf"), hf + "/model.safetensors", false);
  const std::unique_ptr<ModelReader> r = gguf_model_open(model_file("tied-F32.gguf"));
  EXPECT_TRUE(r->config().tie_embeddings);
  EXPECT_EQ(config_diff(r->config(), hf_config(hf)), "");
}

TEST(GgufModel, F16EqualsHfRoundedToF16) {
  expect_tensors_equal(model_file("untied-F16.gguf"), model_file("hf") + "/model.safetensors", true);
  expect_tensors_equal(model_file("tied-F16.gguf"), model_file("hf_tied") + "/model.safetensors", true);
  const std::unique_ptr<ModelReader> r = gguf_model_open(model_file("untied-F16.gguf"));
  const auto types = r->storage_types();  // 2 layers x 7 matrices + embedding + output; 2 x 2 norms + final
  EXPECT_EQ(types, (std::vector<std::pair<std::string, size_t>>{{"F16", 16}, {"F32", 5}}));
}

TEST(GgufModel, Q8_0EqualsGgufPyInHfOrder) {
  expect_tensors_equal(model_file("untied-Q8_0.gguf"), model_file("untied-Q8_0.safetensors"), false);
}

TEST(GgufModel, TokenizerEqualsTokenizers) {
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(model_file("tokens.json")));
  const Tokenizer tok = gguf_model_open(model_file("untied-F32.gguf"))->tokenizer();
  EXPECT_EQ(tok.kind(), TokenizerKind::byte_bpe);
  EXPECT_EQ(tok.vocab_size(), 320);
  const std::string text = ref["text"].get<std::string>();
  EXPECT_EQ(tok.encode(text), ref["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.bos_id(), tok.piece_id("<|endoftext|>"));
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.identity(), Tokenizer::load(model_file("hf")).identity()) << "the same tokenizer as tokenizer.json";
}

TEST(GgufModel, SentencePieceTokenizerEqualsSentencepiece) {
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(model_file("tokens-spm.json")));
  const Tokenizer tok = gguf_model_open(model_file("spm.gguf"))->tokenizer();
  EXPECT_EQ(tok.kind(), TokenizerKind::sentencepiece);
  EXPECT_EQ(tok.vocab_size(), 300);
  const std::string text = ref["text"].get<std::string>();
  const std::vector<int32_t> got = tok.encode(text), want = ref["ids"].get<std::vector<int32_t>>();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  EXPECT_EQ(got, want) << "first difference at id " << i << ": " << (i < got.size() ? tok.piece(got[i]) : "(end)")
                       << " vs " << (i < want.size() ? tok.piece(want[i]) : "(end)");
  EXPECT_EQ(tok.bos_id(), ref["bos"].get<int>());
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.encode_for_model("a")[0], tok.bos_id());
}

// Opening `file` fails with one line that names the file and contains `part`.
void expect_refused(const std::string& file, const std::string& part) {
  try {
    (void)gguf_model_open(file);
    ADD_FAILURE() << file << " opened";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_NE(m.find(file), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(GgufModel, RefusesWhatAgoqDoesNotCompute) {
  expect_refused(model_file("bad-arch.gguf"), "architecture 'qwen2' is not supported");
  expect_refused(model_file("bad-missing.gguf"),
                 "tensor 'blk.1.ffn_up.weight' (model.layers.1.mlp.up_proj.weight) is missing");
  expect_refused(model_file("bad-shape.gguf"),
                 "tensor 'blk.0.attn_k.weight' is [30, 64] but the config makes it [32, 64]");
  expect_refused(model_file("bad-type.gguf"), "tensor 'blk.0.ffn_norm.weight' has type F64");
  expect_refused(model_file("bad-bias.gguf"), "tensor 'blk.0.attn_q.bias' is not part of a llama model");
  expect_refused(model_file("bad-rope_freqs.gguf"), "rope_freqs.weight");
  expect_refused(model_file("bad-rope_scaling.gguf"), "llama.rope.scaling.type 'yarn' is not supported");
  expect_refused(model_file("bad-rope_dim.gguf"), "llama.attention.key_length = 8 differs from the head dim 16");
  try {
    (void)gguf_model_open(model_file("bad-tokenizer.gguf"))->tokenizer();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'bert' is not supported"), std::string::npos)
        << e.what();
  }
}

TEST(GgufModel, RefusesDamagedFiles) {
  std::ifstream in(model_file("untied-F32.gguf"), std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path p = test_temp_path("gguf_damaged.gguf");
  auto write = [&](const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
    return p.string();
  };
  expect_refused(write(whole.substr(0, whole.size() - 100)), "lies beyond the end of the file");
  expect_refused(write(whole.substr(0, 5000)), "truncated");
  std::string v1 = whole;
  v1[4] = 1;
  expect_refused(write(v1), "GGUF version 1 is not supported");
  std::string magic = whole;
  magic.replace(0, 4, "GGML");
  expect_refused(write(magic), "not a GGUF file");
  fs::remove(p);
}

TEST(GgufModel, ReadRefusesAForeignTensor) {
  const std::unique_ptr<ModelReader> r = gguf_model_open(model_file("tied-F32.gguf"));
  HfTensor t{"lm_head.weight", {320, 64}, ModelTensor::lm_head};
  std::vector<float> buf(320 * 64);
  EXPECT_THROW(r->read_f32(t, buf.data()), Error);
  t = hf_tensors(r->config())[1];
  t.shape = {1, 64};
  EXPECT_THROW(r->read_f32(t, buf.data()), Error);
}

}  // namespace
}  // namespace agoq

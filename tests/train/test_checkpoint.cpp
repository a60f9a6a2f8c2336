#include <gtest/gtest.h>
#include <unistd.h>

#include <xxhash.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "../common/expect_error.h"
#include "core/error.h"
#include "core/rng.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "tests/common/bits_equal.h"
#include "tests/train/checkpoint_test_util.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace ckpt_test;

// A safetensors file from a raw header text (padded by nothing) and a data section.
void file_write_raw(const std::string& p, const std::string& header, const std::string& data) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = char(uint64_t(header.size()) >> (8 * i));
  file_write(p, len + header + data);
}

// ---------------------------------------------------------------- safetensors

TEST(Safetensors, RoundTripIsBitExact) {
  TmpDir d;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f = {0.0f, -0.0f, 1.5f, -inf, inf, std::numeric_limits<float>::denorm_min(), 3.14159f};
  uint32_t nan_bits = 0x7fc12345u;  // a NaN with a payload must survive too
  f.push_back(0);
  std::memcpy(&f.back(), &nan_bits, 4);
  const std::vector<int32_t> i32 = {-7, 0, 1 << 30, 42, 5, 6};
  const std::vector<uint8_t> u8 = {1, 2, 3};
  const float scalar = 2.5f;

  SafetensorsWriter w;
  w.add_f32("f", {2, 4}, f.data());
  w.add("ints", "I32", {2, 3}, i32.data(), i32.size() * 4);
  w.add("bytes", "U8", {3}, u8.data(), 3);
  w.add_f32("scalar", {}, &scalar);
  w.add_f32("empty", {0, 5}, nullptr);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "héllo \"quoted\"");
  w.write(d / "a.safetensors");
  EXPECT_FALSE(fs::exists(d / "a.safetensors.tmp"));

  const std::string raw = file_read(d / "a.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  EXPECT_EQ(raw.size(), 8 + n + f.size() * 4 + i32.size() * 4 + 3 + 4);

  const auto st = SafetensorsFile::open(d / "a.safetensors");
  EXPECT_EQ(st.names(), (std::vector<std::string>{"bytes", "empty", "f", "ints", "scalar"}));
  EXPECT_EQ(st.metadata_value("note"), "héllo \"quoted\"");
  EXPECT_EQ(st.metadata_value("absent"), "");
  std::vector<float> f2(f.size());
  st.read_f32("f", f2.data(), {2, 4});
  EXPECT_TRUE(bits_equal(f.data(), f2.data(), f.size() * 4));
  EXPECT_EQ(st.get("ints").dtype, "I32");
  EXPECT_EQ(st.get("ints").shape, (std::vector<int64_t>{2, 3}));
  std::vector<int32_t> i2(6);
  st.read_raw("ints", i2.data(), 24);
  EXPECT_EQ(i2, i32);
  std::vector<uint8_t> u2(3);
  st.read_raw("bytes", u2.data(), 3);
  EXPECT_EQ(u2, u8);
  float s2 = 0;
  st.read_f32("scalar", &s2, {});
  EXPECT_EQ(s2, scalar);
  EXPECT_EQ(st.get("empty").bytes, 0u);
  st.read_f32("empty", nullptr, {0, 5});
}

TEST(Safetensors, HeaderFollowsTheSpec) {
  TmpDir d;
  const std::vector<float> a = {1, 2, 3}, b = {4, 5};
  SafetensorsWriter w;
  w.add_f32("a", {3}, a.data());
  w.add_f32("b", {1, 2}, b.data());
  w.set_metadata("k", "v");
  w.write(d / "h.safetensors");
  const std::string raw = file_read(d / "h.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  const json h = json::parse(raw.substr(8, n));
  // agoq's metadata: each tensor's XXH3-64, checked on every read.
  char sum_a[17], sum_b[17];
  std::snprintf(sum_a, sizeof sum_a, "%016llx", static_cast<unsigned long long>(XXH3_64bits(a.data(), 12)));
  std::snprintf(sum_b, sizeof sum_b, "%016llx", static_cast<unsigned long long>(XXH3_64bits(b.data(), 8)));
  EXPECT_EQ(h["__metadata__"], (json{{"k", "v"}, {"agoq.xxh3", json{{"a", sum_a}, {"b", sum_b}}.dump()}}));
  EXPECT_EQ(h["a"], (json{{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}));
  EXPECT_EQ(h["b"], (json{{"dtype", "F32"}, {"shape", {1, 2}}, {"data_offsets", {12, 20}}}));
  for (size_t i = raw.substr(8, n).find_last_not_of(' ') + 1; i < n; ++i) EXPECT_EQ(raw[8 + i], ' ');
}

TEST(Safetensors, WidensF16AndBF16InPlace) {
  TmpDir d;
  // 1.0, -2.0, 0.5, 65504 (max half), smallest subnormal half, -0
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000};
  const std::vector<uint16_t> bf = {0x3f80, 0xc000, 0x4049};  // 1, -2, 3.140625
  SafetensorsWriter w;
  w.add("h", "F16", {2, 3}, h.data(), 12);
  w.add("bf", "BF16", {3}, bf.data(), 6);
  w.add("i", "I64", {1}, "12345678", 8);
  w.write(d / "x.safetensors");
  const auto st = SafetensorsFile::open(d / "x.safetensors");
  std::vector<float> out(6, -1);
  st.read_f32("h", out.data(), {2, 3});
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, 0x1p-24f, -0.0f}));
  EXPECT_TRUE(std::signbit(out[5]));
  std::vector<float> out2(3);
  st.read_f32("bf", out2.data(), {3});
  EXPECT_EQ(out2, (std::vector<float>{1.0f, -2.0f, 3.140625f}));
  expect_error([&] { st.read_f32("i", out.data(), {1}); }, {"'i'", "I64"});
}

TEST(Safetensors, WriterRefusesBadInput) {
  const float x[4] = {};
  SafetensorsWriter w;
  expect_error([&] { w.add("a", "F32", {2, 3}, x, 16); }, {"'a'", "24 bytes"});
  expect_error([&] { w.add("a", "F99", {1}, x, 4); }, {"F99"});
  expect_error([&] { w.add("__metadata__", "F32", {1}, x, 4); }, {"invalid tensor name"});
  expect_error([&] { w.add("a", "F32", {-1}, x, 4); }, {"negative"});
  w.add_f32("a", {4}, x);
  expect_error([&] { w.add_f32("a", {4}, x); }, {"'a'", "twice"});
  expect_error([&] { w.write("/nonexistent_dir_agoq/x.safetensors"); }, {"cannot create"});
}

TEST(Safetensors, ReadF32ChecksTheShape) {
  TmpDir d;
  const std::vector<float> a(6, 1.0f);
  SafetensorsWriter w;
  w.add_f32("layer.w", {2, 3}, a.data());
  w.write(d / "s.safetensors");
  const auto st = SafetensorsFile::open(d / "s.safetensors");
  std::vector<float> out(6);
  expect_error([&] { st.read_f32("layer.w", out.data(), {3, 2}); }, {"'layer.w'", "[2, 3]", "[3, 2]"});
  expect_error([&] { st.read_f32("nope", out.data(), {2, 3}); }, {"no tensor named 'nope'", "s.safetensors"});
  expect_error([&] { st.read_raw("layer.w", out.data(), 8); }, {"24 bytes"});
}

TEST(Safetensors, EveryTruncationIsRefused) {
  TmpDir d;
  std::vector<float> a(64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i);
  SafetensorsWriter w;
  w.add_f32("a", {8, 8}, a.data());
  w.add_f32("b", {4}, a.data());
  w.write(d / "full.safetensors");
  const std::string raw = file_read(d / "full.safetensors");
  for (size_t cut :
       {size_t(0), size_t(3), size_t(8), size_t(9), size_t(20), raw.size() / 2, raw.size() - 300, raw.size() - 1}) {
    SCOPED_TRACE(cut);
    file_write(d / "cut.safetensors", raw.substr(0, cut));
    expect_error([&] { SafetensorsFile::open(d / "cut.safetensors"); }, {"cut.safetensors"});
  }
  file_write(d / "long.safetensors", raw + "x");  // trailing bytes are as suspect as missing ones
  expect_error([&] { SafetensorsFile::open(d / "long.safetensors"); }, {"tensors cover"});
}

TEST(Safetensors, BadHeadersAreRefusedWithTheReason) {
  TmpDir d;
  const std::string p = d / "bad.safetensors";
  const std::string data(24, '\0');
  auto check = [&](const std::string& header, const std::string& dat, std::initializer_list<std::string> parts) {
    file_write_raw(p, header, dat);
    expect_error([&] { SafetensorsFile::open(p); }, parts);
  };
  expect_error([&] { SafetensorsFile::open(d / "missing.safetensors"); }, {"missing.safetensors", "cannot open"});
  check("{not json", data, {"bad.safetensors", "not valid JSON"});
  check("[1, 2]", "", {"not a JSON object"});
  check(R"({"a": {"dtype": "Q4", "shape": [6], "data_offsets": [0, 24]}})", data, {"'a'", "unknown dtype 'Q4'"});
  check(R"({"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 48]}})", data, {"'a'", "out of range"});
  check(R"({"a": {"dtype": "F32", "shape": [6], "data_offsets": [8, 4]}})", data, {"'a'", "out of range"});
  check(R"({"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 24]}})", data, {"'a'", "F32[5]", "24 bytes"});
  check(R"({"a": {"dtype": "F32", "shape": [-6], "data_offsets": [0, 24]}})", data, {"'a'", "shape"});
  check(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
        data, {"overlaps"});
  check(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
        data, {"hole", "'b'"});
  check(R"({"a": {"dtype": "F32", "shape": [6]}})", data, {"'a'", "data_offsets"});
  check(R"({"a": {"shape": [6], "data_offsets": [0, 24]}})", data, {"'a'", "dtype"});
  check(R"({"a": 5})", data, {"'a'", "not an object"});
  check(R"({"__metadata__": {"k": 1}})", "", {"__metadata__", "'k'"});

  // Header length fields that do not describe the file.
  std::vector<float> a(6, 1.0f);
  SafetensorsWriter w;
  w.add_f32("a", {6}, a.data());
  w.write(p);
  std::string raw = file_read(p);
  for (uint64_t n : {uint64_t(raw.size()), uint64_t(1) << 62, ~uint64_t(0)}) {
    std::string r = raw;
    std::memcpy(r.data(), &n, 8);
    file_write(p, r);
    expect_error([&] { SafetensorsFile::open(p); }, {"bad.safetensors", "header length", "exceeds"});
  }
  std::string r = raw;
  r[0] = char(r[0] - 8);  // header shorter than its JSON
  file_write(p, r);
  expect_error([&] { SafetensorsFile::open(p); }, {"bad.safetensors"});
}

TEST(Safetensors, WriteReplacesAtomicallyAndIgnoresStaleTmp) {
  TmpDir d;
  const std::string p = d / "w.safetensors";
  file_write(p + ".tmp", "garbage from a crashed writer");
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  SafetensorsWriter w1;
  w1.add_f32("x", {2}, a.data());
  w1.write(p);
  SafetensorsWriter w2;
  w2.add_f32("x", {3}, b.data());
  w2.write(p);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  const auto st = SafetensorsFile::open(p);
  std::vector<float> out(3);
  st.read_f32("x", out.data(), {3});
  EXPECT_EQ(out, b);
}

// ---------------------------------------------------------------- config

TEST(CheckpointConfig, HfJsonUsesHfNamesAndRoundTrips) {
  for (bool tie : {false, true}) {
    const LlamaConfig c = tiny_config(tie);
    const json j = config_to_hf_json(c, 1, 2);
    EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_EQ(j["hidden_size"], 8);
    EXPECT_EQ(j["intermediate_size"], 12);
    EXPECT_EQ(j["num_hidden_layers"], 2);
    EXPECT_EQ(j["num_attention_heads"], 2);
    EXPECT_EQ(j["num_key_value_heads"], 1);
    EXPECT_EQ(j["head_dim"], 4);
    EXPECT_EQ(j["vocab_size"], 11);
    EXPECT_EQ(j["max_position_embeddings"], 16);
    EXPECT_EQ(j["rms_norm_eps"].dump(), "1e-06");  // the float's shortest decimal, not 9.99999997e-07
    EXPECT_EQ(j["rope_theta"].get<double>(), 500000.0);
    EXPECT_EQ(j["tie_word_embeddings"], tie);
    EXPECT_EQ(j["hidden_act"], "silu");
    EXPECT_EQ(j["torch_dtype"], "float32");
    EXPECT_EQ(j["attention_bias"], false);
    EXPECT_EQ(j["mlp_bias"], false);
    EXPECT_EQ(j["bos_token_id"], 1);
    EXPECT_EQ(j["eos_token_id"], 2);
    EXPECT_FALSE(config_to_hf_json(c).contains("bos_token_id"));
    const LlamaConfig back = config_from_hf_json(json::parse(j.dump()));
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.dim, c.dim);
    EXPECT_EQ(back.n_layers, c.n_layers);
    EXPECT_EQ(back.n_heads, c.n_heads);
    EXPECT_EQ(back.n_kv_heads, c.n_kv_heads);
    EXPECT_EQ(back.ffn_dim, c.ffn_dim);
    EXPECT_EQ(back.max_seq_len, c.max_seq_len);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
    EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);
  }
}

TEST(CheckpointConfig, ParsingNamesMissingAndUnsupportedKeys) {
  const json full = config_to_hf_json(tiny_config(false));
  json j = full;
  j.erase("hidden_size");
  j.erase("rms_norm_eps");
  expect_error([&] { config_from_hf_json(j); }, {"missing", "hidden_size", "rms_norm_eps"});
  expect_error([&] { config_from_hf_json(json::array()); }, {"not an object"});
  // Optional keys fall back to Hugging Face's defaults.
  j = full;
  for (const char* k : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "head_dim", "model_type"})
    j.erase(k);
  const LlamaConfig c = config_from_hf_json(j);
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tie_embeddings);
  auto with = [&](const char* k, json v) {
    json x = full;
    x[k] = std::move(v);
    return x;
  };
  expect_error([&] { config_from_hf_json(with("hidden_act", "gelu")); }, {"hidden_act", "not supported"});
  expect_error([&] { config_from_hf_json(with("attention_bias", true)); }, {"attention_bias"});
  expect_error([&] { config_from_hf_json(with("mlp_bias", true)); }, {"mlp_bias"});
  expect_error([&] { config_from_hf_json(with("rope_scaling", {{"type", "linear"}})); }, {"rope_scaling.factor"});
  expect_error(
      [&] {
    config_from_hf_json(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}));
      },
      {"rope_scaling.rope_type", "dynamic", "not supported"});
  expect_error([&] { config_from_hf_json(with("model_type", "gemma")); }, {"model_type"});
  json mistral = with("model_type", "mistral");
  mistral["architectures"] = {"MistralForCausalLM"};
  EXPECT_EQ(config_from_hf_json(mistral).sliding_window, 4096);  // MistralConfig's default
  const LlamaConfig l3 = config_from_hf_json(with("rope_scaling", {{"rope_type", "llama3"},
                                                                   {"factor", 32.0},
                                                                   {"low_freq_factor", 1.0},
                                                                   {"high_freq_factor", 4.0},
                                                                   {"original_max_position_embeddings", 8192}}));
  EXPECT_EQ(l3.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(config_from_hf_json(config_to_hf_json(l3)).rope_scaling, l3.rope_scaling);  // written as read
  expect_error([&] { config_from_hf_json(with("head_dim", 8)); }, {"head_dim"});
  expect_error([&] { config_from_hf_json(with("hidden_size", "8")); }, {"hidden_size", "integer"});
  expect_error([&] { config_from_hf_json(with("rms_norm_eps", "x")); }, {"rms_norm_eps", "number"});
  expect_error([&] { config_from_hf_json(with("num_attention_heads", 3)); }, {"n_heads"});  // validate()
  expect_error([&] { config_from_hf_json(with("hidden_size", 1ll << 40)); }, {"hidden_size", "out of range"});
}

// transformers 5 writes RoPE as rope_parameters (with rope_theta inside) instead of rope_scaling and rope_theta: read
// as transformers reads it, never ignored (a Llama 3 config would load as theta 10000 without its scaling).
TEST(CheckpointConfig, RopeParametersAreReadAsTransformers5ReadsThem) {
  json v5 = config_to_hf_json(tiny_config(false));
  v5.erase("rope_scaling"), v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "llama3"},
                           {"rope_theta", 500000.0},
                           {"factor", 32.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}};
  const LlamaConfig c = config_from_hf_json(v5);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c.rope_scaling.original_max_positions, c.max_seq_len);  // absent: max_position_embeddings
  v5["original_max_position_embeddings"] = 64;                      // the top-level key comes first
  EXPECT_EQ(config_from_hf_json(v5).rope_scaling.original_max_positions, 64);
  v5["rope_parameters"] = {{"rope_theta", 123.0}};  // no type: "default"
  EXPECT_EQ(config_from_hf_json(v5).rope_theta, 123.0f);
  EXPECT_EQ(config_from_hf_json(v5).rope_scaling.type, RopeScaling::Type::none);
  v5["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};  // the 4.x key, where given, is the one read
  EXPECT_EQ(config_from_hf_json(v5).rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_EQ(config_from_hf_json(v5).rope_theta, 10000.0f);  // and its rope_theta: absent here, the default
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 10000.0}};
  expect_error([&] { config_from_hf_json(v5); }, {"rope_parameters.rope_type = \"yarn\" is not supported"});
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  expect_error([&] { config_from_hf_json(v5); }, {"rope_parameters.partial_rotary_factor = 0.5 is not supported"});
  json top = config_to_hf_json(tiny_config(false));  // rope_scaling null, no rope_parameters: the top-level key counts
  top["partial_rotary_factor"] = 0.5;
  expect_error([&] { config_from_hf_json(top); }, {"LlamaConfig partial_rotary_factor = 0.5 is not supported"});
}

TEST(CheckpointConfig, ParamNamesAreHfNamesInOrder) {
  const LlamaConfig c = tiny_config(false);
  const auto names = hf_tensors(c);
  ASSERT_EQ(names.size(), 1 + 9 * 2 + 2u);
  EXPECT_EQ(names[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(names[0].shape, (std::vector<int64_t>{11, 8}));
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layer1 = {
      {"model.layers.1.input_layernorm.weight", {8}},     {"model.layers.1.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.1.self_attn.k_proj.weight", {4, 8}}, {"model.layers.1.self_attn.v_proj.weight", {4, 8}},
      {"model.layers.1.self_attn.o_proj.weight", {8, 8}}, {"model.layers.1.post_attention_layernorm.weight", {8}},
      {"model.layers.1.mlp.gate_proj.weight", {12, 8}},   {"model.layers.1.mlp.up_proj.weight", {12, 8}},
      {"model.layers.1.mlp.down_proj.weight", {8, 12}}};
  for (size_t i = 0; i < layer1.size(); ++i) {
    EXPECT_EQ(names[10 + i].name, layer1[i].first);
    EXPECT_EQ(names[10 + i].shape, layer1[i].second);
  }
  EXPECT_EQ(names[19].name, "model.norm.weight");
  EXPECT_EQ(names[20].name, "lm_head.weight");
  EXPECT_EQ(names[20].shape, (std::vector<int64_t>{11, 8}));
  for (bool tie : {false, true}) {
    size_t total = 0;
    for (const HfTensor& t : hf_tensors(tiny_config(tie))) total += size_t(safetensors_numel(t.shape));
    EXPECT_EQ(total, tiny_config(tie).param_count());
  }
  EXPECT_EQ(hf_tensors(tiny_config(true)).back().name, "model.norm.weight");
}

// ---------------------------------------------------------------- checkpoints

TEST(Checkpoint, RoundTripIsBitExact) {
  for (bool tie : {false, true}) {
    TmpDir d;
    const std::string dir = d / "ck";
    FakeModel m(tiny_config(tie), 1);
    m.params[0][3] = -0.0f;
    save(dir, m, 42);
    for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer.json"})
      EXPECT_TRUE(fs::exists(d / ("ck/" + std::string(f)))) << f;
    EXPECT_FALSE(fs::exists(d / "ck/model.safetensors.tmp"));

    const CheckpointMeta info = checkpoint_inspect(dir);
    EXPECT_EQ(info.step, 42);
    EXPECT_EQ(info.config.tie_embeddings, tie);
    EXPECT_EQ(info.trainer["data_pos"], 294);
    EXPECT_EQ(info.optimizer_names.size(), m.optimizer.size());

    FakeModel back(info.config, 99);
    back.zero();
    const CheckpointMeta meta = checkpoint_load(dir, info.config, back.weights, back.optimizer);
    EXPECT_EQ(meta.step, 42);
    EXPECT_EQ(meta.trainer["lr"], 0.001);
    for (size_t i = 0; i < m.params.size(); ++i) {
      EXPECT_TRUE(bits_equal(m.params[i].data(), back.params[i].data(), m.params[i].size() * 4)) << i;
      EXPECT_TRUE(bits_equal(m.moments[i].data(), back.moments[i].data(), m.moments[i].size() * 4)) << i;
    }
    // Weights only (e.g. evaluation or fine-tuning) skips the optimizer state.
    FakeModel w(info.config, 5);
    checkpoint_load(dir, info.config, w.weights, {});
    EXPECT_EQ(w.params, m.params);

    const auto st = SafetensorsFile::open(d / "ck/model.safetensors");
    EXPECT_EQ(st.has("lm_head.weight"), !tie);
    EXPECT_EQ(st.metadata_value("format"), "pt");  // transformers requires it
    EXPECT_EQ(st.get("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{4, 8}));
    EXPECT_EQ(json::parse(file_read(d / "ck/config.json")), config_to_hf_json(tiny_config(tie)));
  }
}

TEST(Checkpoint, SaveOverAnExistingCheckpointReplacesIt) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel a(tiny_config(false), 1), b(tiny_config(false), 2);
  save(dir, a, 10);
  save(dir, b, 20);
  FakeModel back(tiny_config(false), 3);
  EXPECT_EQ(checkpoint_load(dir, back.config, back.weights, back.optimizer).step, 20);
  EXPECT_EQ(back.params, b.params);
  EXPECT_EQ(back.moments, b.moments);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

TEST(Checkpoint, LeftoverTmpFilesDoNotBreakLoadingOrSaving) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  save(dir, m, 5);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json", "trainer.json"})
    file_write(dir + "/" + f + ".tmp", "half a file from a crashed save");
  FakeModel back(tiny_config(false), 2);
  checkpoint_load(dir, back.config, back.weights, back.optimizer);
  EXPECT_EQ(back.params, m.params);
  save(dir, m, 6);
  EXPECT_EQ(checkpoint_inspect(dir).step, 6);
}

TEST(Checkpoint, InterruptedSavesAreRefused) {
  TmpDir d;
  const std::string a = d / "a", b = d / "b";
  FakeModel ma(tiny_config(false), 1), mb(tiny_config(false), 2);
  save(a, ma, 100);
  save(b, mb, 200);
  FakeModel back(tiny_config(false), 3);
  auto load = [&] { checkpoint_load(a, back.config, back.weights, back.optimizer); };
  // A crash after the data files were renamed but before the marker: files from a newer save, marker from none.
  fs::copy_file(b + "/model.safetensors", a + "/model.safetensors", fs::copy_options::overwrite_existing);
  expect_error(load, {"model.safetensors", "interrupted"});
  fs::copy_file(b + "/optimizer.safetensors", a + "/optimizer.safetensors", fs::copy_options::overwrite_existing);
  fs::copy_file(b + "/config.json", a + "/config.json", fs::copy_options::overwrite_existing);
  expect_error(load, {"model.safetensors", "interrupted"});
  fs::remove(a + "/trainer.json");  // the save removes the old marker before renaming
  expect_error(load, {"trainer.json missing"});
  fs::copy_file(b + "/trainer.json", a + "/trainer.json");  // ...and renames the new one last: complete again
  load();
  EXPECT_EQ(back.params, mb.params);

  // A config.json from another save (e.g. different rope_theta, same shapes) is caught too.
  LlamaConfig other = tiny_config(false);
  other.rope_theta = 10000.0f;
  FakeModel mo(other, 4);
  save(d / "o", mo, 200);
  fs::copy_file(d / "o/config.json", a + "/config.json", fs::copy_options::overwrite_existing);
  expect_error(load, {"config.json does not belong"});
}

// Rewrites a checkpoint's safetensors file with `edit` applied to its tensor list, keeping the commit metadata so
// only the edit is wrong.
void rewrite(const std::string& path, const std::function<void(std::vector<NamedTensor>&)>& edit,
             std::vector<std::vector<float>>& store) {
  const auto st = SafetensorsFile::open(path);
  std::vector<NamedTensor> ts;
  store.clear();
  store.reserve(st.names().size() + 1);
  for (const std::string& n : st.names()) {
    store.emplace_back(size_t(safetensors_numel(st.get(n).shape)));
    st.read_f32(n, store.back().data(), st.get(n).shape);
    ts.push_back({n, st.get(n).shape, store.back().data()});
  }
  edit(ts);
  SafetensorsWriter w;
  for (const auto& [k, v] : st.metadata()) w.set_metadata(k, v);
  for (const NamedTensor& t : ts) w.add_f32(t.name, t.shape, t.data);
  w.write(path);
}

TEST(Checkpoint, CorruptOrMismatchedCheckpointsGiveOneClearError) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  save(dir, m, 7);
  const std::string model_path = dir + "/model.safetensors", raw = file_read(model_path);
  FakeModel back(tiny_config(false), 2);
  const auto untouched = back.params;
  auto load = [&] { checkpoint_load(dir, back.config, back.weights, back.optimizer); };
  auto restore = [&] { save(dir, m, 7); };

  expect_error([&] { checkpoint_inspect(d / "nope"); }, {"nope", "no such directory"});
  for (size_t cut : {size_t(4), size_t(100), raw.size() / 2, raw.size() - 1}) {
    file_write(model_path, raw.substr(0, cut));
    expect_error(load, {"model.safetensors"});
  }
  restore();
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json", "trainer.json"}) {
    SCOPED_TRACE(f);
    fs::remove(dir + "/" + f);
    expect_error(load, {f});
    restore();
  }
  file_write(dir + "/config.json", "{\"hidden_size\": ");
  expect_error(load, {"config.json", "is not valid JSON (it ends before the JSON does)"});
  restore();
  file_write(dir + "/trainer.json", "[]");
  expect_error(load, {"trainer.json", "not a valid JSON"});
  restore();

  std::vector<std::vector<float>> store;
  rewrite(
      model_path,
      [](auto& ts) {
    ts[0].shape = {ts[0].shape[1], ts[0].shape[0]};
      },
      store);
  expect_error(load, {"tensor 'lm_head.weight'", "[8, 11]", "[11, 8]"});
  restore();
  rewrite(
      model_path, [](auto& ts) { ts.erase(ts.begin() + 3); }, store);
  expect_error(load, {"model.safetensors", "no tensor", "model.layers.0.mlp"});
  restore();
  rewrite(
      model_path,
      [](auto& ts) {
    ts.push_back({"model.extra.weight", {1}, ts[0].data});
      },
      store);
  expect_error(load, {"unexpected tensor 'model.extra.weight'"});
  restore();
  rewrite(
      dir + "/optimizer.safetensors", [](auto& ts) { ts.pop_back(); }, store);
  expect_error(load, {"optimizer.safetensors", "no tensor 'adam.m."});
  checkpoint_load(dir, back.config, back.weights, {});  // weights alone are still fine
  back.params = untouched;
  restore();

  // A model whose config differs from the checkpoint's.
  LlamaConfig deeper = tiny_config(false);
  deeper.n_layers = 3;
  FakeModel md(deeper, 3);
  expect_error([&] { checkpoint_load(dir, md.config, md.weights, {}); }, {"num_hidden_layers 2 vs 3"});
  LlamaConfig eps = tiny_config(false);
  eps.norm_eps = 1e-5f;
  expect_error([&] { checkpoint_load(dir, eps, back.weights, {}); }, {"rms_norm_eps"});
  // The caller's list must be the model's parameters.
  NamedTensors missing = back.weights;
  missing.pop_back();
  expect_error([&] { checkpoint_load(dir, back.config, missing, {}); }, {"'lm_head.weight' not given"});

  // Refused loads never wrote into the caller's memory.
  expect_error(
      [&] {
    rewrite(
        model_path,
        [](auto& ts) {
      ts.back().shape = {1, ts.back().shape[0]};
        },
        store);
    load();
      },
      {"model.norm.weight"});
  EXPECT_EQ(back.params, untouched);
}

// Flips one bit of a tensor's data in place (headers, commit ids and checksums stay as saved).
void bit_flip(const std::string& path, const std::string& tensor, uint64_t byte, int bit) {
  const uint64_t at = SafetensorsFile::open(path).get(tensor).offset + byte;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ (1 << bit));
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

// Overwrites `to`'s data with `from`'s (same size), as a swapped or zeroed tensor would be.
void data_copy(const std::string& path, const std::string& from, const std::string& to) {
  const SafetensorsFile st = SafetensorsFile::open(path);
  std::string bytes(st.get(from).bytes, '\0');
  st.read_raw(from, bytes.data(), bytes.size());
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(st.get(to).offset));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(Checkpoint, DamagedTensorsAreRefusedByName) {
  TmpDir d;
  const std::string dir = d / "ck", model = dir + "/model.safetensors", optim = dir + "/optimizer.safetensors";
  FakeModel m(tiny_config(false), 1);
  FakeModel back(tiny_config(false), 2);
  auto load = [&] { checkpoint_load(dir, back.config, back.weights, back.optimizer); };
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight", q1 = "model.layers.1.self_attn.q_proj.weight";
  for (const auto& [bit_at, what] : std::vector<std::pair<uint64_t, int>>{{0, 0}, {3, 6}, {37, 7}}) {
    save(dir, m, 7);
    bit_flip(model, "lm_head.weight", bit_at, what);  // 3, 6: an exponent bit, a loss of 1e35 before checksums
    expect_error(load, {"model.safetensors", "tensor 'lm_head.weight'", "checksum", "damaged"});
  }
  save(dir, m, 7);
  bit_flip(optim, "adam.m." + q1, 5, 2);
  expect_error(load, {"optimizer.safetensors", "tensor 'adam.m." + q1 + "'", "checksum"});
  save(dir, m, 7);
  data_copy(model, q0, q1);  // swapped (or duplicated) tensors of one shape
  expect_error(load, {"tensor '" + q1 + "'", "checksum"});
  save(dir, m, 7);
  const std::string raw = file_read(model);
  file_write(model, raw.substr(0, raw.size() - 64) + std::string(64, '\0'));  // a zeroed tail
  expect_error(load, {"tensor 'lm_head.weight'", "checksum"});
  save(dir, m, 7);
  load();
  EXPECT_EQ(back.params, m.params);

  // The checksums themselves are checked: one missing, one malformed.
  auto sums_edit = [&](const std::function<void(json&)>& edit) {
    save(dir, m, 7);
    SafetensorsFile st = SafetensorsFile::open(model);
    json sums = json::parse(st.metadata_value("agoq.xxh3"));
    edit(sums);
    std::string text = file_read(model);
    uint64_t n = 0;
    std::memcpy(&n, text.data(), 8);
    json header = json::parse(text.substr(8, n));
    header["__metadata__"]["agoq.xxh3"] = sums.dump();
    std::string h = header.dump();
    ASSERT_LE(h.size(), n);
    h.append(n - h.size(), ' ');
    file_write(model, text.substr(0, 8) + h + text.substr(8 + n));
  };
  sums_edit([](json& s) { s.erase("lm_head.weight"); });
  expect_error(load, {"tensor 'lm_head.weight' has no checksum"});
  sums_edit([](json& s) { s["lm_head.weight"] = 7; });
  expect_error(load, {"checksum of tensor 'lm_head.weight'", "16 hex"});
}

// What no file may hold, checksum or not: non-finite values, negative second moments or scales.
TEST(Checkpoint, ImpossibleValuesAreRefusedEvenWithValidChecksums) {
  TmpDir d;
  const std::string dir = d / "ck";
  const LlamaConfig c = tiny_config(false);
  for (const char* name : {"adam.v.model.norm.weight", "tp1.adam.v.model.norm.weight", "adam.m.scales.layer0"}) {
    SCOPED_TRACE(name);
    FakeModel m(c, 1);
    std::vector<float> bad(8, 0.5f);
    bad[3] = -1e-30f;
    NamedTensors opt = {{name, {8}, bad.data()}};
    checkpoint_save(dir, c, m.weights, opt, json::object(), 3);
    FakeModel back(c, 2);
    std::vector<float> into(8);
    expect_error(
        [&] {
      checkpoint_load(dir, c, back.weights, {{name, {8}, into.data()}});
        },
        {std::string("tensor '") + name + "'", "1 negative values of 8"});
  }
  FakeModel m(c, 1);
  m.params[2][1] = std::numeric_limits<float>::quiet_NaN();
  save(dir, m, 3);
  FakeModel back(c, 2);
  expect_error([&] { checkpoint_load(dir, c, back.weights, {}); }, {"non-finite values"});
}

// trainer.json and the tensors' own record of their step must agree.
TEST(Checkpoint, AStepThatDisagreesWithTheTensorsIsRefused) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  save(dir, m, 20);
  json marker = json::parse(file_read(dir + "/trainer.json"));
  marker["step"] = 40;
  file_write(dir + "/trainer.json", marker.dump());
  FakeModel back(tiny_config(false), 2);
  expect_error([&] { checkpoint_inspect(dir); },
               {"model.safetensors was saved at step 20", "trainer.json says step 40"});
}

TEST(Checkpoint, SaveRefusesWeightsThatDoNotMatchTheConfig) {
  TmpDir d;
  FakeModel m(tiny_config(false), 1);
  NamedTensors w = m.weights;
  w[2].shape = {8, 4};
  expect_error([&] { checkpoint_save(d / "ck", m.config, w, {}, {}, 0); },
               {"model.layers.0.self_attn.q_proj.weight", "[8, 4]", "[8, 8]"});
  w = m.weights;
  w.push_back({"model.bonus.weight", {1}, m.params[0].data()});
  expect_error([&] { checkpoint_save(d / "ck", m.config, w, {}, {}, 0); }, {"model.bonus.weight"});
  w = m.weights;
  w.push_back(w[0]);
  expect_error([&] { checkpoint_save(d / "ck", m.config, w, {}, {}, 0); }, {"given twice"});
  expect_error([&] { checkpoint_save(d / "ck", m.config, m.weights, {w[0], w[0]}, {}, 0); }, {"given twice"});
  EXPECT_FALSE(fs::exists(d / "ck/trainer.json"));
}

// The PyTorch reference (tests/torch/llama_reference.py) must read what agoq writes: it rebuilds the model from
// this checkpoint and checks its own float32 gradients against float64. Skipped without Debian's python3-torch.
TEST(Checkpoint, TorchReferenceReadsIt) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3-torch";
  for (bool tie : {false, true}) {
    TmpDir d;
    FakeModel m(tiny_config(tie), 3);
    for (size_t i = 0; i < m.params.size(); ++i) {  // keep activations moderate: 1/sqrt(fan_in) and norms near 1
      const auto& shape = m.weights[i].shape;
      for (float& x : m.params[i]) x = shape.size() == 1 ? 1 + 0.2f * x : x / std::sqrt(float(shape[1]));
    }
    save(d / "ck", m, 1);
    const std::string cmd = "/usr/bin/python3 " AGOQ_SOURCE_DIR "/tests/torch/llama_reference.py --self-test --ckpt " +
                            (d / "ck") + " > " + (d / "log.txt") + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << file_read(d / "log.txt");
  }
}

}  // namespace
}  // namespace agoq

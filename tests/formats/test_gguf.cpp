// The GGUF reader (formats/gguf.h) and its dequantization (formats/gguf_quants.h): every tensor type bit-identical
// to gguf-py's gguf.quants.dequantize on files gguf-py wrote (tests/formats/gguf_reference.py quants), every
// metadata value type, version 2, and every malformed header refused in one line (files built byte by byte here);
// a larger model imported within a few MiB of memory besides the model.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "formats/gguf.h"
#include "formats/gguf_quants.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "tests/common/expect_error.h"
#include "tests/common/python_ref.h"
#include "tests/common/temp_path.h"
#include "tests/formats/formats_test_util.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

std::string file_read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void file_write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

const fs::path& quants_dir() {
  static const GgufRefDir dir("quants");
  return dir.path;
}

struct QuantCase {
  const char* type;
  uint32_t id;
};
class GgufDequantize : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgufDequantize, BitIdenticalToGgufPy) {
  const QuantCase& q = GetParam();
  const GgufFile f = GgufFile::open((quants_dir() / (std::string(q.type) + ".gguf")).string());
  const std::string want = file_read(quants_dir() / (std::string(q.type) + ".f32"));
  ASSERT_EQ(f.tensors().size(), 2u);
  std::vector<float> got;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, q.id) << t.name;
    std::vector<uint8_t> raw(t.bytes);
    f.read(t, 0, raw.data(), raw.size());
    const size_t n = size_t(t.rows() * uint64_t(t.ne[0]));
    got.resize(got.size() + n);
    gguf_dequantize(t.type, raw.data(), got.data() + got.size() - n, n);
  }
  EXPECT_EQ(f.tensor("a")->shape(), (std::vector<int64_t>{4, 512}));
  EXPECT_EQ(f.tensor("b")->shape(), (std::vector<int64_t>{2, 3, 256}));
  ASSERT_EQ(want.size(), got.size() * 4);
  size_t differ = 0, first = 0;
  for (size_t i = got.size(); i-- > 0;)
    if (std::memcmp(&got[i], want.data() + 4 * i, 4) != 0) ++differ, first = i;
  EXPECT_EQ(differ, 0u) << q.type << ": first differing value " << first;
  if (std::string(q.type) == "Q4_K") {
    EXPECT_EQ(f.alignment(), 64u);  // the file with general.alignment
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDequantize,
                         ::testing::Values(QuantCase{"F32", 0}, QuantCase{"F16", 1}, QuantCase{"BF16", 30},
                                           QuantCase{"Q8_0", 8}, QuantCase{"Q4_0", 2}, QuantCase{"Q4_1", 3},
                                           QuantCase{"Q5_0", 6}, QuantCase{"Q5_1", 7}, QuantCase{"Q4_K", 12},
                                           QuantCase{"Q5_K", 13}, QuantCase{"Q6_K", 14}),
                         [](const auto& info) { return std::string(info.param.type); });

TEST(GgufQuants, OtherTypesRefusedByName) {
  float y[256];
  const uint8_t block[256] = {};
  expect_error([&] { gguf_dequantize(10, block, y, 256); }, {"Q2_K", "not supported", "Q6_K"});
  expect_error([&] { gguf_dequantize(77, block, y, 256); }, {"type 77"});
  expect_error([&] { gguf_dequantize(8, block, y, 16); }, {"Q8_0", "32-value blocks"});
  EXPECT_EQ(ggml_type_name(23), "IQ4_XS");
  EXPECT_EQ(ggml_type_info(4), nullptr);  // retired Q4_2
}

TEST(GgufFileTest, ReadsEveryValueType) {
  const GgufFile f = GgufFile::open((quants_dir() / "meta.gguf").string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "agoq-test");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000ll);
  EXPECT_EQ(f.get_int("t.u64"), 1ll << 60);
  EXPECT_EQ(f.get_int("t.i64"), -(1ll << 60));
  EXPECT_EQ(f.get_float("t.f32"), double(0.1f));
  EXPECT_EQ(f.get_float("t.f64"), 0.1);
  EXPECT_EQ(f.get_bool("t.bool"), true);
  EXPECT_EQ(f.get_string("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get_ints("t.ints"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_floats("t.floats"), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(*f.get_strings("t.strs"), (std::vector<std::string>{"a", "", "ccc"}));
  const GgufValue* nested = f.find("t.nested");  // (agoq reads no nested array: they are walked, not kept)
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem, GgufValueType::array);
  EXPECT_EQ(nested->count, 3u);
  EXPECT_EQ(f.get_string("t.u8.absent"), std::nullopt);
  EXPECT_EQ(f.get_int("t.u8"), 200);  // (a key after the nested array: its end was found)
  EXPECT_EQ(f.get_int("absent"), std::nullopt);
  expect_error([&] { (void)f.get_int("t.str"); }, {"meta.gguf", "'t.str' is string, not an integer"});
  expect_error([&] { (void)f.get_int("t.floats"); }, {"'t.floats' is array"});
  expect_error([&] { (void)f.get_strings("t.ints"); }, {"'t.ints' is not an array of strings"});
  const GgufTensorInfo* z = f.tensor("z");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->ne, (std::vector<int64_t>{3, 2}));
  float v[6];
  f.read(*z, 0, v, sizeof v);
  EXPECT_EQ(v[5], 5.0f);
  expect_error([&] { f.read(*z, 4, v, sizeof v); }, {"exceeds tensor 'z'"});
}

TEST(GgufFileTest, ReadsVersion2) {
  std::string bytes = file_read(quants_dir() / "meta.gguf");
  bytes[4] = 2;
  const fs::path p = test_temp_path("gguf_v2.gguf");
  file_write(p, bytes);
  const GgufFile f = GgufFile::open(p.string());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_int("t.u8"), 200);
  fs::remove(p);
}

// ---- malformed files, built byte by byte ----

// A valid two-tensor GGUF ("a": F32 [8], "b": F16 [2, 4]) whose fields a test changes.
struct Spec {
  uint32_t version = 3;
  uint64_t n_tensors = 2, n_kv = 2;
  uint32_t arch_type = 8;  // the value type of general.architecture
  uint64_t arch_len = 1;   // its string length
  uint32_t alignment = 32;
  uint32_t b_dims = 2, b_type = 1;
  uint64_t b_ne0 = 4, b_offset = 32;
  size_t data_bytes = 48;  // bytes written after the padding
};

struct Bytes {
  std::string s;
  void u32(uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
  void u64(uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  void str(const std::string& v) { u64(v.size()), s += v; }
};

std::string spec_bytes(const Spec& sp) {
  Bytes b;
  b.s = "GGUF";
  b.u32(sp.version);
  b.u64(sp.n_tensors), b.u64(sp.n_kv);
  b.str("general.architecture"), b.u32(sp.arch_type), b.u64(sp.arch_len), b.s += "x";
  b.str("general.alignment"), b.u32(4), b.u32(sp.alignment);
  b.str("a"), b.u32(1), b.u64(8), b.u32(0), b.u64(0);
  b.str("b"), b.u32(sp.b_dims);
  for (uint32_t d = 0; d < sp.b_dims; ++d) b.u64(d == 0 ? sp.b_ne0 : 2);
  b.u32(sp.b_type), b.u64(sp.b_offset);
  while (b.s.size() % 32) b.s += '\0';
  b.s += std::string(sp.data_bytes, '\x3c');
  return b.s;
}

// Opens the bytes as a file; returns the error message ("" when it opened).
std::string open_error(const std::string& bytes) {
  const fs::path p = test_temp_path("gguf_bad.gguf");
  file_write(p, bytes);
  std::string m;
  try {
    (void)GgufFile::open(p.string());
  } catch (const Error& e) {
    m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(p.string()), std::string::npos) << m;
  }
  fs::remove(p);
  return m;
}

#define EXPECT_REFUSED(bytes, part) EXPECT_NE(open_error(bytes).find(part), std::string::npos) << open_error(bytes)

template <class F>
std::string with(F f) {
  Spec s;
  f(s);
  return spec_bytes(s);
}

TEST(GgufFileTest, BuiltFileOpens) {
  EXPECT_EQ(open_error(spec_bytes({})), "");
  const fs::path p = test_temp_path("gguf_ok.gguf");
  file_write(p, spec_bytes({}));
  const GgufFile f = GgufFile::open(p.string());
  EXPECT_EQ(f.tensor("b")->offset, f.data_offset() + 32);
  EXPECT_EQ(f.tensor("b")->bytes, 16u);
  fs::remove(p);
}

TEST(GgufFileTest, RefusesBadHeaders) {
  std::string bad_magic = spec_bytes({});
  bad_magic[0] = 'X';
  EXPECT_REFUSED(bad_magic, "not a GGUF file (magic 'XGUF'");
  EXPECT_REFUSED("GG", "too short");
  EXPECT_REFUSED(with([](Spec& s) { s.version = 1; }), "version 1 is not supported");
  EXPECT_REFUSED(with([](Spec& s) { s.version = 4; }), "unsupported GGUF version 4");
  EXPECT_REFUSED(with([](Spec& s) { s.version = 0x03000000; }), "big-endian");
  EXPECT_REFUSED(with([](Spec& s) { s.n_tensors = 1ull << 40; }), "tensor count is 1099511627776, more than");
  EXPECT_REFUSED(with([](Spec& s) { s.n_kv = ~0ull; }), "metadata count");
  EXPECT_REFUSED(with([](Spec& s) { s.arch_type = 13; }),
                 "metadata 'general.architecture' has unknown value type id 13");
  EXPECT_REFUSED(with([](Spec& s) { s.arch_len = 1ull << 62; }),
                 "truncated: string of metadata 'general.architecture'");
  EXPECT_REFUSED(with([](Spec& s) { s.alignment = 48; }), "general.alignment 48 is not a power of two");
  EXPECT_REFUSED(with([](Spec& s) { s.alignment = 0; }), "general.alignment 0");
  EXPECT_REFUSED(with([](Spec& s) { s.b_type = 4; }), "tensor 'b' has unknown type id 4");
  EXPECT_REFUSED(with([](Spec& s) { s.b_type = 8; }), "tensor 'b' (Q8_0) has rows of 4 values");
  EXPECT_REFUSED(with([](Spec& s) { s.b_dims = 5; }), "tensor 'b' has 5 dimensions");
  EXPECT_REFUSED(with([](Spec& s) { s.b_offset = 16; }), "offset 16 is not a multiple of the alignment 32");
  EXPECT_REFUSED(with([](Spec& s) { s.b_offset = 0; }), "tensors 'a' and 'b' overlap");
  EXPECT_REFUSED(with([](Spec& s) { s.b_offset = 64; }), "tensor 'b' (16 bytes at data offset 64) lies beyond");
  EXPECT_REFUSED(with([](Spec& s) { s.b_ne0 = 1ull << 62; }), "too large");
  EXPECT_REFUSED(with([](Spec& s) { s.data_bytes = 40; }), "lies beyond the end of the file");
  EXPECT_REFUSED(with([](Spec& s) { s.b_ne0 = ~0ull; }), "tensor 'b' has dimension");
}

// Issue 42: a header whose tensor count is one short read the left-out tensor info as padding and every tensor's
// data from the wrong start (an untied model became "tied", and eval printed loss 2.5e31). The infos must end in
// zero padding, and the tensors must account for the whole data section.
TEST(GgufFileTest, RefusesATensorCountThatLeavesTensorsOut) {
  EXPECT_REFUSED(with([](Spec& s) { s.n_tensors = 1; }),
                 "the header's tensor count (1) is not the number of tensor infos the file holds");
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}) {
    std::string bytes = file_read(quants_dir() / (std::string(type) + ".gguf"));
    EXPECT_EQ(open_error(bytes), "") << type;
    bytes[8] = 1;  // the tensor count, 2
    EXPECT_REFUSED(bytes, "tensor count (1) is not the number of tensor") << type;
  }
}

TEST(GgufFileTest, RefusesDataNoTensorAccountsFor) {
  EXPECT_REFUSED(with([](Spec& s) { s.data_bytes = 48 + 32; }),
                 "at the end of the file, after the last tensor's data, belong to no tensor");
  EXPECT_EQ(open_error(with([](Spec& s) { s.data_bytes = 64; })), "");  // 'b' padded to the alignment
  EXPECT_REFUSED(with([](Spec& s) { s.b_offset = 64, s.data_bytes = 80; }), "before tensor 'b', belong to no tensor");
  std::string nonzero_padding = spec_bytes({});
  nonzero_padding[nonzero_padding.size() - 48 - 1] = 'x';
  EXPECT_REFUSED(nonzero_padding, "is not zero ('x')");
}

// Issue 42: 100 MB of metadata keys cost 1.16 GB. What a header declares is bounded, each refusal naming what.
TEST(GgufFileTest, RefusesMetadataBeyondItsLimits) {
  auto header = [](uint64_t n_tensors, uint64_t n_kv) {
    Bytes b;
    b.s = "GGUF";
    b.u32(3), b.u64(n_tensors), b.u64(n_kv);
    return b;
  };
  Bytes many_kv = header(0, 70000);
  many_kv.s += std::string(70000 * 13, '\0');
  EXPECT_REFUSED(many_kv.s, "metadata count 70000 is more than agoq accepts (65536 entries)");
  Bytes many_tensors = header(70000, 0);
  many_tensors.s += std::string(70000 * 24, '\0');
  EXPECT_REFUSED(many_tensors.s, "tensor count 70000 is more than agoq accepts (65536)");
  Bytes long_key = header(0, 1);
  long_key.str(std::string(2000, 'k')), long_key.u32(0), long_key.s += '\0';
  EXPECT_REFUSED(long_key.s, "key of metadata entry 0 ('kkkk");
  EXPECT_REFUSED(long_key.s, "...') is 2000 bytes, more than agoq accepts (1024)");
  Bytes control = header(0, 1);
  control.str("a\nb"), control.u32(0), control.s += '\0';
  EXPECT_REFUSED(control.s, "metadata key 'a\\x0ab' holds a control character");
  Bytes long_array = header(0, 1);
  long_array.str("k"), long_array.u32(9), long_array.u32(0), long_array.u64(5000000);
  long_array.s += std::string(5000000, '\0');
  EXPECT_REFUSED(long_array.s, "metadata 'k': array length 5000000 is more than agoq accepts (4194304)");
  Bytes long_name = header(1, 0);
  long_name.str(std::string(65, 'n')), long_name.u32(1), long_name.u64(8), long_name.u32(0), long_name.u64(0);
  EXPECT_REFUSED(long_name.s, "name of tensor info 0 ('nnn");
  EXPECT_REFUSED(long_name.s, "is 65 bytes, more than agoq accepts (64)");
}

// How far this process's peak resident memory rises while the file opens.
size_t open_peak_above(const std::string& bytes) {
  const fs::path p = test_temp_path("gguf_meta_mem.gguf");
  file_write(p, bytes);
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const size_t before = proc_status_bytes("VmRSS:");
  {
    const GgufFile f = GgufFile::open(p.string());
    EXPECT_NE(f.find("k"), nullptr);
  }
  const size_t peak = proc_status_bytes("VmHWM:");
  fs::remove(p);
  return peak > before ? peak - before : 0;
}

// Issue 42: metadata cost ~11x its size (every key in a map node and a set node, every string array element a
// std::string). Now strings and arrays stay in the file until agoq reads them, and an entry costs ~80 bytes.
TEST(GgufFileTest, MetadataCostsLittleMemoryBesidesItsKeys) {
  Bytes strings;  // 52 MB: one array of 4M strings no one reads
  strings.s = "GGUF";
  strings.u32(3), strings.u64(0), strings.u64(1);
  strings.str("k"), strings.u32(9), strings.u32(8), strings.u64(4000000);
  for (int i = 0; i < 4000000; ++i) strings.str("abcde");
  const size_t strings_peak = open_peak_above(strings.s);
  EXPECT_LE(strings_peak, size_t(8) << 20);
  Bytes keys;  // 60,000 entries of 26 bytes (1.5 MB)
  keys.s = "GGUF";
  keys.u32(3), keys.u64(0), keys.u64(60000);
  keys.str("k"), keys.u32(0), keys.s += '';
  for (int i = 1; i < 60000; ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "key.%08d", i);
    keys.str(key), keys.u32(0), keys.s += '';
  }
  const size_t keys_peak = open_peak_above(keys.s);
  EXPECT_LE(keys_peak, size_t(8) << 20);
  std::cout << "open peak: " << strings_peak / 1024 << " KiB for 52 MB of strings, " << keys_peak / 1024
            << " KiB for 60,000 keys\n";
}

TEST(GgufFileTest, RefusesEveryTruncation) {
  const std::string whole = spec_bytes({});
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string m = open_error(whole.substr(0, n));
    EXPECT_FALSE(m.empty()) << "a file cut to " << n << " bytes opened";
  }
}

TEST(GgufFileTest, RefusesBadMetadataValues) {
  auto one_kv = [](const std::function<void(Bytes&)>& value) {
    Bytes b;
    b.s = "GGUF";
    b.u32(3), b.u64(0), b.u64(1);
    b.str("k");
    value(b);
    return b.s;
  };
  EXPECT_REFUSED(one_kv([](Bytes& b) { b.u32(7), b.s += '\x02'; }), "'k': bool value 2 is neither 0 nor 1");
  EXPECT_REFUSED(one_kv([](Bytes& b) { b.u32(9), b.u32(0), b.u64(1ull << 50), b.s += "xx"; }),
                 "array length of metadata 'k' is 1125899906842624");
  EXPECT_REFUSED(one_kv([](Bytes& b) { b.u32(9), b.u32(8), b.u64(2), b.u64(1), b.s += "a", b.u64(5), b.s += "b"; }),
                 "truncated: array string of metadata 'k'");
  EXPECT_REFUSED(one_kv([](Bytes& b) { b.u32(9), b.u32(99), b.u64(0); }), "unknown value type id 99");
  EXPECT_REFUSED(one_kv([](Bytes& b) {
                   b.u32(9);
                   for (int i = 0; i < 9; ++i) b.u32(9), b.u64(1);
                   b.s += std::string(64, '\0');
                 }),
                 "arrays nested deeper than 8");
  Bytes twice;
  twice.s = "GGUF";
  twice.u32(3), twice.u64(0), twice.u64(2);
  for (int i = 0; i < 2; ++i) twice.str("k"), twice.u32(0), twice.s += '\1';
  EXPECT_REFUSED(twice.s, "metadata key 'k' appears twice");
  EXPECT_EQ(open_error(one_kv([](Bytes& b) { b.u32(9), b.u32(9), b.u64(1), b.u32(0), b.u64(2), b.s += "ab"; })), "");
}

// ---- memory: a model streams in a few MiB at a time ----

std::string gguf_name_of(const HfTensor& t) {
  static const char* kNames[] = {"token_embd", "attn_norm", "attn_q", "attn_k",   "attn_v",      "attn_output",
                                 "ffn_norm",   "ffn_gate",  "ffn_up", "ffn_down", "output_norm", "output"};
  const std::string n = kNames[int(t.role)];
  return (t.layer >= 0 ? "blk." + std::to_string(t.layer) + "." + n : n) + ".weight";
}

// A llama GGUF of config c without a tokenizer: norms F32 (all 1), matrices Q8_0 (scale 1, codes (row + col) % 97).
std::string llama_q8_gguf(const LlamaConfig& c) {
  const std::vector<HfTensor> ts = hf_tensors(c);
  Bytes b;
  b.s = "GGUF";
  b.u32(3), b.u64(ts.size()), b.u64(9);
  b.str("general.architecture"), b.u32(8), b.str("llama");
  const std::pair<const char*, int> ints[] = {
      {"context_length", c.max_seq_len},   {"embedding_length", c.dim},
      {"block_count", c.n_layers},         {"feed_forward_length", c.ffn_dim},
      {"attention.head_count", c.n_heads}, {"attention.head_count_kv", c.n_kv_heads}};
  for (const auto& [key, v] : ints) b.str(std::string("llama.") + key), b.u32(4), b.u32(uint32_t(v));
  for (const auto& [key, v] : {std::pair{"llama.rope.freq_base", c.rope_theta},
                               std::pair{"llama.attention.layer_norm_rms_epsilon", c.norm_eps}}) {
    b.str(key), b.u32(6);
    b.s.append(reinterpret_cast<const char*>(&v), 4);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> bytes;
  for (const HfTensor& t : ts) {
    const std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    b.str(gguf_name_of(t)), b.u32(uint32_t(ne.size()));
    for (int64_t d : ne) b.u64(uint64_t(d));
    const uint64_t n = uint64_t(safetensors_numel(t.shape));
    bytes.push_back(ne.size() == 1 ? n * 4 : n / 32 * 34);
    b.u32(ne.size() == 1 ? 0 : 8), b.u64(offset);
    offset += (bytes.back() + 31) / 32 * 32;
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    while (b.s.size() % 32) b.s += '\0';
    if (ts[i].shape.size() == 1) {
      for (int64_t k = 0; k < ts[i].shape[0]; ++k) b.u32(0x3f800000u);
      continue;
    }
    for (int64_t r = 0; r < ts[i].shape[0]; ++r)
      for (int64_t blk = 0; blk < ts[i].shape[1] / 32; ++blk) {
        b.s.append("\x00\x3c", 2);  // fp16 1.0
        for (int64_t j = 0; j < 32; ++j) b.s += char((r + blk * 32 + j) % 97);
      }
  }
  return b.s;
}

TEST(GgufModelMemory, Q8_0ImportHoldsAFewMiBBesidesTheModel) {
  LlamaConfig c;
  c.vocab_size = 32000, c.dim = 512, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 4, c.ffn_dim = 1408;
  c.max_seq_len = 128;
  const fs::path p = test_temp_path("gguf_q8_model.gguf");
  file_write(p, llama_q8_gguf(c));
  const std::unique_ptr<ModelReader> src = gguf_model_open(p.string());
  EXPECT_EQ(config_diff(src->config(), c), "");
  const MeasuredImport m = import_measured(*src);
  // the promise is the model + its largest tensor (65 MB here) + 64 MiB; a GGUF import needs only its read chunk
  EXPECT_LE(m.peak_above, size_t(16) << 20);
  std::cout << "import peak: " << m.peak_above / 1024 << " KiB besides the model\n";
  EXPECT_EQ(m.weights[0].data[5 * 512 + 40], float((5 + 40) % 97));  // embedding row 5, column 40
  fs::remove(p);
}

TEST(GgufFileTest, MissingFileNamed) {
  try {
    (void)GgufFile::open("/nonexistent/m.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GGUF file /nonexistent/m.gguf: cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace agoq

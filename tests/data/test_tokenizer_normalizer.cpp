// tokenizer.json's normalizers (src/data/tokenizer_normalizer.cpp), each checked against HF tokenizers on text with
// accents, combining marks, compatibility characters, CJK and case; and the split and Replace regexes that PCRE2's
// limits cannot bound (back references) or that exceed them (issue 42).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "tests/common/bpe_byte_chars.h"
#include "tests/common/python_ref.h"
#include "tests/data/data_test_util.h"

namespace agoq {

using namespace agoq::data_test;
using nlohmann::json;

namespace {

// An added token; special ones are not normalized.
json added(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content}, {"single_word", false},  {"lstrip", false},
          {"rstrip", false}, {"special", special}, {"normalized", !special}};
}

// Every byte, merges of a few accented and CJK pairs, <s> (not normalized) and [END], café (normalized) added.
json tokenizer_with(const json& normalizer, bool add_prefix_space = false) {
  json vocab = json::object();
  const std::vector<std::string> chars = bpe_byte_chars();
  for (int b = 0; b < 256; ++b) vocab[chars[b]] = b;
  json merges = json::array();
  const auto merge = [&](const std::string& a, const std::string& b) {
    vocab[a + b] = int(vocab.size());
    merges.push_back(a + " " + b);
  };
  merge(chars[0xC3], chars[0xA9]);                                   // é's two bytes
  merge("\xC4\xA0", "t"), merge("h", "e"), merge("e", chars[0xCC]);  // Ġt, he, e + the first byte of U+0301
  const int s = int(vocab.size());
  return {
      {"version", "1.0"},
      {"added_tokens", {added(s, "<s>", true), added(s + 1, "[END]", false), added(s + 2, "caf\xC3\xA9", false)}},
      {"normalizer", normalizer},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

fs::path write_tokenizer(const json& j, const std::string& name) {
  const fs::path d = data_test_dir(name);
  file_put(d / "tokenizer.json", j.dump());
  return d / "tokenizer.json";
}

json seq(std::initializer_list<json> steps) { return {{"type", "Sequence"}, {"normalizers", json(steps)}}; }
json replace(const char* kind, const std::string& pattern, const std::string& content) {
  return {{"type", "Replace"}, {"pattern", {{kind, pattern}}}, {"content", content}};
}

}  // namespace

// Each normalizer real tokenizers use, alone and in (nested) Sequences, gives tokenizers' ids on every sample.
TEST(TokenizerNormalizer, EachEqualsHfTokenizers) {
  const std::vector<std::pair<json, bool>> cases = {
      {seq({}), false},  // transformers' own GGUF conversion writes this one
      {{{"type", "NFC"}}, false},
      {{{"type", "NFD"}}, false},
      {{{"type", "NFKC"}}, false},
      {{{"type", "NFKD"}}, false},
      {{{"type", "Lowercase"}}, false},
      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, false},
      {{{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, true},
      {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, false},
      {seq({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, replace("String", " ", "\xE2\x96\x81")}), false},
      {replace("Regex", R"(\s+)", " "), false},
      {replace("String", "e.", "[END]"), false},  // a String is literal; the replacement can be an added token
      {replace("Regex", "(?i:the)|\\p{Han}+", "\xE2\x80\xA6"), false},  // Oniguruma's syntax, as splits read it
      {seq({seq({{{"type", "NFKC"}}, {{"type", "Lowercase"}}}),
            seq({}),
            replace("String", "\xC3\xA9", "e"),
            {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}}),
       true},
  };
  // clang-format off
  const std::vector<std::string> samples = {
      "", " ", "caf\xC3\xA9 cafe\xCC\x81 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m A\xCC\x8A a\xCC\x88\xCC\x81 o\xCC\x82\xCC\xA3",
      "\xEF\xAC\x81 \xE2\x91\xA0 \xEF\xBC\xA8\xEF\xBD\x85\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F \xE3\x8E\x8F x\xC2\xB2",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0 \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
      "\xE1\x84\x80\xE1\x85\xA1 \xEF\xBE\x8A\xEF\xBE\x9E",
      "\xC4\xB0STANBUL \xCE\xA3\xCE\x91\xCE\xA3 \xC7\x85 \xC3\x9F THE End",
      "  lead", "trail \t", "\xE3\x80\x80x\xC2\xA0 \n\n y\r\n", "<s>caf\xC3\xA9</s> a[END]b [end] x <s> y",
      "cafe\xCC\x81<s>CAF\xC3\x89 [END]", "<s>", "   <s>   ", "the the\nthe\tthe", "e\xCC\x81" "e\xCC\x81" "e\xCC\x81"};
  // clang-format on
  std::string files;
  std::vector<Tokenizer> toks;
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path f = write_tokenizer(tokenizer_with(cases[i].first, cases[i].second), "norm" + std::to_string(i));
    toks.push_back(Tokenizer::load(f.string()));
    files += " " + f.string();
  }
  const fs::path d = data_test_dir("norm_ref");
  file_put(d / "samples.json", json(samples).dump());
  python_ref_run("tests/data/tokenizer_normalizer_reference.py",
                 "encode " + (d / "samples.json").string() + " " + (d / "ids.json").string() + files);
  const auto want = json::parse(file_bytes(d / "ids.json")).get<std::vector<std::vector<std::vector<int32_t>>>>();
  ASSERT_EQ(want.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    for (size_t k = 0; k < samples.size(); ++k)
      EXPECT_EQ(toks[i].encode(samples[k]), want[i][k]) << cases[i].first.dump() << " on '" << samples[k] << "'";
}

// A long text goes through the normalizer and the parallel split alike (the whole equals its lines one by one).
TEST(TokenizerNormalizer, LongTextEqualsItsLines) {
  const Tokenizer tok = Tokenizer::load(
      write_tokenizer(tokenizer_with(seq({{{"type", "NFKD"}}, {{"type", "Lowercase"}}})), "norm_long").string());
  std::string text, line = "Caf\xC3\xA9 \xEF\xAC\x81 \xC4\xB0 [END] <s> \xE6\x97\xA5\xE6\x9C\xAC\n";
  std::vector<int32_t> want;
  for (int i = 0; i < 40000; ++i) text += line;  // > 1 MiB: the parallel path
  for (const int32_t id : tok.encode(line)) want.push_back(id);
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), want.size() * 40000);
  for (size_t i = 0; i < ids.size(); i += want.size())
    ASSERT_TRUE(std::equal(want.begin(), want.end(), ids.begin() + long(i))) << "line " << i / want.size();
}

// An empty Sequence is no normalizer: the same tokenizer, the same identity (so the GGUF transformers converted and
// its tokenizer.json agree); a real one changes the identity.
TEST(TokenizerNormalizer, EmptySequenceIsNoNormalizer) {
  const Tokenizer none = Tokenizer::load(write_tokenizer(tokenizer_with(nullptr), "norm_none").string());
  const Tokenizer empty = Tokenizer::load(write_tokenizer(tokenizer_with(seq({seq({})})), "norm_empty").string());
  const Tokenizer nfc = Tokenizer::load(write_tokenizer(tokenizer_with({{"type", "NFC"}}), "norm_nfc").string());
  EXPECT_EQ(none.identity(), empty.identity());
  EXPECT_NE(none.identity(), nfc.identity());
}

// What agoq does not implement is refused by name and place; so is a step missing a field.
TEST(TokenizerNormalizer, RefusesTheRestByName) {
  const auto refused = [](const json& n, std::initializer_list<std::string> parts) {
    const fs::path f = write_tokenizer(tokenizer_with(n), "norm_refused");
    expect_error([&] { Tokenizer::load(f.string()); }, parts);
  };
  refused({{"type", "BertNormalizer"}}, {"normalizer type 'BertNormalizer' is not supported"});
  refused(seq({{{"type", "NFC"}}, seq({{{"type", "Precompiled"}}})}),
          {"normalizer.normalizers[1].normalizers[0] type 'Precompiled'"});
  refused({{"type", "Strip"}, {"strip_left", true}}, {"normalizer.strip_right is missing"});
  refused({{"type", "Sequence"}}, {"normalizer.normalizers is missing"});
  refused(replace("Regex", "(unclosed", "x"), {"normalizer Replace", "(unclosed", "does not compile"});
}

// Issue 42: a Split regex with a back reference, `(a+)\1+$`, took ~n^3 on 50 KB of "a" then "b" (hours) within
// PCRE2's match limit, which counts backtracking points, not the comparing. Such a pattern is refused when it is
// read, in a Split or a Replace; a pattern that backtracks without end is stopped by the match limit, in one line,
// also on the parallel path (an exception out of the OpenMP loop would end the process).
TEST(TokenizerRegexLimits, BackReferencesRefusedBacktrackingStopped) {
  json j = tokenizer_with(nullptr);
  const auto split = [](const std::string& re) {
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  };
  j["pre_tokenizer"] = split(R"((a+)\1+$)");
  fs::path f = write_tokenizer(j, "bomb_backref");
  expect_error([&] { Tokenizer::load(f.string()); }, {f.string(), R"('(a+)\1+$')", "back reference"});
  j["pre_tokenizer"] = split(R"((?<x>a)\k<x>)");
  f = write_tokenizer(j, "bomb_named");
  expect_error([&] { Tokenizer::load(f.string()); }, {"back reference"});
  f = write_tokenizer(tokenizer_with(replace("Regex", R"((b+)\1)", "x")), "bomb_replace");
  expect_error([&] { Tokenizer::load(f.string()); }, {"normalizer Replace", "back reference"});

  j["pre_tokenizer"] = split(R"((?:\D|\D)*\d{4})");
  f = write_tokenizer(j, "bomb_backtrack");
  const Tokenizer tok = Tokenizer::load(f.string());
  for (const size_t n : {size_t(200), size_t(3) << 20}) {
    const std::string text(n, 'a');
    expect_error([&] { tok.encode(text); }, {f.string(), R"('(?:\D|\D)*\d{4}')", "backtracks more than agoq lets"});
  }
}

}  // namespace agoq

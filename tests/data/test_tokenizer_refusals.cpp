// What the tokenizer readers refuse (one line each, naming the field and its value), and how byte-level BPE takes
// invalid UTF-8. Small tokenizers made here; no Python.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "tests/common/bpe_byte_chars.h"
#include "tests/data/data_test_util.h"

namespace agoq {

using namespace agoq::data_test;
using nlohmann::json;

namespace {

// A valid tokenizer.json: every byte, a few merges ("Ġthe"), <s> and </s> added, BOS by TemplateProcessing.
json tiny_tokenizer() {
  json vocab = json::object();
  const std::vector<std::string> chars = bpe_byte_chars();
  for (int b = 0; b < 256; ++b) vocab[chars[b]] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {{"\xC4\xA0", "t"}, {"h", "e"}, {"\xC4\xA0t", "he"}};
  json m = json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = int(vocab.size());
    m.push_back(a + " " + b);
  }
  const int s = int(vocab.size());
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", s}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
            {{"id", s + 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {s}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

Tokenizer load_json(const json& j, const std::string& name, const std::string& config = "") {
  const fs::path d = data_test_dir(name);
  file_put(d / "tokenizer.json", j.dump());
  if (!config.empty()) file_put(d / "tokenizer_config.json", config);
  return Tokenizer::load(d.string());
}

// The refusal is one line holding every part.
void expect_refused(const json& j, std::initializer_list<std::string> parts, const std::string& config = "") {
  try {
    load_json(j, "refused", config);
    ADD_FAILURE() << "loaded: " << j.dump().substr(0, 300);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

}  // namespace

TEST(TokenizerBpeTiny, EncodesMergesAddedTokensAndBos) {
  const Tokenizer tok = load_json(tiny_tokenizer(), "tiny");
  const std::vector<int32_t> ids = tok.encode("the the<s>");
  ASSERT_EQ(ids.size(), 4u);  // "the" (no space: t + he), "Ġthe", "<s>"
  EXPECT_EQ(tok.piece(ids[2]), "\xC4\xA0the");
  EXPECT_EQ(tok.piece(ids[3]), "<s>");
  EXPECT_EQ(tok.decode(ids), "the the<s>");
  EXPECT_EQ(tok.encode_for_model("x")[0], tok.piece_id("<s>"));
  EXPECT_EQ(tok.vocab_size(), 256 + 3 + 2);
}

// Invalid UTF-8 is read as Python's bytes.decode("utf-8", "replace") reads it: each maximal invalid subpart one
// U+FFFD. The ids are those of that string, and the round trip says the text did not come back.
TEST(TokenizerBpeTiny, InvalidUtf8IsReplacedAsPythonDecodes) {
  const Tokenizer tok = load_json(tiny_tokenizer(), "tiny_utf8");
  const std::string bad =
      "a\xFF"
      "b\xE2\x82"
      "c\xED\xA0\x80"
      "d\xF0\x9F\x8E"
      "e\xC0\xAF"
      "f\xE2\x82\xAC";
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string replaced =
      "a" + fffd + "b" + fffd + "c" + fffd + fffd + fffd + "d" + fffd + "e" + fffd + fffd + "f\xE2\x82\xAC";
  bool exact = true;
  EXPECT_EQ(tok.encode(bad, false, &exact), tok.encode(replaced));
  EXPECT_FALSE(exact);
  EXPECT_EQ(tok.decode(tok.encode(bad)), replaced);
  tok.encode(replaced, false, &exact);
  EXPECT_TRUE(exact);
}

TEST(TokenizerBpeTiny, RefusesWhatItDoesNotImplement) {
  const json base = tiny_tokenizer();
  json j = base;
  j["normalizer"] = {{"type", "BertNormalizer"}};  // NFC and its kin are read (test_tokenizer_normalizer.cpp)
  expect_refused(j, {"normalizer", "BertNormalizer", "not supported"});
  j = base;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  expect_refused(j, {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  expect_refused(j, {"invert"});
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = false;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
  expect_refused(j, {"split regex", "(unclosed", "does not compile"});
  std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]);
  expect_refused(j, {"ByteLevel before other pre-tokenizers"});
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(j, {"pre_tokenizer", "Whitespace"});
  j["pre_tokenizer"] = nullptr;
  expect_refused(j, {"pre_tokenizer is null"});
  j = base;
  j["model"]["type"] = "Unigram";
  expect_refused(j, {"model type", "Unigram"});
  j = base;
  j["model"]["byte_fallback"] = true;
  expect_refused(j, {"model.byte_fallback"});
  j = base;
  j["model"]["dropout"] = 0.1;
  expect_refused(j, {"model.dropout", "0.1"});
  j = base;
  j["model"]["continuing_subword_prefix"] = "##";
  expect_refused(j, {"continuing_subword_prefix", "##"});
  j = base;
  j["model"]["merges"].push_back("x nosuchtoken");
  expect_refused(j, {"merge 3", "nosuchtoken", "not in the vocabulary"});
  j = base;
  j["model"]["merges"].push_back("a b c");
  expect_refused(j, {"model.merges[3]", "a b c"});
  j = base;
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_refused(j, {"post_processor", "RobertaProcessing"});
  j = base;
  j["post_processor"]["single"].insert(j["post_processor"]["single"].begin(), j["post_processor"]["single"][0]);
  expect_refused(j, {"post_processor", "2 tokens before"});
  j = base;
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j, {"decoder", "WordPiece"});
}

TEST(TokenizerBpeTiny, RefusesBadFilesAndConfigs) {
  const fs::path d = data_test_dir("tok_bad");
  file_put(d / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  expect_error([&] { Tokenizer::load((d / "tokenizer.json").string()); }, {"tokenizer.json", "not valid JSON"});
  expect_error([&] { Tokenizer::load((d / "missing.json").string()); }, {"missing.json", "cannot open"});
  fs::create_directories(d / "empty");
  expect_error([&] { Tokenizer::load((d / "empty").string()); }, {"no tokenizer.json or tokenizer.model"});
  expect_refused(tiny_tokenizer(), {"tokenizer_config.json", "not valid JSON"}, "{not json");
  expect_refused(tiny_tokenizer(), {"add_prefix_space", "slow tokenizer"},
                 R"({"tokenizer_class": "LlamaTokenizerFast", "add_prefix_space": true})");
  expect_refused(tiny_tokenizer(), {"add_bos_token", "not true or false"},
                 R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": "yes"})");
  // LlamaTokenizerFast's template: BOS by default, EOS when asked; the file's own template is replaced.
  const Tokenizer llama =
      load_json(tiny_tokenizer(), "tiny_llama",
                R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                                        "add_eos_token": true})");
  EXPECT_TRUE(llama.add_bos());
  EXPECT_TRUE(llama.add_eos());
  EXPECT_EQ(llama.piece(llama.encode_for_model("x").back()), "</s>");
}

TEST(TokenizerBpeTiny, FromBpeRefusesInconsistentSpecs) {
  BpeSpec s;
  for (const std::string& c : bpe_byte_chars()) s.vocab.push_back(c);
  s.added.push_back({300, "<s>", true});
  expect_error([&] { Tokenizer::from_bpe(s, "spec"); }, {"spec", "added token '<s>'", "300"});
  s.added.clear();
  s.add_bos = true;
  expect_error([&] { Tokenizer::from_bpe(s, "spec"); }, {"add_bos", "no BOS"});
  s.add_bos = false;
  s.add_prefix_space = true;
  s.split_regexes = {"\\p{N}"};
  expect_error([&] { Tokenizer::from_bpe(s, "spec"); }, {"add_prefix_space"});
  s.split_regexes.clear();
  s.merges.push_back({"a", "zz"});
  expect_error([&] { Tokenizer::from_bpe(s, "spec"); }, {"merge 0", "'zz'"});
  expect_error([] { bpe_split_regexes_for_gguf_pre("falcon"); }, {"tokenizer.ggml.pre", "falcon", "not supported"});
  EXPECT_EQ(bpe_split_regexes_for_gguf_pre("llama-bpe"), bpe_split_regexes_for_gguf_pre("llama3"));
  EXPECT_TRUE(bpe_ignore_merges_for_gguf_pre("llama-bpe"));
  EXPECT_FALSE(bpe_ignore_merges_for_gguf_pre("gpt-2"));
  EXPECT_EQ(bpe_split_regexes_for_gguf_pre("smollm").size(), 2u);
}

TEST(TokenizerSentencePieceVocabTiny, RefusesInconsistentVocabularies) {
  SentencePieceVocab v;
  v.pieces = {"<unk>", "<s>", "a"};
  v.scores = {0, 0};
  v.types = {2, 3, 1};
  expect_error([&] { Tokenizer::from_sentencepiece_vocab(v, "vocab"); }, {"vocab", "3 pieces but 2 scores"});
  v.scores = {0, 0, 0};
  v.types = {1, 3, 1};
  expect_error([&] { Tokenizer::from_sentencepiece_vocab(v, "vocab"); }, {"no unknown piece"});
  v.unk_id = 0;
  v.bos_id = 7;
  expect_error([&] { Tokenizer::from_sentencepiece_vocab(v, "vocab"); }, {"special token id 7"});
}

}  // namespace agoq

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

#include <sentencepiece_processor.h>

namespace agoq {

using namespace agoq::data_test;

namespace {

// One small model shared by the tests (training takes a moment).
const Tokenizer& small_tokenizer() {
  static const Tokenizer tok = Tokenizer::train(synthetic_text(3000), {.vocab_size = 400});
  return tok;
}

}  // namespace

TEST(Tokenizer, TrainsRequestedVocabWithStandardSpecials) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.piece(3), "<0x00>");  // byte fallback pieces follow the specials
  EXPECT_EQ(tok.piece_id("<0x41>"), 3 + 0x41);
  EXPECT_GT(tok.piece_id("\xE2\x96\x81the"), 258);  // "▁the" was learned
  EXPECT_EQ(tok.piece_id("no-such-piece"), -1);
  // Learned merges compress text of the same kind well below one token per byte.
  const std::string sample = synthetic_text(50, 99);
  EXPECT_LT(tok.encode(sample).size(), sample.size() / 2);
}

TEST(Tokenizer, RoundTripsArbitraryUtf8) {
  const Tokenizer& tok = small_tokenizer();
  const std::vector<std::string> texts = {
      "It is a truth universally acknowledged, that a single man in possession of a good fortune.",
      "  leading,   repeated\tand trailing whitespace  \n\n\nblank lines\r\n",
      "emoji \xF0\x9F\x8E\x89\xF0\x9F\xA6\x80, CJK \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E, accents \xC3\xA9\xC3\xA0\xC3\xBC",
      "ZWJ family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 and numbers 1234567890",
      "",
      " ",
      "\n",
  };
  for (const std::string& s : texts) {
    const std::vector<int32_t> ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << s;
    for (int32_t id : ids) {
      EXPECT_GE(id, 3);  // never unk/bos/eos
      EXPECT_LT(id, tok.vocab_size());
    }
  }
  // Unseen characters fall back to their UTF-8 bytes.
  const auto ids = tok.encode("\xF0\x9F\x8E\x89");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok.piece(ids[0]), "<0xF0>");
}

TEST(Tokenizer, ChunkedEncodingEqualsWholeText) {
  const Tokenizer& tok = small_tokenizer();
  const std::string text = synthetic_text(3000, 5);  // several encode chunks (16 KiB each)
  ASSERT_GT(text.size(), 100000u);
  const auto whole = tok.encode(text);
  const size_t cut = text.find('\n', text.size() / 3) + 1;
  auto parts = tok.encode(std::string_view(text).substr(0, cut));
  const auto rest = tok.encode(std::string_view(text).substr(cut));
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(tok.decode(whole), text);
}

// A text of one line (no newline to cut at) is cut before spaces: the same ids as SentencePiece encoding it whole.
TEST(Tokenizer, OneLongLineEncodesAsSentencePieceDoesWhole) {
  const Tokenizer& tok = small_tokenizer();
  std::string line = synthetic_text(3000, 7);
  for (char& c : line)
    if (c == '\n') c = ' ';
  line += "  double  spaces   and\ttabs\t\tat the end";
  ASSERT_GT(line.size(), 4 * (size_t(1) << 14));  // several chunks
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(tok.serialized()).ok());
  std::vector<int> whole;
  ASSERT_TRUE(sp.Encode(line, &whole).ok());
  const std::vector<int32_t> ids = tok.encode(line);
  EXPECT_EQ(ids, std::vector<int32_t>(whole.begin(), whole.end()));
  EXPECT_EQ(tok.decode(ids), line);
}

// A run with neither newline nor space (64 KiB and more) still encodes in bounded chunks and round-trips.
TEST(Tokenizer, ARunWithoutSpacesRoundTrips) {
  const Tokenizer& tok = small_tokenizer();
  std::string run;
  for (int i = 0; run.size() < 300000; ++i) run += "abc\xC3\xA9\xE6\x97\xA5" + std::to_string(i % 10);
  EXPECT_EQ(tok.decode(tok.encode(run)), run);
}

// SentencePiece's advice about a flag agoq does not have is said in agoq's terms.
TEST(Tokenizer, TooManyCharactersForTheVocabularyIsSaidInAgoqsTerms) {
  std::string text;
  for (int rep = 0; rep < 20; ++rep)
    for (uint32_t cp = 0x4E00; cp < 0x4E00 + 400; ++cp) {  // 400 distinct CJK characters
      text += char(0xE0 | (cp >> 12)), text += char(0x80 | ((cp >> 6) & 0x3F)), text += char(0x80 | (cp & 0x3F));
      if (cp % 16 == 0) text += ' ';
    }
  try {
    Tokenizer::train(text, {.vocab_size = 300});
    FAIL() << "trained 300 pieces over 400 characters";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("distinct characters"), std::string::npos) << m;
    EXPECT_NE(m.find("give a vocabulary size above"), std::string::npos) << m;
    EXPECT_EQ(m.find("character_coverage"), std::string::npos) << m;
  }
}

TEST(Tokenizer, TrainingIsDeterministicAndSaveLoadRoundTrips) {
  const std::string text = synthetic_text(1500, 9);
  const Tokenizer a = Tokenizer::train(text, {.vocab_size = 320});
  const Tokenizer b = Tokenizer::train(text, {.vocab_size = 320});
  EXPECT_EQ(a.serialized(), b.serialized());
  const fs::path p = data_test_dir("tok") / "tokenizer.model";
  a.save(p);
  const Tokenizer c = Tokenizer::load(p);
  EXPECT_EQ(c.serialized(), a.serialized());
  EXPECT_EQ(c.encode(text), a.encode(text));
  // max_bytes trains on a prefix only (a different, still valid model).
  const Tokenizer d = Tokenizer::train(text, {.vocab_size = 320, .max_bytes = 20000});
  EXPECT_NE(d.serialized(), a.serialized());
  EXPECT_EQ(d.decode(d.encode(text)), text);
}

TEST(Tokenizer, ErrorsNameTheModel) {
  const fs::path d = data_test_dir("tok_err");
  expect_error([&] { Tokenizer::load((d / "missing.model").string()); }, {"missing.model", "cannot open"});
  file_put(d / "corrupt.model", "this is not a protobuf \xff\xff\xff\xff");
  expect_error([&] { Tokenizer::load((d / "corrupt.model").string()); },
               {"corrupt.model", "not a valid SentencePiece model"});
  expect_error([&] { Tokenizer::train("some text", {.vocab_size = 100}); }, {"vocab size 100"});
  expect_error([&] { Tokenizer::train(" \n\n ", {.vocab_size = 300}); }, {"empty"});
  const Tokenizer& tok = small_tokenizer();
  expect_error([&] { tok.decode(std::vector<int32_t>{5, 400}); }, {"400", "outside the vocabulary"});
  expect_error([&] { tok.piece(-1); }, {"-1"});
  expect_error([] { Tokenizer().encode("x"); }, {"no model loaded"});
}

}  // namespace agoq

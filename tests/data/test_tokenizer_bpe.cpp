// Byte-level BPE and GGUF-style vocabularies against Hugging Face tokenizers, transformers' AutoTokenizer and
// sentencepiece (tests/data/tokenizer_reference.py builds the references; tokenizer_ref.h says how).
#include <gtest/gtest.h>
#include <omp.h>
#include <sentencepiece_processor.h>

#include "tests/data/tokenizer_ref.h"

namespace agoq {

using namespace agoq::tokenizer_ref;
using data_test::data_test_dir;
using data_test::file_bytes;

namespace {

const char* const kBpeNames[] = {"trained", "gpt2", "gpt2_prefix", "llama3", "llama3_class", "smollm"};

struct Sample {
  std::vector<int32_t> plain, model;
  std::string decode;
};

std::vector<Sample> samples_read(const fs::path& p) {
  std::vector<Sample> out;
  for (const auto& r : nlohmann::json::parse(file_bytes(p)))
    out.push_back({r["plain"].get<std::vector<int32_t>>(), r["model"].get<std::vector<int32_t>>(),
                   r["decode"].get<std::string>()});
  return out;
}

// Checks one tokenizer against its reference folder: the whole text (or its start), and each sample with and without
// special tokens.
void expect_same_as_reference(const Tokenizer& tok, const fs::path& dir, bool small = false) {
  const Reference& ref = reference();
  const std::vector<int32_t> ids = tok.encode(small ? ref.small : ref.text);
  EXPECT_EQ(first_difference(tok, ids, ids_read(dir / "text.ids")), "") << dir;
  const std::vector<Sample> want = samples_read(dir / "samples.json");
  ASSERT_EQ(want.size(), ref.samples.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& s = ref.samples[i];
    EXPECT_EQ(first_difference(tok, tok.encode(s), want[i].plain), "") << dir << " sample '" << s << "'";
    EXPECT_EQ(first_difference(tok, tok.encode_for_model(s), want[i].model), "") << dir << " for model: '" << s << "'";
    EXPECT_EQ(tok.decode(want[i].plain), want[i].decode) << dir << " decode of '" << s << "'";
  }
}

// A BpeSpec made the way the GGUF reader makes one (every id's token, the merges, the control tokens as added
// ones, the split regexes named by tokenizer.ggml.pre) from a reference tokenizer.json.
BpeSpec gguf_like_spec(const Tokenizer& tok, const fs::path& json_path, const std::string& pre) {
  const nlohmann::json j = nlohmann::json::parse(file_bytes(json_path));
  BpeSpec s;
  for (int i = 0; i < tok.vocab_size(); ++i) s.vocab.push_back(tok.piece(i));
  for (const auto& m : j["model"]["merges"]) s.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
  for (const auto& a : j["added_tokens"])
    s.added.push_back({a["id"].get<int>(), a["content"].get<std::string>(), true});
  s.split_regexes = bpe_split_regexes_for_gguf_pre(pre);
  s.ignore_merges = bpe_ignore_merges_for_gguf_pre(pre);
  s.bos_id = tok.bos_id(), s.eos_id = tok.eos_id(), s.unk_id = tok.unk_id();
  s.add_bos = tok.add_bos(), s.add_eos = tok.add_eos();
  return s;
}

}  // namespace

TEST(TokenizerBpe, IdsEqualTokenizersOnVariedText) {
  const Reference& ref = reference();
  ASSERT_GE(ref.text.size(), size_t(1) << 20);
  for (const char* name : kBpeNames) {
    const Tokenizer tok = Tokenizer::load((ref.dir / name).string());
    EXPECT_EQ(tok.kind(), TokenizerKind::byte_bpe) << name;
    EXPECT_STREQ(tok.kind_name(), "byte-level bpe");
    const std::string n = name;
    expect_same_as_reference(tok, ref.dir / name, n == "gpt2_prefix" || n == "llama3_class" || n == "smollm");
  }
}

TEST(TokenizerBpe, DecodeGivesTheTextBack) {
  const Reference& ref = reference();
  for (const char* name : {"trained", "gpt2", "llama3", "smollm"}) {
    const Tokenizer tok = Tokenizer::load((ref.dir / name / "tokenizer.json").string());
    bool exact = false;
    const std::vector<int32_t> ids = tok.encode(ref.text, false, &exact);
    EXPECT_TRUE(exact) << name;
    EXPECT_EQ(tok.decode(ids), ref.text) << name;
  }
}

// What AutoTokenizer adds: Llama 3's BOS from its template; LlamaTokenizerFast's own rebuilt template (EOS, no BOS);
// nothing for GPT-2.
TEST(TokenizerBpe, SpecialTokensFollowTheConfiguration) {
  const Reference& ref = reference();
  const Tokenizer llama = Tokenizer::load((ref.dir / "llama3").string());
  EXPECT_TRUE(llama.add_bos());
  EXPECT_FALSE(llama.add_eos());
  EXPECT_EQ(llama.piece(llama.bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(llama.piece(llama.eos_id()), "<|end_of_text|>");
  const Tokenizer llama_class = Tokenizer::load((ref.dir / "llama3_class").string());
  EXPECT_FALSE(llama_class.add_bos());
  EXPECT_TRUE(llama_class.add_eos());
  EXPECT_NE(llama_class.identity(), llama.identity());
  const Tokenizer gpt2 = Tokenizer::load((ref.dir / "gpt2").string());
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_EQ(gpt2.piece(gpt2.eos_id()), "<|endoftext|>");
  EXPECT_EQ(gpt2.piece_id("<|endoftext|>"), gpt2.eos_id());
  EXPECT_EQ(gpt2.piece_id("no such token"), -1);
}

TEST(TokenizerBpe, SavedFilesReloadToTheSameTokenizer) {
  const Reference& ref = reference();
  const std::string part = ref.text.substr(0, 200000);
  for (const char* name : kBpeNames) {
    const Tokenizer tok = Tokenizer::load((ref.dir / name).string());
    const fs::path d = data_test_dir(std::string("saved_") + name);
    tok.save_files(d.string());
    const Tokenizer back = Tokenizer::load(d.string());
    EXPECT_EQ(back.identity(), tok.identity()) << name;
    EXPECT_EQ(back.encode(part), tok.encode(part)) << name;
    EXPECT_EQ(back.encode_for_model("x"), tok.encode_for_model("x")) << name;
    expect_error([&] { tok.save((d / "tokenizer.model").string()); }, {"save_files"});
  }
}

// A GGUF gpt2 vocabulary (from_bpe) is the same tokenizer as its tokenizer.json: same identity, same ids; the
// files made from it load in transformers to the same ids.
TEST(TokenizerBpe, SpecLikeGgufEqualsTheJson) {
  const Reference& ref = reference();
  const std::pair<const char*, const char*> cases[] = {
      {"llama3", "llama-bpe"}, {"gpt2", "gpt-2"}, {"smollm", "smollm"}};
  std::vector<Tokenizer> made;
  std::string dirs;
  for (const auto& [name, pre] : cases) {
    const Tokenizer json = Tokenizer::load((ref.dir / name).string());
    Tokenizer gguf = Tokenizer::from_bpe(gguf_like_spec(json, ref.dir / name / "tokenizer.json", pre), "gguf-like");
    EXPECT_EQ(gguf.identity(), json.identity()) << name;
    EXPECT_EQ(gguf.encode(ref.text), json.encode(ref.text)) << name;
    const fs::path d = data_test_dir(std::string("from_bpe_") + name);
    gguf.save_files(d.string());
    dirs.append(" ").append(d.string());
    made.push_back(std::move(gguf));
  }
  const fs::path out = data_test_dir("from_bpe_auto") / "auto.json";
  python_ref_run("tests/data/tokenizer_reference.py",
                 "encode " + (ref.dir / "samples.json").string() + " " + out.string() + dirs);
  const auto want = nlohmann::json::parse(file_bytes(out)).get<std::vector<std::vector<std::vector<int32_t>>>>();
  ASSERT_EQ(want.size(), made.size());
  for (size_t k = 0; k < made.size(); ++k) {
    ASSERT_EQ(want[k].size(), ref.samples.size());
    for (size_t i = 0; i < want[k].size(); ++i)
      EXPECT_EQ(first_difference(made[k], made[k].encode_for_model(ref.samples[i]), want[k][i]), "")
          << cases[k].first << " sample '" << ref.samples[i] << "'";
  }
}

// A GGUF llama vocabulary (pieces, scores, types) built into a ModelProto encodes as sentencepiece does with the
// tokenizer.model it came from, and has its identity.
TEST(TokenizerSentencePieceVocab, EqualsTheModelItCameFrom) {
  const Reference& ref = reference();
  const fs::path dir = ref.dir / "llama_spm";
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir / "tokenizer.model").string()).ok());
  SentencePieceVocab v;
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    v.pieces.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    v.types.push_back(sp.IsUnknown(i) ? 2 : sp.IsControl(i) ? 3 : sp.IsUnused(i) ? 5 : sp.IsByte(i) ? 6 : 1);
  }
  v.bos_id = sp.bos_id(), v.eos_id = sp.eos_id(), v.unk_id = sp.unk_id(), v.pad_id = sp.pad_id();
  const Tokenizer tok = Tokenizer::from_sentencepiece_vocab(v, "gguf-like llama vocabulary");
  EXPECT_EQ(tok.kind(), TokenizerKind::sentencepiece);
  expect_same_as_reference(tok, dir);
  std::string spaced;  // SentencePiece writes a space as U+2581, so U+2581 decodes as a space
  for (size_t p = 0; p < ref.text.size(); ++p) {
    const bool lower_block = ref.text.compare(p, 3, "\xE2\x96\x81") == 0;
    spaced.push_back(lower_block ? ' ' : ref.text[p]);
    p += lower_block ? 2 : 0;
  }
  EXPECT_TRUE(tok.decode(tok.encode(ref.text)) == spaced);
  const Tokenizer model = Tokenizer::load(dir.string());  // tokenizer.model with its config (add_bos_token)
  EXPECT_TRUE(model.add_bos());
  EXPECT_EQ(model.identity(), tok.identity());
  v.add_bos = false;
  EXPECT_NE(Tokenizer::from_sentencepiece_vocab(v, "no bos").identity(), tok.identity());
  // Its files reload to the same tokenizer, BOS rule included.
  const fs::path d = data_test_dir("spm_files");
  tok.save_files(d.string());
  EXPECT_EQ(Tokenizer::load(d.string()).identity(), tok.identity());
  EXPECT_EQ(Tokenizer::load((d / "tokenizer.model").string()).identity(), tok.identity());
}

// Large texts are split over threads; the ids are a whole-text scan's, also where chunks meet inside long runs of
// whitespace or of one character class and where a chunk's scan must give way to one thread.
TEST(TokenizerBpe, ParallelEncodeEqualsOneThread) {
  const Reference& ref = reference();
  const Tokenizer tok = Tokenizer::load((ref.dir / "llama3").string());
  const std::string text =
      ref.text + std::string(400000, ' ') + "x" + std::string(300000, '\n') + std::string(300000, 'a') + "!";
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<int32_t> one = tok.encode(text);
  omp_set_num_threads(4);
  const std::vector<int32_t> four = tok.encode(text);
  omp_set_num_threads(threads);
  EXPECT_EQ(first_difference(tok, four, one), "");
}

}  // namespace agoq

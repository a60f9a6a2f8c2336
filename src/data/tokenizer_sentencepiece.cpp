// The SentencePiece engine (tokenizer.model): training, chunked parallel encoding, and the GGUF `llama` vocabulary
// built into a ModelProto (sentencepiece_proto.cpp).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <regex>
#include <unordered_map>

#include "core/error.h"
#include "data/sentencepiece_proto.h"
#include "data/tokenizer_engine.h"

namespace agoq {

namespace {

// SentencePiece's message without the source location it leads with ("Internal: ./src/x.cc(660) [cond] why").
std::string sentencepiece_reason(const sentencepiece::util::Status& st) {
  const std::string text = st.ToString();
  std::smatch m;
  if (std::regex_match(text, m, std::regex(R"(\w+: \S+\(\d+\) \[.*?\] (.*))"))) return m[1].str();
  return text;
}

// SentencePiece drops training sentences over max_sentence_length (4192 bytes by default); long lines (a whole
// paragraph per line) are cut at a space below this instead.
constexpr size_t kMaxSentenceBytes = 4000;
constexpr size_t kEncodeChunkBytes = 1 << 14;  // SentencePiece BPE encoding is superlinear in input length
constexpr size_t kEncodeChunkMost = 1 << 16;   // where a chunk is cut when it has found no safe place

// Where the chunk at the start of `text` ends, and where the next one starts (see Tokenizer::encode). `cut`:
//  * after_newline: after a newline, or (at_spaces) before a space that follows another character: no dummy
//    prefix, no whitespace folding, so each chunk encodes as it would inside the whole text;
//  * at_single_space: a dummy prefix (Llama's models): only at a space between two other characters, dropping the
//    space, whose "▁" the next chunk's dummy prefix gives back;
//  * never: the text whole (whitespace folding, or pieces that could cross such a space).
enum class ChunkCut { after_newline, at_single_space, never };

std::pair<size_t, size_t> encode_chunk_end(std::string_view text, ChunkCut cut, bool at_spaces) {
  if (cut == ChunkCut::never || text.size() <= kEncodeChunkBytes) return {text.size(), text.size()};
  const std::string_view window = text.substr(0, kEncodeChunkMost);
  if (cut == ChunkCut::at_single_space) {
    for (size_t p = window.find(' ', kEncodeChunkBytes); p != std::string_view::npos && p + 1 < window.size();
         p = window.find(' ', p + 1))
      if (text[p - 1] != ' ' && text[p + 1] != ' ') return {p, p + 1};
    return {text.size(), text.size()};  // no such space within reach: the rest whole
  }
  if (const size_t nl = window.find('\n', kEncodeChunkBytes); nl != std::string_view::npos) return {nl + 1, nl + 1};
  if (at_spaces)
    for (size_t p = window.find(' ', kEncodeChunkBytes); p != std::string_view::npos; p = window.find(' ', p + 1))
      if (text[p - 1] != ' ') return {p, p};
  if (text.size() <= kEncodeChunkMost) return {text.size(), text.size()};
  size_t end = kEncodeChunkMost;
  while (end > 0 && (uint8_t(text[end]) & 0xC0) == 0x80) --end;  // whole UTF-8 characters
  return {end, end};
}

// Whether no piece holds U+2581 (SentencePiece's space) after another character: then no piece can cross a cut made
// before a space that follows a non-space.
bool pieces_start_words(const sentencepiece::SentencePieceProcessor& sp) {
  static const std::string kSpace = "\xE2\x96\x81";
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    std::string_view p = sp.IdToPiece(i);
    while (p.substr(0, kSpace.size()) == kSpace) p.remove_prefix(kSpace.size());
    if (p.find(kSpace) != std::string_view::npos) return false;
  }
  return true;
}

// Feeds the lines of a text to the trainer without copying the text into a temp file.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : rest_(text) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return cur_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    for (;;) {
      if (rest_.empty()) {
        done_ = true;
        return;
      }
      // Look for the line's end only as far as a sentence may reach: a single 200 MB line is read once, not once
      // per sentence cut from it.
      size_t end = std::min(rest_.substr(0, kMaxSentenceBytes + 1).find('\n'), rest_.size());
      size_t next = end + (end < rest_.size());
      if (end > kMaxSentenceBytes) {
        size_t cut = rest_.rfind(' ', kMaxSentenceBytes);
        if (cut == std::string_view::npos || cut == 0) {
          cut = kMaxSentenceBytes;
          while (cut > 0 && (uint8_t(rest_[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 characters whole
        }
        end = next = cut;
      }
      std::string_view line = rest_.substr(0, end);
      rest_.remove_prefix(next);
      if (line.find_first_not_of(" \t") != std::string_view::npos) {
        cur_.assign(line);
        return;
      }
    }
  }

 private:
  std::string_view rest_;
  std::string cur_;
  bool done_ = false;
};

class SentencePieceEngine final : public TokenizerEngine {
 public:
  SentencePieceEngine(std::string proto, const std::string& what, bool add_bos, bool add_eos)
      : proto_(std::move(proto)), what_(what), add_bos_(add_bos), add_eos_(add_eos) {
    const auto st = sp_.LoadFromSerializedProto(proto_);
    const std::string why = st.ok() ? "no pieces" : sentencepiece_reason(st);
    AGOQ_CHECK(st.ok() && sp_.GetPieceSize() > 0, "tokenizer ", what, ": not a valid SentencePiece model",
               !why.empty()               ? " (" + why + ")"
               : what.ends_with(".model") ? std::string()
                                          : std::string(" (nor a tokenizer.json or a folder holding one)"));
    pieces_start_words_ = pieces_start_words(sp_);
    const SentencePieceProtoSettings set = sentencepiece_proto_settings(proto_);
    cut_ = set.remove_extra_whitespaces || set.treat_whitespace_as_suffix ? ChunkCut::never
           : !set.add_dummy_prefix                                        ? ChunkCut::after_newline
           : pieces_start_words_                                          ? ChunkCut::at_single_space
                                                                          : ChunkCut::never;
    add_bos_ = add_bos && sp_.bos_id() >= 0;
    add_eos_ = add_eos && sp_.eos_id() >= 0;
  }

  TokenizerKind kind() const override { return TokenizerKind::sentencepiece; }
  const std::string& serialized() const override { return proto_; }
  std::vector<int32_t> encode(std::string_view text, bool progress, bool* round_trips) const override;
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    const auto st = sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &out);
    AGOQ_CHECK(st.ok(), "tokenizer ", what_, ": decode failed: ", sentencepiece_reason(st));
    return out;
  }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  std::string piece(int id) const override { return sp_.IdToPiece(id); }
  int piece_id(std::string_view piece) const override {
    const int id = sp_.PieceToId(piece);
    return id == sp_.unk_id() && piece != sp_.IdToPiece(id) ? -1 : id;
  }
  int unk_id() const override { return sp_.unk_id(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  bool add_bos() const override { return add_bos_; }
  bool add_eos() const override { return add_eos_; }
  TokenizerFiles files() const override {
    TokenizerFiles f = {{"tokenizer.model", proto_}};
    if (add_bos_ || add_eos_)  // a tokenizer.model alone adds neither (tokenizer.cpp)
      f.emplace_back("tokenizer_config.json",
                     std::string("{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": ") +
                         (add_bos_ ? "true" : "false") + ", \"add_eos_token\": " + (add_eos_ ? "true" : "false") +
                         "}\n");
    return f;
  }
  uint64_t identity_hash() const override;

 private:
  sentencepiece::SentencePieceProcessor sp_;
  std::string proto_, what_;
  bool add_bos_, add_eos_;
  bool pieces_start_words_ = false;  // no piece holds a space (U+2581) after another character
  ChunkCut cut_ = ChunkCut::never;
};

std::vector<int32_t> SentencePieceEngine::encode(std::string_view text, bool progress, bool* round_trips) const {
  std::vector<std::string_view> chunks;
  const size_t total = text.size();
  while (!text.empty()) {
    const auto [end, next] = encode_chunk_end(text, cut_, pieces_start_words_);
    chunks.push_back(text.substr(0, end));
    text.remove_prefix(next);
  }
  std::vector<std::vector<int>> parts(chunks.size());
  std::string error;
  size_t done = 0;
  int reported = 0;  // tenths
  bool exact = true;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto st = sp_.Encode(chunks[i], &parts[i]);
    bool same = true;
    if (st.ok() && round_trips) {
      std::string back;
      st = sp_.Decode(parts[i], &back);
      same = back == chunks[i];
    }
#pragma omp critical
    {
      if (!st.ok()) error = sentencepiece_reason(st);
      exact = exact && same;
      done += chunks[i].size();
      if (progress && int(10 * done / total) > reported) {
        reported = int(10 * done / total);
        std::fprintf(stderr, "encoding: %d%% of %.1f MB\n", 10 * reported, double(total) / 1e6);
      }
    }
  }
  AGOQ_CHECK(error.empty(), "tokenizer ", what_, ": encode failed: ", error);
  if (round_trips) *round_trips = exact;
  std::vector<int32_t> ids;
  size_t n = 0;
  for (const auto& p : parts) n += p.size();
  ids.reserve(n);
  for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

// Pieces with their scores and types, the settings that change ids, the special ids and what encode_for_model
// adds: the same for a tokenizer.model and for the ModelProto built from its GGUF vocabulary.
uint64_t SentencePieceEngine::identity_hash() const {
  uint64_t h = identity_mix(kHashFnv1a64Basis, "sentencepiece");
  const SentencePieceProtoSettings s = sentencepiece_proto_settings(proto_);
  for (int i = 0; i < sp_.GetPieceSize(); ++i) {
    h = identity_mix(h, sp_.IdToPiece(i));
    h = identity_mix_value(h, sp_.GetScore(i));
    h = identity_mix_value(h, size_t(i) < s.types.size() ? s.types[i] : 1);
  }
  const int32_t flags[] = {s.model_type,
                           s.byte_fallback,
                           s.treat_whitespace_as_suffix,
                           s.add_dummy_prefix,
                           s.remove_extra_whitespaces,
                           s.escape_whitespaces};
  h = identity_mix_value(h, flags);
  h = identity_mix(h, s.precompiled_charsmap);
  const int32_t ids[] = {sp_.unk_id(), sp_.bos_id(), sp_.eos_id(), add_bos_, add_eos_};
  return identity_mix_value(h, ids);
}

}  // namespace

std::unique_ptr<TokenizerEngine> sentencepiece_engine(std::string proto, const std::string& what, bool add_bos,
                                                      bool add_eos) {
  return std::make_unique<SentencePieceEngine>(std::move(proto), what, add_bos, add_eos);
}

Tokenizer Tokenizer::train(std::string_view text, const TokenizerTrainOptions& opt) {
  AGOQ_CHECK(opt.vocab_size >= 260, "tokenizer: vocab size ", opt.vocab_size,
             " is too small (byte fallback alone needs 256 + 3 special pieces)");
  AGOQ_CHECK(opt.num_threads >= 1, "tokenizer: num_threads must be >= 1");
  if (opt.max_bytes && text.size() > opt.max_bytes) {
    size_t cut = text.rfind('\n', opt.max_bytes);
    if (cut == std::string_view::npos)
      for (cut = opt.max_bytes; cut > 0 && (uint8_t(text[cut]) & 0xC0) == 0x80;) --cut;  // whole characters
    text = text.substr(0, cut);
  }
  AGOQ_CHECK(text.find_first_not_of(" \t\n") != std::string_view::npos, "tokenizer: training text is empty");
  // Identity normalization and kept whitespace make encoding lossless; split_digits and whitespace-only pieces
  // follow LLaMA's tokenizer.
  const std::unordered_map<std::string, std::string> args{
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes + 192)},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", std::to_string(opt.num_threads)},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(opt.seed);
  LineIterator lines(text);
  std::string proto;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto);
  if (!st.ok()) {
    const std::string why = sentencepiece_reason(st);
    std::smatch at_most;
    if (std::regex_search(why, at_most, std::regex(R"(Vocabulary size too high.*<= (\d+))")))
      fail("the text (", text.size(), " bytes) is too small for a ", opt.vocab_size, "-piece vocabulary: give more ",
           "text, or a vocabulary size of ", at_most[1].str(), " or less");
    std::smatch chars;  // SentencePiece's advice names a flag agoq does not have (--character_coverage)
    if (std::regex_search(why, chars, std::regex(R"(smaller than required_chars\. (\d+) vs (\d+))")))
      fail("the text has ", chars[2].str(), " distinct characters and every one needs a piece of its own, more than ",
           "a vocabulary size of ", opt.vocab_size, " allows: give a vocabulary size above ", chars[2].str(),
           " (binary or many-script input has many characters; is this the text you meant?)");
    fail("tokenizer training (vocab size ", opt.vocab_size, ", ", text.size(), " bytes of text) failed: ", why);
  }
  return from_serialized(std::move(proto), "trained tokenizer");
}

Tokenizer Tokenizer::from_sentencepiece_vocab(const SentencePieceVocab& vocab, const std::string& what) {
  Tokenizer t;
  t.engine_ = sentencepiece_engine(sentencepiece_proto_from_vocab(vocab, what), what, vocab.add_bos, vocab.add_eos);
  t.origin_ = what;
  return t;
}

}  // namespace agoq

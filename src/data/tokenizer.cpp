#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"

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

// Where the chunk at the start of `text` ends (see Tokenizer::encode).
size_t encode_chunk_end(std::string_view text, bool at_spaces) {
  if (text.size() <= kEncodeChunkBytes) return text.size();
  const std::string_view window = text.substr(0, kEncodeChunkMost);
  if (const size_t nl = window.find('\n', kEncodeChunkBytes); nl != std::string_view::npos) return nl + 1;
  if (at_spaces)
    for (size_t p = window.find(' ', kEncodeChunkBytes); p != std::string_view::npos; p = window.find(' ', p + 1))
      if (text[p - 1] != ' ') return p;
  if (text.size() <= kEncodeChunkMost) return text.size();
  size_t cut = kEncodeChunkMost;
  while (cut > 0 && (uint8_t(text[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
  return cut;
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

std::string file_read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  AGOQ_CHECK(f, "tokenizer ", path, ": cannot open file");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

const sentencepiece::SentencePieceProcessor& Tokenizer::sp() const {
  AGOQ_CHECK(sp_, "tokenizer: no model loaded");
  return *sp_;
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
           "text, or --vocab-size ", at_most[1].str(), " or less");
    std::smatch chars;  // SentencePiece's advice names a flag agoq does not have (--character_coverage)
    if (std::regex_search(why, chars, std::regex(R"(smaller than required_chars\. (\d+) vs (\d+))")))
      fail("the text has ", chars[2].str(), " distinct characters and every one needs a piece of its own, more than ",
           "--vocab-size ", opt.vocab_size, " allows: give --vocab-size above ", chars[2].str(),
           " (binary or many-script input has many characters; is this the text you meant?)");
    fail("tokenizer training (vocab size ", opt.vocab_size, ", ", text.size(), " bytes of text) failed: ", why);
  }
  return from_serialized(std::move(proto), "trained tokenizer");
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = path + "/tokenizer.model";
  AGOQ_CHECK(file.size() < 5 || file.substr(file.size() - 5) != ".json", "tokenizer ", path,
             ": byte-level BPE (tokenizer.json) is not supported yet");
  return from_serialized(file_read_bytes(file), file);
}

Tokenizer Tokenizer::from_bpe(BpeSpec, const std::string& what) {
  fail("tokenizer ", what, ": byte-level BPE is not supported yet");
}

Tokenizer Tokenizer::from_sentencepiece_vocab(const SentencePieceVocab&, const std::string& what) {
  fail("tokenizer ", what, ": SentencePiece vocabularies from GGUF are not supported yet");
}

std::vector<std::pair<std::string, std::string>> Tokenizer::files() const {
  AGOQ_CHECK(sp_, "tokenizer: no model loaded");
  return {{"tokenizer.model", proto_}};
}

void Tokenizer::save_files(const std::string& dir) const {
  for (const auto& [name, bytes] : files()) atomic_file_write(dir + "/" + name, bytes);
}

std::string Tokenizer::identity() const {
  const auto& sp = this->sp();
  uint64_t h = hash_fnv1a64("sentencepiece", 13);
  auto mix = [&h](std::string_view s) {
    const uint64_t n = s.size();
    h = hash_fnv1a64(&n, sizeof n, h);
    h = hash_fnv1a64(s.data(), s.size(), h);
  };
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    mix(sp.IdToPiece(i));
    const float score = sp.GetScore(i);
    h = hash_fnv1a64(&score, sizeof score, h);
  }
  const int32_t ids[] = {sp.unk_id(), sp.bos_id(), sp.eos_id(), add_bos(), add_eos()};
  h = hash_fnv1a64(ids, sizeof ids, h);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

TokenizerKind Tokenizer::kind() const { return TokenizerKind::sentencepiece; }
const char* Tokenizer::kind_name() const { return "sentencepiece"; }

std::vector<int32_t> Tokenizer::encode_for_model(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  if (add_bos()) ids.insert(ids.begin(), bos_id());
  if (add_eos()) ids.push_back(eos_id());
  return ids;
}

bool Tokenizer::add_bos() const { return sp().bos_id() >= 0; }
bool Tokenizer::add_eos() const { return false; }
bool Tokenizer::loaded() const { return sp_ != nullptr; }

Tokenizer Tokenizer::from_serialized(std::string serialized, const std::string& what) {
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = t.sp_->LoadFromSerializedProto(serialized);
  AGOQ_CHECK(st.ok() && t.sp_->GetPieceSize() > 0, "tokenizer ", what,
             ": not a valid SentencePiece model (", st.ok() ? "no pieces" : sentencepiece_reason(st), ")");
  t.proto_ = std::move(serialized);
  t.origin_ = what;
  t.pieces_start_words_ = pieces_start_words(*t.sp_);
  return t;
}

void Tokenizer::save(const std::string& path) const {
  AGOQ_CHECK(sp_, "tokenizer: no model to save to ", path);
  atomic_file_write(path, proto_);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool progress, bool* round_trips) const {
  const auto& sp = this->sp();
  std::vector<std::string_view> chunks;
  const size_t total = text.size();
  while (!text.empty()) {
    const size_t end = encode_chunk_end(text, pieces_start_words_);
    chunks.push_back(text.substr(0, end));
    text.remove_prefix(end);
  }
  std::vector<std::vector<int>> parts(chunks.size());
  std::string error;
  size_t done = 0;
  int reported = 0;  // tenths
  bool exact = true;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto st = sp.Encode(chunks[i], &parts[i]);
    bool same = true;
    if (st.ok() && round_trips) {
      std::string back;
      st = sp.Decode(parts[i], &back);
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
  AGOQ_CHECK(error.empty(), "tokenizer ", origin_, ": encode failed: ", error);
  if (round_trips) *round_trips = exact;
  std::vector<int32_t> ids;
  size_t n = 0;
  for (const auto& p : parts) n += p.size();
  ids.reserve(n);
  for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const auto& sp = this->sp();
  const int n = sp.GetPieceSize();
  std::vector<int> v(ids.begin(), ids.end());
  for (size_t i = 0; i < v.size(); ++i)
    AGOQ_CHECK(v[i] >= 0 && v[i] < n, "tokenizer ", origin_, ": token id ", v[i], " at position ", i,
               " is outside the vocabulary (size ", n, ")");
  std::string out;
  const auto st = sp.Decode(v, &out);
  AGOQ_CHECK(st.ok(), "tokenizer ", origin_, ": decode failed: ", sentencepiece_reason(st));
  return out;
}

int Tokenizer::vocab_size() const { return sp().GetPieceSize(); }

std::string Tokenizer::piece(int id) const {
  AGOQ_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", origin_, ": token id ", id, " is outside the vocabulary (size ",
             vocab_size(), ")");
  return sp().IdToPiece(id);
}

int Tokenizer::piece_id(std::string_view piece) const {
  const int id = sp().PieceToId(piece);
  return id == sp().unk_id() && piece != sp().IdToPiece(id) ? -1 : id;
}

int Tokenizer::unk_id() const { return sp().unk_id(); }
int Tokenizer::bos_id() const { return sp().bos_id(); }
int Tokenizer::eos_id() const { return sp().eos_id(); }

}  // namespace agoq

#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"

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
      size_t end = std::min(rest_.find('\n'), rest_.size());
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
    fail("tokenizer training (vocab size ", opt.vocab_size, ", ", text.size(), " bytes of text) failed: ", why);
  }
  return from_serialized(std::move(proto), "trained tokenizer");
}

Tokenizer Tokenizer::load(const std::string& path) { return from_serialized(file_read_bytes(path), path); }

Tokenizer Tokenizer::from_serialized(std::string serialized, const std::string& what) {
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = t.sp_->LoadFromSerializedProto(serialized);
  AGOQ_CHECK(st.ok() && t.sp_->GetPieceSize() > 0, "tokenizer ", what,
             ": not a valid SentencePiece model (", st.ok() ? "no pieces" : sentencepiece_reason(st), ")");
  t.proto_ = std::move(serialized);
  t.origin_ = what;
  return t;
}

void Tokenizer::save(const std::string& path) const {
  AGOQ_CHECK(sp_, "tokenizer: no model to save to ", path);
  atomic_file_write(path, proto_);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const auto& sp = this->sp();
  // Chunks end right after a '\n': newline is never inside a piece, so chunking does not change the result.
  std::vector<std::string_view> chunks;
  while (!text.empty()) {
    size_t end = text.size();
    if (end > kEncodeChunkBytes) {
      const size_t nl = text.find('\n', kEncodeChunkBytes);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    chunks.push_back(text.substr(0, end));
    text.remove_prefix(end);
  }
  std::vector<std::vector<int>> parts(chunks.size());
  std::string error;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto st = sp.Encode(chunks[i], &parts[i]);
    if (!st.ok()) {
#pragma omp critical
      error = sentencepiece_reason(st);
    }
  }
  AGOQ_CHECK(error.empty(), "tokenizer ", origin_, ": encode failed: ", error);
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

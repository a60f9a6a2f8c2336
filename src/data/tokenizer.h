// SentencePiece BPE tokenizer: train from text (deterministic), load/save .model files, encode/decode.
// Models trained here use identity normalization, no dummy prefix and no whitespace folding, with byte fallback:
// decode(encode(text)) == text for any valid UTF-8 (newlines, tabs and emoji become byte tokens when they are not
// pieces), so token streams can be split and concatenated at line boundaries.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace agoq {

struct TokenizerTrainOptions {
  int vocab_size = 4096;
  size_t max_bytes = 0;  // train on at most this many bytes of the text (cut at a line end); 0 = all
  int num_threads = 1;   // SentencePiece's result depends on it; fixed for reproducible models
  uint32_t seed = 1234;
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Trains a BPE model on `text` (split into lines as sentences; blank lines skipped).
  static Tokenizer train(std::string_view text, const TokenizerTrainOptions& opt = {});
  // Loads a .model file; errors (missing, corrupt) name the path.
  static Tokenizer load(const std::string& path);
  // Loads a serialized ModelProto; `what` names its origin in errors.
  static Tokenizer from_serialized(std::string serialized, const std::string& what);
  // Writes the .model file atomically (core/atomic_file.h).
  void save(const std::string& path) const;
  const std::string& serialized() const { return proto_; }

  // Large texts are encoded in chunks in parallel, cut where no piece can cross: after a newline, or (when every
  // piece keeps its spaces at its start, as agoq's do) before a space that follows another character; the result
  // equals encoding the whole text. Only a run of 64 KiB with neither is cut at a character boundary (the text still
  // round-trips exactly; its tokens there may differ from one whole encode). Time is linear in the text.
  // progress: a line on stderr every 10% (for long inputs). round_trips: also decode each chunk (in the same
  // parallel pass) and say whether every one gives its text back (false only for invalid UTF-8 in the input).
  std::vector<int32_t> encode(std::string_view text, bool progress = false, bool* round_trips = nullptr) const;
  std::string decode(std::span<const int32_t> ids) const;

  int vocab_size() const;
  std::string piece(int id) const;           // errors when id is out of range
  int piece_id(std::string_view piece) const;  // -1 when not in the vocabulary
  int unk_id() const;
  int bos_id() const;
  int eos_id() const;
  bool loaded() const { return sp_ != nullptr; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string proto_;
  std::string origin_;  // path or description, for error messages
  bool pieces_start_words_ = false;  // no piece holds a space (U+2581) after another character
  const sentencepiece::SentencePieceProcessor& sp() const;
};

}  // namespace agoq

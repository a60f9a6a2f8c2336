// Tokenizers: one interface, two engines (docs/tokenizers.md).
//  * SentencePiece (tokenizer.model): trained here from text (deterministic), or a model's own; or built from a GGUF
//    `llama` vocabulary. Models trained here use identity normalization, no dummy prefix and no whitespace folding,
//    with byte fallback: decode(encode(text)) == text for any valid UTF-8 (newlines, tabs and emoji become byte
//    tokens when they are not pieces), so token streams can be split and concatenated at line boundaries.
//  * Byte-level BPE (Hugging Face tokenizer.json: GPT-2, Llama 3, SmolLM, Qwen families; GGUF `gpt2` vocabularies):
//    added tokens matched first (the normalizer runs between them), then the file's split regexes (PCRE2, UTF +
//    UCP), the byte-to-unicode map and merges by rank, equal to HF `tokenizers` token for token.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

class TokenizerEngine;  // data/tokenizer_engine.h

enum class TokenizerKind : uint8_t { sentencepiece, byte_bpe };

// A byte-level BPE tokenizer as its files describe it (tokenizer.json + tokenizer_config.json, or GGUF metadata).
struct BpeSpec {
  std::vector<std::string> vocab;  // id -> token in the byte-to-unicode alphabet ("Ġthe"); "" for an unused id
  std::vector<std::pair<std::string, std::string>> merges;  // by rank, first = highest priority
  // The pre-tokenizer's split regexes, applied in order, each keeping matches and the text between as pieces
  // (tokenizers' Split with behavior Isolated; ByteLevel with use_regex adds GPT-2's regex).
  std::vector<std::string> split_regexes;
  // The normalizer's steps (tokenizer_normalizer.h: a JSON list, "" for none), run on the text between the added
  // tokens that are not `normalized` before the rest are matched and the text is split.
  std::string normalizer;
  bool add_prefix_space = false;  // ByteLevel's: a space before the text when it does not start with one
  bool ignore_merges = false;     // BPE model's: a piece that is itself in the vocabulary is one token
  struct Added {
    int id;
    std::string content;
    bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
  };
  std::vector<Added> added;  // matched in the text before splitting
  int bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;  // what encode_for_model adds (post_processor / add_bos_token)
};

// A SentencePiece vocabulary as a GGUF `llama` tokenizer gives it: pieces with scores and types (GGUF's token_type:
// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
struct SentencePieceVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = true, add_eos = false, add_dummy_prefix = true;
};

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

  // Trains a SentencePiece BPE model on `text` (split into lines as sentences; blank lines skipped).
  static Tokenizer train(std::string_view text, const TokenizerTrainOptions& opt = {});
  // Loads a tokenizer.model (SentencePiece), a tokenizer.json (byte-level BPE, with the tokenizer_config.json beside
  // it when there is one), or a folder holding either (tokenizer.json preferred). Errors (missing, corrupt, a
  // feature agoq does not implement: another model type, normalizer or pre-tokenizer) are one line naming the path
  // and the field.
  static Tokenizer load(const std::string& path);
  // Loads a serialized SentencePiece ModelProto; `what` names its origin in errors.
  static Tokenizer from_serialized(std::string serialized, const std::string& what);
  static Tokenizer from_bpe(BpeSpec spec, const std::string& what);
  static Tokenizer from_sentencepiece_vocab(const SentencePieceVocab& vocab, const std::string& what);

  // The files that hold this tokenizer, as a model folder carries them: {"tokenizer.model"} for SentencePiece,
  // {"tokenizer.json", "tokenizer_config.json"} (as read, or made from a BpeSpec) for byte-level BPE.
  std::vector<std::pair<std::string, std::string>> files() const;
  // Writes files() into `dir` atomically (core/atomic_file.h).
  void save_files(const std::string& dir) const;
  // Writes the SentencePiece .model file atomically; byte-level BPE tokenizers refuse (use save_files).
  void save(const std::string& path) const;
  const std::string& serialized() const;  // SentencePiece's ModelProto; empty for byte-level BPE
  // What makes two tokenizers give the same ids: a hex hash over the kind, every id's token, merges or scores, added
  // tokens and split rules, so the same tokenizer read from tokenizer.json or from a GGUF gives the same identity.
  std::string identity() const;
  TokenizerKind kind() const;
  const char* kind_name() const;  // "sentencepiece" or "byte-level bpe"

  // Large texts are encoded in chunks in parallel, and the result equals encoding the whole text
  // (docs/tokenizers.md). SentencePiece: cut where no piece can cross: after a newline, or (when every piece keeps
  // its spaces at its start, as agoq's do) before a space that follows another character; for a model with a dummy
  // prefix (Llama's) only at a single space between two other characters. Only a run of 64 KiB with no such place
  // is cut at a character boundary (the text still round-trips exactly; its tokens there may differ from one whole
  // encode). Byte-level BPE: chunks whose regex scans are joined where they meet, always exact.
  // progress: a line on stderr every 10% (for long inputs). round_trips: say whether decoding gives the text back
  // (false for invalid UTF-8 in the input, which byte-level BPE reads as Python's decode("utf-8", "replace")).
  // encode gives the text's tokens only (added and special tokens written in the text are matched, as tokenizers
  // does); encode_for_model adds the BOS/EOS the tokenizer's configuration adds (AutoTokenizer's default).
  std::vector<int32_t> encode(std::string_view text, bool progress = false, bool* round_trips = nullptr) const;
  std::vector<int32_t> encode_for_model(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;

  int vocab_size() const;
  std::string piece(int id) const;             // errors when id is out of range
  int piece_id(std::string_view piece) const;  // -1 when not in the vocabulary
  int unk_id() const;
  int bos_id() const;
  int eos_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool loaded() const;
  const std::string& origin() const { return origin_; }  // its path, or what made it, for messages

 private:
  std::unique_ptr<const TokenizerEngine> engine_;  // tokenizer_sentencepiece.cpp or tokenizer_bpe.cpp
  std::string origin_;                             // path or description, for error messages
  const TokenizerEngine& engine() const;
};

// GGUF `gpt2` vocabularies: the split regexes that llama.cpp's tokenizer.ggml.pre name stands for ("gpt-2" and
// "default": GPT-2's; "llama-bpe"/"llama3": Llama 3's; "qwen2"; "smollm": digits one by one, then GPT-2's), as the
// models' tokenizer.json spells them, so a GGUF and its tokenizer.json have the same identity. Other names are
// refused in one line. bpe_ignore_merges_for_gguf_pre: whether that pre-tokenizer's BPE has ignore_merges (Llama 3).
std::vector<std::string> bpe_split_regexes_for_gguf_pre(const std::string& pre);
bool bpe_ignore_merges_for_gguf_pre(const std::string& pre);

}  // namespace agoq

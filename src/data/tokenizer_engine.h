// What a Tokenizer (data/tokenizer.h) asks of its engine: SentencePiece (tokenizer_sentencepiece.cpp) or byte-level
// BPE (tokenizer_bpe.cpp). The facade checks ids and formats the identity; an engine does the rest.
// Private to src/data.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "data/tokenizer.h"

namespace agoq {

using TokenizerFiles = std::vector<std::pair<std::string, std::string>>;  // name -> bytes

class TokenizerEngine {
 public:
  virtual ~TokenizerEngine() = default;
  virtual TokenizerKind kind() const = 0;
  virtual const std::string& serialized() const = 0;  // SentencePiece's ModelProto; empty for others
  virtual std::vector<int32_t> encode(std::string_view text, bool progress, bool* round_trips) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;  // ids already checked against vocab_size()
  virtual int vocab_size() const = 0;
  virtual std::string piece(int id) const = 0;  // id already checked
  virtual int piece_id(std::string_view piece) const = 0;
  virtual int unk_id() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  virtual TokenizerFiles files() const = 0;
  virtual uint64_t identity_hash() const = 0;
};

// The SentencePiece engine over a serialized ModelProto (kept for files()). add_bos/add_eos: what encode_for_model
// adds (a tokenizer_config.json beside the model, or GGUF metadata; BOS only when the model has one); the files
// carry a tokenizer_config.json saying so when either is set.
std::unique_ptr<TokenizerEngine> sentencepiece_engine(std::string proto, const std::string& what, bool add_bos,
                                                      bool add_eos);
// The byte-level BPE engine; `files` are the files it was read from ({} to make them from the spec).
std::unique_ptr<TokenizerEngine> bpe_engine(BpeSpec spec, TokenizerFiles files, const std::string& what);

// FNV-1a 64 over a length-prefixed string, and over a plain value: the pieces of an identity.
inline uint64_t identity_mix(uint64_t h, std::string_view s) {
  const uint64_t n = s.size();
  h = hash_fnv1a64(&n, sizeof n, h);
  return hash_fnv1a64(s.data(), s.size(), h);
}
template <class T>
uint64_t identity_mix_value(uint64_t h, const T& v) {
  return hash_fnv1a64(&v, sizeof v, h);
}

}  // namespace agoq

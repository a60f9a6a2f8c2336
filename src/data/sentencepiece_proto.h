// The few fields of SentencePiece's ModelProto (sentencepiece_model.proto) that agoq writes and reads itself:
// Debian's libsentencepiece-dev ships no sentencepiece_model.pb.h, so the protobuf wire format is written and read
// by hand here (tag = field << 3 | wire type; varints; length-delimited sub-messages). Private to src/data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace agoq {

// A BPE ModelProto with byte fallback from a GGUF `llama` vocabulary, normalized as Llama's tokenizer.model is
// (no normalization rule, dummy prefix as the vocabulary says, whitespace kept and escaped as U+2581).
// Errors (sizes that disagree, no unknown piece) are one line naming `what`.
std::string sentencepiece_proto_from_vocab(const SentencePieceVocab& vocab, const std::string& what);

// What of a ModelProto changes the ids beyond its pieces: the model type, byte fallback, the normalizer.
// Absent fields read as the .proto's defaults. A malformed proto reads as far as it goes (SentencePiece has
// already accepted it when this is called).
struct SentencePieceProtoSettings {
  int32_t model_type = 1;  // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  std::string precompiled_charsmap;
  std::vector<int32_t> types;  // each piece's type (1 normal .. 6 byte)
};
SentencePieceProtoSettings sentencepiece_proto_settings(const std::string& proto);

}  // namespace agoq

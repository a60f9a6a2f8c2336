#include "data/sentencepiece_proto.h"

#include <cstring>
#include <string_view>

#include "core/error.h"

namespace agoq {

namespace {

// ---- writing ----

enum WireType : uint32_t { kVarint = 0, kFixed32 = 5, kBytes = 2 };

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += char(0x80 | (v & 0x7F));
  out += char(v);
}
void put_tag(std::string& out, uint32_t field, WireType t) { put_varint(out, uint64_t(field) << 3 | t); }
// int32 fields are varints of the value sign-extended to 64 bits (so -1 takes 10 bytes), as protobuf writes them.
void put_int(std::string& out, uint32_t field, int64_t v) {
  put_tag(out, field, kVarint);
  put_varint(out, uint64_t(v));
}
void put_bytes(std::string& out, uint32_t field, std::string_view s) {
  put_tag(out, field, kBytes);
  put_varint(out, s.size());
  out += s;
}
void put_float(std::string& out, uint32_t field, float f) {
  put_tag(out, field, kFixed32);
  char b[4];
  std::memcpy(b, &f, 4);  // little-endian, as the wire format is (x86, ARM)
  out.append(b, 4);
}

// ModelProto.SentencePiece: piece = 1, score = 2, type = 3.
std::string piece_message(const std::string& piece, float score, int32_t type) {
  std::string m;
  put_bytes(m, 1, piece);
  put_float(m, 2, score);
  put_int(m, 3, type);
  return m;
}

const std::string& piece_or(const SentencePieceVocab& v, int id, const std::string& fallback) {
  return id >= 0 && size_t(id) < v.pieces.size() ? v.pieces[id] : fallback;
}

// TrainerSpec: model_type = 3 (BPE = 2), vocab_size = 4, byte_fallback = 35, unk/bos/eos/pad ids = 40..43 and
// pieces = 45..48 (SentencePieceProcessor finds BOS and EOS by their piece, not their id).
std::string trainer_message(const SentencePieceVocab& v, int unk_id) {
  static const std::string kUnk = "<unk>", kBos = "<s>", kEos = "</s>", kPad = "<pad>";
  std::string m;
  put_int(m, 3, 2);
  put_int(m, 4, int64_t(v.pieces.size()));
  put_int(m, 35, 1);
  put_int(m, 40, unk_id);
  put_int(m, 41, v.bos_id);
  put_int(m, 42, v.eos_id);
  put_int(m, 43, v.pad_id);
  put_bytes(m, 45, piece_or(v, unk_id, kUnk));
  put_bytes(m, 46, piece_or(v, v.bos_id, kBos));
  put_bytes(m, 47, piece_or(v, v.eos_id, kEos));
  put_bytes(m, 48, piece_or(v, v.pad_id, kPad));
  return m;
}

// NormalizerSpec: name = 1, add_dummy_prefix = 3, remove_extra_whitespaces = 4, escape_whitespaces = 5.
std::string normalizer_message(bool add_dummy_prefix) {
  std::string m;
  put_bytes(m, 1, "identity");
  put_int(m, 3, add_dummy_prefix);
  put_int(m, 4, 0);
  put_int(m, 5, 1);
  return m;
}

// ---- reading ----

struct Reader {
  std::string_view in;
  bool ok = true;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) break;
      const auto b = uint8_t(in[0]);
      in.remove_prefix(1);
      v |= uint64_t(b & 0x7F) << shift;
      if (b < 0x80) return v;
    }
    ok = false;
    return 0;
  }
  // Calls on(field, wire type, varint value, bytes) for each field, skipping what it does not know.
  template <class F>
  void fields(F&& on) {
    while (ok && !in.empty()) {
      const uint64_t tag = varint();
      const uint32_t field = uint32_t(tag >> 3), type = uint32_t(tag & 7);
      uint64_t v = 0;
      std::string_view bytes;
      if (type == kVarint) {
        v = varint();
      } else if (type == kBytes) {
        const uint64_t n = varint();
        if (n > in.size()) return void(ok = false);
        bytes = in.substr(0, n);
        in.remove_prefix(n);
      } else if (type == kFixed32 || type == 1) {
        const size_t n = type == kFixed32 ? 4 : 8;
        if (n > in.size()) return void(ok = false);
        in.remove_prefix(n);
      } else {
        return void(ok = false);  // groups: not in this .proto
      }
      if (ok) on(field, type, v, bytes);
    }
  }
};

}  // namespace

std::string sentencepiece_proto_from_vocab(const SentencePieceVocab& v, const std::string& what) {
  const size_t n = v.pieces.size();
  AGOQ_CHECK(n > 0, "tokenizer ", what, ": the vocabulary is empty");
  AGOQ_CHECK(v.scores.size() == n && v.types.size() == n, "tokenizer ", what, ": ", n, " pieces but ", v.scores.size(),
             " scores and ", v.types.size(), " types");
  for (const int id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id})
    AGOQ_CHECK(id >= -1 && id < int64_t(n), "tokenizer ", what, ": special token id ", id, " is outside the ", n,
               "-piece vocabulary");
  int unk = v.unk_id;
  for (size_t i = 0; i < n && unk < 0; ++i)
    if (v.types[i] == 2) unk = int(i);
  AGOQ_CHECK(unk >= 0, "tokenizer ", what, ": no unknown piece (no unk id and no piece of type 2)");
  std::string proto;
  for (size_t i = 0; i < n; ++i) {
    int32_t type = v.types[i];
    if (type < 1 || type > 6) type = 1;  // GGUF's 0 (undefined) and anything else: a normal piece
    if (int(i) == unk) type = 2;
    else if (type == 2) type = 3;  // one unknown piece only: another one marked so is kept as a control piece
    // SentencePiece gives BOS/EOS/pad ids only for control pieces.
    if (int(i) != unk && (int(i) == v.bos_id || int(i) == v.eos_id || int(i) == v.pad_id)) type = 3;
    put_bytes(proto, 1, piece_message(v.pieces[i], v.scores[i], type));
  }
  put_bytes(proto, 2, trainer_message(v, unk));
  put_bytes(proto, 3, normalizer_message(v.add_dummy_prefix));
  return proto;
}

SentencePieceProtoSettings sentencepiece_proto_settings(const std::string& proto) {
  SentencePieceProtoSettings s;
  Reader top{proto};
  top.fields([&](uint32_t field, uint32_t, uint64_t, std::string_view bytes) {
    Reader sub{bytes};
    if (field == 1) {
      int32_t type = 1;  // the .proto's default
      sub.fields([&](uint32_t f, uint32_t, uint64_t v, std::string_view) {
        if (f == 3) type = int32_t(v);
      });
      s.types.push_back(type);
    }
    if (field == 2)
      sub.fields([&](uint32_t f, uint32_t, uint64_t v, std::string_view) {
        if (f == 3) s.model_type = int32_t(v);
        if (f == 35) s.byte_fallback = v != 0;
        if (f == 24) s.treat_whitespace_as_suffix = v != 0;
      });
    if (field == 3)
      sub.fields([&](uint32_t f, uint32_t, uint64_t v, std::string_view b) {
        if (f == 2) s.precompiled_charsmap.assign(b);
        if (f == 3) s.add_dummy_prefix = v != 0;
        if (f == 4) s.remove_extra_whitespaces = v != 0;
        if (f == 5) s.escape_whitespaces = v != 0;
      });
  });
  return s;
}

}  // namespace agoq

#include "data/rdata.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace agoq {

namespace {

// Serializer pseudo types beyond the SEXPTYPEs (R's serialize.c).
constexpr int kSpecial = 7, kBuiltin = 8, kAltrep = 238, kBaseEnv = 241, kEmptyEnv = 242, kPersist = 247,
              kPackage = 248, kNamespace = 249, kBaseNamespace = 250, kMissingArg = 251, kUnbound = 252,
              kGlobalEnv = 253;
// Nesting bound, so a corrupt stream cannot overflow the stack: 4096 levels did under ASan (8 MiB stack, found by
// fuzzing), 1024 leave a wide margin, and R data nests a few levels deep.
constexpr int kMaxDepth = 1024;
// A compact sequence says 1:n in 24 bytes whatever n is, so its length cannot be checked against the input; the
// expansion is capped instead (a corpus needs them for row numbers at most).
constexpr double kMaxCompactSeq = double(1 << 24);
// zlib's deflate never compresses better than about 1032:1, so a claimed uncompressed size beyond that ratio of
// the compressed bytes is corrupt, and is refused before anything is allocated for it.
constexpr uint64_t kMaxZlibRatio = 1032;

std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x80) {
      out += char(c);
    } else {
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

class XdrReader {
 public:
  explicit XdrReader(std::string_view b) : b_(b) {}

  RObjectPtr read_stream() {
    AGOQ_CHECK(b_.size() >= 2 && b_.substr(0, 2) == "X\n", "R serialization: only the XDR format (\"X\\n\") is ",
               "supported, stream starts with byte ", int(b_.empty() ? -1 : (unsigned char)b_[0]));
    pos_ = 2;
    const int version = read_int();
    read_int();  // writer's R version
    read_int();  // minimal reader version
    AGOQ_CHECK(version == 2 || version == 3, "R serialization: unsupported format version ", version);
    if (version == 3) {
      const int n = read_int();
      AGOQ_CHECK(n >= 0, "R serialization: bad native encoding length ", n);
      need(size_t(n), "the native encoding");
      pos_ += size_t(n);
    }
    return read_item();
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<RObjectPtr> refs_;

  void need(size_t n, const char* what) {
    AGOQ_CHECK(n <= b_.size() - pos_, "R serialization: stream ends inside ", what, " at byte ", pos_);
  }
  int32_t read_int() {
    need(4, "an integer");
    uint32_t v;
    std::memcpy(&v, b_.data() + pos_, 4);
    pos_ += 4;
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
    return int32_t(v);
  }
  double read_double() {
    need(8, "a double");
    uint64_t v;
    std::memcpy(&v, b_.data() + pos_, 8);
    pos_ += 8;
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
    return std::bit_cast<double>(v);
  }
  // Vector length (long vectors write -1 then two words); bounded by the bytes left, so corrupt lengths fail
  // cleanly instead of allocating wildly.
  size_t read_length(size_t min_elem_bytes) {
    int64_t n = read_int();
    if (n == -1) n = (int64_t(uint32_t(read_int())) << 32) | uint32_t(read_int());
    AGOQ_CHECK(n >= 0 && uint64_t(n) <= (b_.size() - pos_) / min_elem_bytes, "R serialization: bad vector length ", n,
               " at byte ", pos_);
    return size_t(n);
  }
  std::string read_bytes(size_t n) {
    need(n, "a string");
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  RObjectPtr read_item() { return read_item(read_int()); }

  RObjectPtr read_item(int32_t flags) {
    AGOQ_CHECK(++depth_ <= kMaxDepth, "R serialization: objects nested deeper than ", kMaxDepth);
    RObjectPtr r = read_item_body(flags);
    --depth_;
    return r;
  }

  static std::shared_ptr<RObject> make(int type) {
    auto o = std::make_shared<RObject>();
    o->type = type;
    return o;
  }

  // One item, by its type code: the singletons and references first, then each composite kind in a reader of
  // its own, and every vector type in read_vector.
  RObjectPtr read_item_body(int32_t flags) {
    const int type = flags & 0xFF;
    switch (type) {
      case kRNilValue:
      case kEmptyEnv:
      case kBaseEnv:
      case kGlobalEnv:
      case kUnbound:
      case kMissingArg:
      case kBaseNamespace: return make(type == kRNilValue ? kRNil : type);
      case kRRef: return read_ref(flags);
      case kPersist: fail("R serialization: persistent references (type code ", type, ") are not supported");
      case kRSym: return read_symbol();
      case kPackage:
      case kNamespace: return read_package_name(type);
      case kREnv: return read_env();
      case kRList:
      case kRLang:
      case kRClosure:
      case kRProm:
      case kRDot: return read_pairlist(flags);
      case kAltrep: return read_altrep();
      case kSpecial:
      case kBuiltin: {
        auto s = make(type);
        s->text = read_bytes(read_length(1));
        return s;
      }
      case kRChar: return read_chars(int(uint32_t(flags) >> 12));
      default: return read_vector(flags);
    }
  }

  // A back reference: its index (1-based) is in the flags' upper 24 bits, or in the next word when those are 0.
  RObjectPtr read_ref(int32_t flags) {
    int idx = int(uint32_t(flags) >> 8);
    if (idx == 0) idx = read_int();
    AGOQ_CHECK(idx >= 1 && size_t(idx) <= refs_.size(), "R serialization: reference ", idx, " out of range (",
               refs_.size(), " known)");
    return refs_[size_t(idx) - 1];
  }

  RObjectPtr read_symbol() {
    auto s = make(kRSym);
    s->text = read_item()->text;
    refs_.push_back(s);
    return s;
  }

  // package:name / namespace:name environments, written as a string vector of their names.
  RObjectPtr read_package_name(int type) {
    auto s = make(type);
    AGOQ_CHECK(read_int() == 0, "R serialization: named persistent string vectors are not supported");
    const size_t n = read_length(4);
    for (size_t i = 0; i < n; ++i) s->strings.push_back(read_item()->text);
    refs_.push_back(s);
    return s;
  }

  // An environment is registered before its contents, which may refer back to it. The contents (enclosure,
  // frame, hash table, attributes) are read and dropped: no text lives there, and keeping them would let an
  // environment that contains itself form a shared_ptr cycle, i.e. a leak.
  RObjectPtr read_env() {
    auto s = make(kREnv);
    refs_.push_back(s);
    read_int();  // locked
    for (int i = 0; i < 4; ++i) read_item();
    return s;
  }

  // A CHARSXP: byte length (-1 = NA) and bytes; `levels` says the encoding. CHARSXPs never carry attributes.
  RObjectPtr read_chars(int levels) {
    auto s = make(kRChar);
    const int32_t n = read_int();
    if (n == -1) {
      s->na = true;
      return s;
    }
    AGOQ_CHECK(n >= 0, "R serialization: bad string length ", n, " at byte ", pos_);
    s->text = read_bytes(size_t(n));
    if (levels & (1 << 2)) s->text = latin1_to_utf8(s->text);  // LATIN1_MASK
    return s;
  }

  // The vector types (logical, integer, double, complex, character, list, expression, raw) and S4 objects, then
  // their attributes when the flags say there are some.
  RObjectPtr read_vector(int32_t flags) {
    const int type = flags & 0xFF;
    auto s = make(type);
    switch (type) {
      case kRLgl:
      case kRInt:
        s->ints.resize(read_length(4));
        for (auto& v : s->ints) v = read_int();
        break;
      case kRReal:
      case kRCplx: {
        const size_t n = read_length(8) * (type == kRCplx ? 2 : 1);
        need(n * 8, "a numeric vector");
        s->reals.resize(n);
        for (auto& v : s->reals) v = read_double();
        break;
      }
      case kRStr: read_strings(*s); break;
      case kRVec:
      case kRExpr: {
        const size_t n = read_length(4);
        s->items.reserve(n);
        for (size_t i = 0; i < n; ++i) s->items.push_back(read_item());
        break;
      }
      case kRRaw: s->raw = read_bytes(read_length(1)); break;
      case kRS4: break;  // only attributes
      default: fail("R serialization: unsupported object type code ", type, " at byte ", pos_);
    }
    if (flags & (1 << 9)) s->attributes = read_item();
    return s;
  }

  void read_strings(RObject& s) {
    const size_t n = read_length(4);
    s.strings.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      RObjectPtr c = read_item();
      AGOQ_CHECK(c->type == kRChar, "R serialization: character vector element has type code ", c->type);
      s.strings.push_back(c->na ? std::nullopt : std::optional<std::string>(c->text));
    }
  }

  // A pairlist is a chain of cells (attributes?, tag?, car, cdr); read it as a loop over the cdrs so long lists
  // do not recurse.
  RObjectPtr read_pairlist(int32_t flags) {
    auto s = make(flags & 0xFF);
    for (bool first = true;; first = false) {
      const bool has_attr = flags & (1 << 9), has_tag = flags & (1 << 10);
      if (has_attr) {
        RObjectPtr a = read_item();
        if (first) s->attributes = a;
      }
      s->tags.push_back(has_tag ? read_item()->text : std::string());
      s->items.push_back(read_item());
      flags = read_int();
      const int t = flags & 0xFF;
      if (t == kRNilValue) return s;
      if (t != kRList && t != kRLang && t != kRClosure && t != kRProm && t != kRDot) {
        s->tags.emplace_back();  // a dotted pair: keep the tail as a last, untagged element
        s->items.push_back(read_item(flags));
        return s;
      }
    }
  }

  // ALTREP objects carry (class info, state, attributes). The compact sequences R writes for 1:n and the wrapper
  // classes are expanded; anything else is rejected by name.
  RObjectPtr read_altrep() {
    RObjectPtr info = read_item(), state = read_item(), attr = read_item();
    const std::string cls = info->items.empty() ? std::string() : info->items[0]->text;
    std::shared_ptr<RObject> s;
    if (cls == "compact_intseq" || cls == "compact_realseq") {
      s = expand_compact_seq(cls, *state);
    } else if (cls.rfind("wrap_", 0) == 0 && state->items.size() >= 1) {
      s = std::make_shared<RObject>(*state->items[0]);
    } else {
      fail("R serialization: unsupported ALTREP class '", cls, "' (type code ", kAltrep, ")");
    }
    if (attr->type != kRNil) s->attributes = attr;
    return s;
  }

  // state = c(n, first, step). Every value is checked before it is cast, so corrupt doubles (NaN, 1e300) end in
  // an error rather than in undefined behaviour.
  static std::shared_ptr<RObject> expand_compact_seq(const std::string& cls, const RObject& state) {
    AGOQ_CHECK(state.reals.size() == 3, "R serialization: bad ", cls, " state");
    const double len = state.reals[0], n1 = state.reals[1], inc = state.reals[2];
    AGOQ_CHECK(len >= 0 && len <= kMaxCompactSeq && len == std::floor(len), "R serialization: ", cls, " length ", len,
               " is not a count up to ", kMaxCompactSeq);
    const auto n = size_t(len);
    const double last = n1 + (len - 1) * inc;
    auto s = make(cls == "compact_intseq" ? kRInt : kRReal);
    if (s->type == kRInt) {
      const auto fits = [](double v) { return v >= -2147483647.0 && v <= 2147483647.0; };
      AGOQ_CHECK(n == 0 || (fits(n1) && fits(last) && fits(inc)), "R serialization: ", cls, " from ", n1, " by ", inc,
                 " leaves the integer range");
      s->ints.resize(n);
      for (size_t i = 0; i < n; ++i) s->ints[i] = int32_t(n1 + double(i) * inc);
    } else {
      AGOQ_CHECK(std::isfinite(n1) && std::isfinite(last), "R serialization: ", cls, " is not finite");
      s->reals.resize(n);
      for (size_t i = 0; i < n; ++i) s->reals[i] = n1 + double(i) * inc;
    }
    return s;
  }
};

uint32_t read_be32(std::string_view b) {
  uint32_t v;
  std::memcpy(&v, b.data(), 4);
  return std::endian::native == std::endian::little ? __builtin_bswap32(v) : v;
}

std::string gunzip(std::string_view in, std::string_view what) {
  z_stream z{};
  AGOQ_CHECK(inflateInit2(&z, 15 + 16) == Z_OK, what, ": zlib initialisation failed");
  std::string out;
  // The gzip trailer holds the uncompressed size mod 2^32: a good first guess.
  uint32_t isize = 0;
  for (size_t i = 0; i < 4 && in.size() >= 4; ++i) isize |= uint32_t(uint8_t(in[in.size() - 4 + i])) << (8 * i);
  out.resize(std::max<size_t>(std::min<uint64_t>(isize, in.size() * kMaxZlibRatio), 1 << 16));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  size_t have = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (have == out.size()) out.resize(out.size() * 2);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = uInt(out.size() - have);
    rc = inflate(&z, Z_NO_FLUSH);
    have = out.size() - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      fail(what, ": corrupt gzip data (zlib error ", rc, ")");
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      fail(what, ": gzip data ends early");
    }
  }
  inflateEnd(&z);
  out.resize(have);
  return out;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  AGOQ_CHECK(f, path, ": cannot open file");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Element i of an integer or double vector of the index, as a count (offsets, lengths, the compression code):
// checked before it is cast, so a negative, fractional or huge value is an error naming the index.
uint64_t index_count(const RObject& o, size_t i, const std::string& rdx) {
  double v;
  if (i < o.ints.size()) v = o.ints[i];
  else if (i < o.reals.size()) v = o.reals[i];
  else fail(rdx, ": expected a number at position ", i, " (object type code ", o.type, ")");
  AGOQ_CHECK(v >= 0 && v <= double(uint64_t(1) << 53) && v == std::floor(v), rdx, ": index entry ", v,
             " is not a byte count");
  return uint64_t(v);
}

}  // namespace

const RObject* RObject::attr(std::string_view name) const {
  if (!attributes) return nullptr;
  for (size_t i = 0; i < attributes->tags.size(); ++i)
    if (attributes->tags[i] == name) return attributes->items[i].get();
  return nullptr;
}

std::vector<std::string> RObject::names() const {
  std::vector<std::string> out;
  if (const RObject* n = attr("names"))
    for (const auto& s : n->strings) out.push_back(s.value_or(""));
  return out;
}

const RObject* RObject::get(std::string_view name) const {
  if (!tags.empty()) {
    for (size_t i = 0; i < tags.size(); ++i)
      if (tags[i] == name) return items[i].get();
    return nullptr;
  }
  const std::vector<std::string> n = names();
  for (size_t i = 0; i < n.size() && i < items.size(); ++i)
    if (n[i] == name) return items[i].get();
  return nullptr;
}

RObjectPtr r_unserialize(std::string_view bytes) { return XdrReader(bytes).read_stream(); }

std::string r_decompress(std::string_view b, std::string_view what) {
  if (b.size() >= 2 && (unsigned char)b[0] == 0x1f && (unsigned char)b[1] == 0x8b) return gunzip(b, what);
  if (b.size() >= 2 && b.substr(0, 2) == "X\n") return std::string(b);
  if (b.size() >= 7 && (b.substr(0, 5) == "RDX2\n" || b.substr(0, 5) == "RDX3\n")) return std::string(b.substr(5));
  AGOQ_CHECK(b.size() >= 5, what, ": too short for a compressed R object (", b.size(), " bytes)");
  const uint32_t n = read_be32(b);
  const unsigned char kind = (unsigned char)b[4];
  if (kind == '0') return std::string(b.substr(5));  // stored uncompressed by the bzip2/xz writers
  AGOQ_CHECK(kind != '2' && kind != 'Z', what, ": ", kind == '2' ? "bzip2" : "xz",
             "-compressed R data is not supported (only zlib/gzip)");
  AGOQ_CHECK(n / kMaxZlibRatio <= b.size() - 4, what, ": claims ", n, " bytes uncompressed from ", b.size() - 4,
             " compressed, more than zlib can produce");
  std::string out(n, '\0');
  uLongf len = n;
  const int rc = uncompress(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(b.data() + 4),
                            uLong(b.size() - 4));
  AGOQ_CHECK(rc == Z_OK && len == n, what, ": corrupt zlib data (zlib error ", rc, ", ", len, " of ", n, " bytes)");
  return out;
}

RLazyLoadDb::RLazyLoadDb(const std::string& path) : prefix_(path) {
  for (const char* ext : {".rdx", ".rdb"})
    if (prefix_.size() > 4 && prefix_.compare(prefix_.size() - 4, 4, ext) == 0) prefix_.resize(prefix_.size() - 4);
  read_index(read_file_bytes(prefix_ + ".rdx"));
}

RLazyLoadDb::RLazyLoadDb(std::string_view rdx, std::string rdb, std::string label)
    : prefix_(std::move(label)), rdb_(std::move(rdb)) {
  read_index(rdx);
}

void RLazyLoadDb::read_index(std::string_view rdx_bytes) {
  const std::string rdx = prefix_ + ".rdx";
  const RObjectPtr index = r_unserialize(r_decompress(rdx_bytes, rdx));
  const RObject* vars = index->get("variables");
  AGOQ_CHECK(vars && vars->type == kRVec, rdx, ": not a lazy-load index (no 'variables' list)");
  names_ = vars->names();
  AGOQ_CHECK(names_.size() == vars->items.size(), rdx, ": 'variables' has ", vars->items.size(), " entries but ",
             names_.size(), " names");
  for (const RObjectPtr& v : vars->items) {
    const uint64_t offset = index_count(*v, 0, rdx);  // read in order, so the first bad one is the one named
    spans_.emplace_back(offset, index_count(*v, 1, rdx));
  }
  if (const RObject* c = index->get("compressed")) {
    const uint64_t code = index_count(*c, 0, rdx);
    AGOQ_CHECK(code <= 3, rdx, ": unknown compression code ", code);
    compression_ = int(code);
  }
}

bool RLazyLoadDb::contains(std::string_view name) const {
  for (const auto& n : names_)
    if (n == name) return true;
  return false;
}

// The bytes [offset, offset + length) of the .rdb: from memory, or read from the file now.
std::string RLazyLoadDb::read_entry(std::string_view name, uint64_t offset, uint64_t length) const {
  const std::string rdb = prefix_ + ".rdb";
  if (rdb_) {
    AGOQ_CHECK(offset <= rdb_->size() && length <= rdb_->size() - offset, rdb, ": object '", name, "' at offset ",
               offset, " (", length, " bytes) lies past the end of the file");
    return rdb_->substr(size_t(offset), size_t(length));
  }
  std::ifstream f(rdb, std::ios::binary | std::ios::ate);
  AGOQ_CHECK(f, rdb, ": cannot open file");
  const auto size = uint64_t(f.tellg());
  AGOQ_CHECK(offset <= size && length <= size - offset, rdb, ": object '", name, "' at offset ", offset, " (", length,
             " bytes) lies past the end of the file");
  std::string blob(length, '\0');
  f.seekg(std::streamoff(offset));
  f.read(blob.data(), std::streamsize(length));
  AGOQ_CHECK(f && size_t(f.gcount()) == length, rdb, ": read error in object '", name, "'");
  return blob;
}

RObjectPtr RLazyLoadDb::load(std::string_view name) const {
  size_t i = 0;
  while (i < names_.size() && names_[i] != name) ++i;
  AGOQ_CHECK(i < names_.size(), prefix_, ".rdx: no object named '", name, "'");
  const std::string blob = read_entry(name, spans_[i].first, spans_[i].second);
  const std::string what = prefix_ + ".rdb object '" + std::string(name) + "'";
  try {
    return r_unserialize(compression_ == 0 ? blob : r_decompress(blob, what));
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(what, 0) == 0) throw;
    fail(what, ": ", e.what());
  }
}

std::vector<std::string> RLazyLoadDb::load_strings(std::string_view name) const {
  const RObjectPtr o = load(name);
  AGOQ_CHECK(o->type == kRStr, prefix_, ".rdb object '", name, "' is not a character vector (type code ", o->type, ")");
  std::vector<std::string> out;
  out.reserve(o->strings.size());
  for (const auto& s : o->strings) out.push_back(s.value_or(""));
  return out;
}

}  // namespace agoq

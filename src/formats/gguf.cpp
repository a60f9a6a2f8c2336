#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "formats/gguf_quants.h"

namespace agoq {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" as a little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxNesting = 8;           // arrays of arrays deeper than this are refused (no file needs 2)
// What a header may declare, far beyond any model's (a model has ~50 metadata entries with keys under 64 bytes, a
// vocabulary of at most a few 100k tokens, a 405B llama ~1,100 tensors), so that a hostile header cannot make agoq
// hold many times its size in memory. gguf.md's own limit on tensor names is 64 bytes.
constexpr uint64_t kMaxKv = 1 << 16, kMaxKeyBytes = 1024, kMaxArrayLength = 1 << 22;
constexpr uint64_t kMaxTensors = 1 << 16, kMaxTensorNameBytes = 64;
constexpr uint64_t kMaxStringRead = 1 << 16;  // a string value agoq reads (they name things: an architecture, ...)
// The fewest bytes a metadata entry (key length, type, a one-byte value) and a tensor info can take in the file.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1, kMinTensorInfoBytes = 8 + 4 + 4 + 8;

size_t value_size(GgufValueType t) {  // scalars; 0 for string and array
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean: return 1;
    case GgufValueType::u16:
    case GgufValueType::i16: return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32: return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64: return 8;
    default: return 0;
  }
}
bool value_is_int(GgufValueType t) {
  return t != GgufValueType::f32 && t != GgufValueType::f64 && t != GgufValueType::boolean && value_size(t) != 0;
}
bool value_is_signed(GgufValueType t) {
  return t == GgufValueType::i8 || t == GgufValueType::i16 || t == GgufValueType::i32 || t == GgufValueType::i64;
}

uint64_t le_bits(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
// An n-byte integer's bits widened to 64 (sign-extended for signed types).
uint64_t widen(uint64_t v, size_t n, bool is_signed) {
  if (!is_signed || n == 8) return v;
  const uint64_t sign = uint64_t(1) << (8 * n - 1);
  return (v ^ sign) - sign;
}

// Bytes of the file as they can be quoted in a one-line error: those outside printable ASCII as \xNN, at most max
// of them ("..." after).
std::string escaped(std::string_view bytes, size_t max = 64) {
  std::string s;
  for (size_t i = 0; i < std::min(bytes.size(), max); ++i) {
    const uint8_t b = uint8_t(bytes[i]);
    if (b >= 0x20 && b < 0x7f) {
      s += char(b);
    } else {
      static const char* hex = "0123456789abcdef";
      s += "\\x", s += hex[b >> 4], s += hex[b & 15];
    }
  }
  return bytes.size() > max ? s + "..." : s;
}

// Keys and tensor names are quoted raw in errors (and compared with agoq's names): a control character in one is
// refused, so that every message stays one line.
void name_check(const std::string& name, const char* what, const GgufFile& f) {
  for (char ch : name)
    if (uint8_t(ch) < 0x20 || ch == 0x7f) f.fail_here(what, " '", escaped(name), "' holds a control character");
}

void pread_all(int fd, void* dst, size_t n, uint64_t at, const GgufFile& f) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, 1u << 30), off_t(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) f.fail_here("read failed at byte ", at, ": ", std::strerror(errno));
    if (r == 0) f.fail_here("unexpected end of file at byte ", at, " (was it truncated after opening?)");
    p += r, n -= size_t(r), at += uint64_t(r);
  }
}

// Sequential reads of the header through a buffer; each read is checked against the file's size first, so a
// count or length beyond the file is refused before anything is allocated for it.
class Cursor {
 public:
  Cursor(const GgufFile& f, int fd, uint64_t size, uint64_t at = 0) : f_(f), fd_(fd), size_(size), pos_(at) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  std::string ctx;  // what is being read, for errors: "metadata 'general.name'"

  void bytes(void* dst, uint64_t n, const char* what) {
    need(n, what);
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < buf_at_ || pos_ >= buf_at_ + buf_.size()) fill();
      const uint64_t off = pos_ - buf_at_, k = std::min<uint64_t>(n, buf_.size() - off);
      std::memcpy(out, buf_.data() + off, k);
      out += k, n -= k, pos_ += k;
    }
  }
  uint64_t uint(size_t n, const char* what) {
    uint8_t b[8];
    bytes(b, n, what);
    return le_bits(b, n);
  }
  uint32_t u32(const char* what) { return uint32_t(uint(4, what)); }
  uint64_t u64(const char* what) { return uint(8, what); }
  // A string of at most max bytes (a longer one is refused, quoted in part).
  std::string str(const char* what, uint64_t max) {
    const uint64_t n = u64(what);
    need(n, what);
    std::string s(size_t(std::min<uint64_t>(n, std::min<uint64_t>(max, 64) + 1)), '\0');
    if (n > max) {
      bytes(s.data(), s.size(), what);
      f_.fail_here(what, ctx.empty() ? "" : " of ", ctx, " ('", escaped(s), "') is ", n,
                   " bytes, more than agoq accepts (", max, ")");
    }
    s.resize(size_t(n));
    bytes(s.data(), n, what);
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }
  void need(uint64_t n, const char* what) const {
    if (n > left())
      f_.fail_here("truncated: ", what, ctx.empty() ? "" : " of ", ctx, " at byte ", pos_, " needs ", n,
                   " bytes, the file has ", left(), " left");
  }
  // A count of items of at least min_bytes each, bounded by what is left of the file.
  uint64_t count(uint64_t min_bytes, const char* what) {
    const uint64_t n = u64(what);
    if (n > left() / min_bytes)
      f_.fail_here(what, ctx.empty() ? "" : " of ", ctx, " is ", n, ", more than the ", left(),
                   " bytes left in the file can hold (truncated?)");
    return n;
  }

 private:
  void fill() {
    buf_at_ = pos_;
    buf_.resize(size_t(std::min<uint64_t>(1u << 20, size_ - pos_)));
    pread_all(fd_, buf_.data(), buf_.size(), buf_at_, f_);
  }
  const GgufFile& f_;
  int fd_;
  uint64_t size_, pos_, buf_at_ = 0;
  std::vector<uint8_t> buf_;
};

GgufValueType value_type_read(Cursor& c, const GgufFile& f, const char* what) {
  const uint32_t t = c.u32(what);
  if (t > uint32_t(GgufValueType::f64)) f.fail_here(c.ctx, " has unknown value type id ", t);
  return GgufValueType(t);
}

void bools_check(Cursor& c, const GgufFile& f, uint64_t n) {
  uint8_t b[4096];
  for (uint64_t done = 0; done < n;) {
    const size_t k = size_t(std::min<uint64_t>(n - done, sizeof b));
    c.bytes(b, k, "array elements");
    for (size_t i = 0; i < k; ++i)
      if (b[i] > 1) f.fail_here(c.ctx, ": bool value ", int(b[i]), " is neither 0 nor 1");
    done += k;
  }
}

GgufValue value_read(Cursor& c, const GgufFile& f, GgufValueType t, int depth);

// Walks an array, keeping where its elements begin; strings' and nested arrays' lengths are read (to find the end)
// and checked against the file, nothing is kept of them.
void array_read(Cursor& c, const GgufFile& f, GgufValue& v, int depth) {
  if (depth >= kMaxNesting) f.fail_here(c.ctx, ": arrays nested deeper than ", kMaxNesting);
  v.elem = value_type_read(c, f, "array element type");
  const size_t es = value_size(v.elem);
  const uint64_t min_bytes = es ? es : v.elem == GgufValueType::string ? 8 : 12;
  v.count = c.count(min_bytes, "array length");
  if (v.count > kMaxArrayLength)
    f.fail_here(c.ctx, ": array length ", v.count, " is more than agoq accepts (", kMaxArrayLength, ")");
  v.at = c.pos();
  if (v.elem == GgufValueType::boolean) {
    bools_check(c, f, v.count);
  } else if (es) {
    c.skip(v.count * es, "array elements");
  } else if (v.elem == GgufValueType::string) {
    for (uint64_t i = 0; i < v.count; ++i) c.skip(c.u64("array string"), "array string");
  } else {
    for (uint64_t i = 0; i < v.count; ++i) (void)value_read(c, f, GgufValueType::array, depth + 1);
  }
}

GgufValue value_read(Cursor& c, const GgufFile& f, GgufValueType t, int depth) {
  GgufValue v;
  v.type = t;
  if (t == GgufValueType::string) {
    v.count = c.u64("string");
    v.at = c.pos();
    c.skip(v.count, "string");
  } else if (t == GgufValueType::array) {
    array_read(c, f, v, depth);
  } else {
    const size_t n = value_size(t);
    v.bits = widen(c.uint(n, "value"), n, value_is_signed(t));
    if (t == GgufValueType::boolean && v.bits > 1) f.fail_here(c.ctx, ": bool value ", v.bits, " is neither 0 nor 1");
  }
  return v;
}

uint64_t align_up(uint64_t x, uint64_t a) { return x % a ? x + (a - x % a) : x; }

// The bytes between the tensor infos and the data section are padding, which writers (gguf-py, ggml) fill with
// zeros: anything else there means the header's count of tensor infos is wrong (one left out, or the data's first
// bytes read as one more).
void padding_check(Cursor& c, const GgufFile& f, uint64_t n_tensors, uint64_t data_offset) {
  const uint64_t infos_end = c.pos(), end = std::min(data_offset, infos_end + c.left());
  char b[4096];
  while (c.pos() < end) {
    const uint64_t at = c.pos();
    const size_t k = size_t(std::min<uint64_t>(end - at, sizeof b));
    c.bytes(b, k, "padding");
    const std::string_view got(b, k);
    const size_t i = got.find_first_not_of('\0');
    if (i != std::string_view::npos)
      f.fail_here("byte ", at + i, ", in the padding after the tensor infos (bytes ", infos_end, "..", end,
                  "), is not zero ('", escaped(got.substr(i), 8), "'): the header's tensor count (", n_tensors,
                  ") is not the number of tensor infos the file holds");
  }
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  static const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                 "bool",  "string", "array",  "uint64", "int64",  "float64"};
  return uint32_t(t) <= uint32_t(GgufValueType::f64) ? kNames[uint32_t(t)] : "unknown";
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

uint64_t GgufTensorInfo::rows() const {
  uint64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= uint64_t(ne[i]);
  return r;
}

GgufFile::GgufFile(GgufFile&& o) noexcept { *this = std::move(o); }
GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_), fd_ = o.fd_, file_size_ = o.file_size_, data_offset_ = o.data_offset_;
    version_ = o.version_, alignment_ = o.alignment_, kv_ = std::move(o.kv_), kv_sorted_ = std::move(o.kv_sorted_);
    tensors_ = std::move(o.tensors_);
    o.fd_ = -1;
  }
  return *this;
}
GgufFile::~GgufFile() {
  if (fd_ >= 0) ::close(fd_);
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) f.fail_here("cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) f.fail_here("cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) f.fail_here("not a regular file");
  f.file_size_ = uint64_t(st.st_size);
  f.header_parse();
  f.tensors_check();
  return f;
}

void GgufFile::header_parse() {
  if (file_size_ < 4) fail_here("too short for a GGUF file (", file_size_, " bytes)");
  Cursor c(*this, fd_, file_size_);
  uint8_t magic[4];
  c.bytes(magic, 4, "magic");
  if (le_bits(magic, 4) != kMagic)
    fail_here("not a GGUF file (magic '", escaped({reinterpret_cast<const char*>(magic), 4}), "', expected 'GGUF')");
  version_ = c.u32("version");
  if (version_ == 1) fail_here("GGUF version 1 is not supported (agoq reads versions 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) fail_here("big-endian GGUF is not supported (agoq reads little-endian files)");
    fail_here("unsupported GGUF version ", version_, " (agoq reads versions 2 and 3)");
  }
  const uint64_t n_tensors = c.count(kMinTensorInfoBytes, "tensor count");
  const uint64_t n_kv = c.count(kMinKvBytes, "metadata count");
  if (n_tensors > kMaxTensors) fail_here("tensor count ", n_tensors, " is more than agoq accepts (", kMaxTensors, ")");
  if (n_kv > kMaxKv) fail_here("metadata count ", n_kv, " is more than agoq accepts (", kMaxKv, " entries)");
  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.ctx = "metadata entry " + std::to_string(i);
    std::string key = c.str("key", kMaxKeyBytes);
    name_check(key, "metadata key", *this);
    c.ctx = "metadata '" + key + "'";
    const GgufValueType t = value_type_read(c, *this, "value type");
    kv_.emplace_back(std::move(key), value_read(c, *this, t, 0));
  }
  keys_index();
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::u32)
      fail_here("general.alignment is ", gguf_value_type_name(a->type), ", not uint32");
    if (a->bits == 0 || (a->bits & (a->bits - 1)) != 0)
      fail_here("general.alignment ", a->bits, " is not a power of two");
    alignment_ = uint32_t(a->bits);
  }
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.ctx = "tensor info " + std::to_string(i);
    GgufTensorInfo t;
    t.name = c.str("name", kMaxTensorNameBytes);
    name_check(t.name, "tensor name", *this);
    c.ctx = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.u32("dimension count");
    if (n_dims > kMaxDims) fail_here("tensor '", t.name, "' has ", n_dims, " dimensions (at most ", kMaxDims, ")");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.u64("dimension");
      if (ne > uint64_t(std::numeric_limits<int64_t>::max())) fail_here("tensor '", t.name, "' has dimension ", ne);
      t.ne.push_back(int64_t(ne));
    }
    t.type = c.u32("type");
    t.offset = c.u64("offset");
    tensors_.push_back(std::move(t));
  }
  data_offset_ = align_up(c.pos(), alignment_);
  padding_check(c, *this, n_tensors, data_offset_);
}

void GgufFile::keys_index() {
  kv_sorted_.resize(kv_.size());
  for (size_t i = 0; i < kv_.size(); ++i) kv_sorted_[i] = uint32_t(i);
  std::sort(kv_sorted_.begin(), kv_sorted_.end(), [&](uint32_t a, uint32_t b) { return kv_[a].first < kv_[b].first; });
  for (size_t i = 1; i < kv_sorted_.size(); ++i)
    if (kv_[kv_sorted_[i - 1]].first == kv_[kv_sorted_[i]].first)
      fail_here("metadata key '", kv_[kv_sorted_[i]].first, "' appears twice");
}

void GgufFile::tensors_check() {
  std::set<std::string_view> names;
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> by_offset;
  for (GgufTensorInfo& t : tensors_) {
    if (!names.insert(t.name).second) fail_here("tensor '", t.name, "' appears twice");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    if (!ti) fail_here("tensor '", t.name, "' has unknown type id ", t.type);
    const uint64_t ne0 = t.ne.empty() ? 1 : uint64_t(t.ne[0]);
    if (ne0 % ti->block != 0)
      fail_here("tensor '", t.name, "' (", ti->name, ") has rows of ", ne0, " values, not a multiple of its ",
                ti->block, "-value blocks");
    uint64_t bytes = ne0 / ti->block * ti->bytes;
    for (size_t d = 1; d < t.ne.size(); ++d) {
      if (t.ne[d] != 0 && bytes > std::numeric_limits<uint64_t>::max() / uint64_t(t.ne[d]))
        fail_here("tensor '", t.name, "' is too large (its size overflows)");
      bytes *= uint64_t(t.ne[d]);
    }
    if (t.offset % alignment_ != 0)
      fail_here("tensor '", t.name, "' offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    if (data_offset_ > file_size_ || t.offset > file_size_ - data_offset_ ||
        bytes > file_size_ - data_offset_ - t.offset)
      fail_here("tensor '", t.name, "' (", bytes, " bytes at data offset ", t.offset,
                ") lies beyond the end of the file (", file_size_, " bytes; truncated?)");
    t.bytes = bytes;
    t.offset += data_offset_;
    if (bytes > 0) by_offset.emplace_back(t.offset, &t);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1].second;
    if (a.offset + a.bytes > by_offset[i].first)
      fail_here("tensors '", a.name, "' and '", by_offset[i].second->name, "' overlap");
  }
  data_section_check(by_offset);
}

// The data section is the tensors, one after another, each padded to the alignment: bytes no tensor accounts for
// (a gap that could hold a tensor, or data after the last one) mean the header's tensor count leaves tensors out
// (their infos were read as padding, and every offset taken from the wrong start).
void GgufFile::data_section_check(const std::vector<std::pair<uint64_t, const GgufTensorInfo*>>& by_offset) const {
  uint64_t end = data_offset_;  // of the tensors so far
  for (const auto& [at, t] : by_offset) {
    if (at > align_up(end, alignment_))
      fail_here("bytes ", end, "..", at, " of the data section, before tensor '", t->name,
                "', belong to no tensor: the header's tensor count (", tensors_.size(),
                ") is not the number of tensors the file holds");
    end = at + t->bytes;
  }
  if (file_size_ > align_up(end, alignment_))
    fail_here("bytes ", end, "..", file_size_, " at the end of the file, after the last tensor's data, belong to no ",
              "tensor: the header's tensor count (", tensors_.size(), ") is not the number of tensors the file holds");
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = std::lower_bound(kv_sorted_.begin(), kv_sorted_.end(), key,
                                   [&](uint32_t i, std::string_view k) { return kv_[i].first < k; });
  return it != kv_sorted_.end() && kv_[*it].first == key ? &kv_[*it].second : nullptr;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!value_is_int(v->type)) fail_here("metadata '", key, "' is ", gguf_value_type_name(v->type), ", not an integer");
  if (v->type == GgufValueType::u64 && v->bits > uint64_t(std::numeric_limits<int64_t>::max()))
    fail_here("metadata '", key, "' value ", v->bits, " is out of range");
  return int64_t(v->bits);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufValueType::f32) {
    float x;
    const uint32_t b = uint32_t(v->bits);
    std::memcpy(&x, &b, 4);
    return x;
  }
  if (v->type == GgufValueType::f64) {
    double x;
    std::memcpy(&x, &v->bits, 8);
    return x;
  }
  fail_here("metadata '", key, "' is ", gguf_value_type_name(v->type), ", not a float");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::boolean)
    fail_here("metadata '", key, "' is ", gguf_value_type_name(v->type), ", not a bool");
  return v->bits != 0;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::string)
    fail_here("metadata '", key, "' is ", gguf_value_type_name(v->type), ", not a string");
  if (v->count > kMaxStringRead)
    fail_here("metadata '", key, "' is a string of ", v->count, " bytes, more than agoq reads (", kMaxStringRead, ")");
  std::string s(size_t(v->count), '\0');
  pread_all(fd_, s.data(), s.size(), v->at, *this);
  return s;
}

std::optional<std::vector<std::string>> GgufFile::get_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::array || v->elem != GgufValueType::string)
    fail_here("metadata '", key, "' is not an array of strings");
  Cursor c(*this, fd_, file_size_, v->at);
  c.ctx = "metadata '" + std::string(key) + "'";
  std::vector<std::string> out;
  out.reserve(size_t(v->count));
  for (uint64_t i = 0; i < v->count; ++i) out.push_back(c.str("array string", kMaxStringRead));
  return out;
}

std::optional<std::vector<float>> GgufFile::get_floats(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::array || v->elem != GgufValueType::f32)
    fail_here("metadata '", key, "' is not an array of float32");
  const std::vector<uint8_t> raw = array_bytes(*v, 4);
  std::vector<float> out(size_t(v->count));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t b = uint32_t(le_bits(raw.data() + 4 * i, 4));
    std::memcpy(&out[i], &b, 4);
  }
  return out;
}

std::optional<std::vector<int32_t>> GgufFile::get_ints(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  const size_t es = value_size(v->elem);
  if (v->type != GgufValueType::array || !value_is_int(v->elem) || es > 4)
    fail_here("metadata '", key, "' is not an array of 8-, 16- or 32-bit integers");
  const std::vector<uint8_t> raw = array_bytes(*v, es);
  std::vector<int32_t> out(size_t(v->count));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t x = widen(le_bits(raw.data() + es * i, es), es, value_is_signed(v->elem));
    if (v->elem == GgufValueType::u32 && x > uint64_t(std::numeric_limits<int32_t>::max()))
      fail_here("metadata '", key, "' element ", i, " (", x, ") is out of range");
    out[i] = int32_t(uint32_t(x));
  }
  return out;
}

std::vector<uint8_t> GgufFile::array_bytes(const GgufValue& v, size_t elem_bytes) const {
  std::vector<uint8_t> raw(size_t(v.count * elem_bytes));  // (bounded by kMaxArrayLength and the file, at open)
  pread_all(fd_, raw.data(), raw.size(), v.at, *this);
  return raw;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void GgufFile::read(const GgufTensorInfo& t, uint64_t at, void* dst, size_t n) const {
  if (at > t.bytes || n > t.bytes - at) fail_here("read of ", n, " bytes at ", at, " exceeds tensor '", t.name, "'");
  pread_all(fd_, dst, n, t.offset + at, *this);
}

}  // namespace agoq

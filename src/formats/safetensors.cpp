#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"
#include "quant/half.h"

namespace agoq {

namespace {

// The metadata key of agoq's per-tensor checksums: a JSON object {tensor name: XXH3-64 of its bytes, 16 hex digits}.
constexpr const char* kChecksumKey = "agoq.xxh3";

std::string checksum_hex(const void* data, size_t bytes) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(data, bytes)));
  return hex;
}

// Hugging Face's reader refuses headers above 100 MB; so do we, before allocating for a garbage length.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string errno_str() { return std::strerror(errno); }

// Owns a file descriptor so every error path closes it.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void fd_read_all(int fd, void* p, size_t n, uint64_t offset, const std::string& path) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, std::min<size_t>(n, 1u << 30), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    AGOQ_CHECK(r >= 0, "safetensors file ", path, ": read failed: ", errno_str());
    AGOQ_CHECK(r > 0, "safetensors file ", path, ": unexpected end of file (was it truncated after opening?)");
    c += r, n -= size_t(r), offset += uint64_t(r);
  }
}

template <class... Parts>
[[noreturn]] void bad_file(const std::string& path, const Parts&... parts) {
  fail("safetensors file ", path, ": ", parts...);
}

// The 8-byte length and the JSON header after it; data_start is where the byte buffer begins.
nlohmann::json header_read(int fd, const std::string& path, uint64_t file_size, uint64_t& data_start) {
  if (file_size < 8) bad_file(path, "too short for a header length (", file_size, " bytes)");
  uint8_t len_bytes[8];
  fd_read_all(fd, len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len_bytes[i]) << (8 * i);
  if (n > file_size - 8) bad_file(path, "header length ", n, " exceeds the file size ", file_size, " (truncated?)");
  if (n > kMaxHeaderBytes) bad_file(path, "header length ", n, " is implausibly large");
  if (n < 2) bad_file(path, "header length ", n, " is too small for a JSON object");
  std::string text(n, '\0');
  fd_read_all(fd, text.data(), n, 8, path);
  nlohmann::json header = json_parse(text, "safetensors file " + path + ": header");
  if (!header.is_object()) bad_file(path, "header is not a JSON object");
  data_start = 8 + n;
  return header;
}

std::map<std::string, std::string> metadata_parse(const nlohmann::json& v, const std::string& path) {
  if (!v.is_object()) bad_file(path, "__metadata__ is not an object");
  std::map<std::string, std::string> out;
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string()) bad_file(path, "__metadata__ value for '", k, "' is not a string");
    out[k] = s.get<std::string>();
  }
  return out;
}

// One tensor's entry, checked against the data section; offset is relative to the data section.
SafeTensorInfo tensor_entry_parse(const std::string& name, const nlohmann::json& v, const std::string& path,
                                  uint64_t data_size) {
  if (!v.is_object()) bad_file(path, "entry '", name, "' is not an object");
  if (!v.contains("dtype") || !v["dtype"].is_string()) bad_file(path, "tensor '", name, "' has no dtype string");
  if (!v.contains("shape") || !v["shape"].is_array()) bad_file(path, "tensor '", name, "' has no shape array");
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2 ||
      !v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
    bad_file(path, "tensor '", name, "' needs data_offsets [begin, end] of non-negative integers");
  SafeTensorInfo info;
  info.dtype = v["dtype"].get<std::string>();
  size_t elem = 0;
  try {
    elem = safetensors_dtype_size(info.dtype);
  } catch (const Error&) {
    bad_file(path, "tensor '", name, "' has unknown dtype '", info.dtype, "'");
  }
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned())
      bad_file(path, "tensor '", name, "' has a shape entry that is not a non-negative integer");
    info.shape.push_back(d.get<int64_t>());
  }
  const uint64_t begin = v["data_offsets"][0].get<uint64_t>(), end = v["data_offsets"][1].get<uint64_t>();
  if (begin > end || end > data_size)
    bad_file(path, "tensor '", name, "' data_offsets [", begin, ", ", end, "] out of range (data section is ",
             data_size, " bytes; truncated?)");
  int64_t numel = 0;
  try {
    numel = safetensors_numel(info.shape);
  } catch (const Error& e) {
    bad_file(path, "tensor '", name, "': ", e.what());
  }
  if (uint64_t(numel) > std::numeric_limits<uint64_t>::max() / elem || uint64_t(numel) * elem != end - begin)
    bad_file(path, "tensor '", name, "' is ", info.dtype, safetensors_shape_str(info.shape),
             " but its data_offsets span ", end - begin, " bytes");
  info.offset = begin;
  info.bytes = end - begin;
  return info;
}

// Like Hugging Face's reader: the tensors must tile the data section exactly (no overlap, no hole, no tail).
void ranges_check_tiling(std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>>& ranges, uint64_t data_size,
                         const std::string& path) {
  std::sort(ranges.begin(), ranges.end());
  uint64_t pos = 0;
  for (const auto& [r, name] : ranges) {
    if (r.first < pos) bad_file(path, "tensor '", name, "' overlaps the previous tensor");
    if (r.first > pos) bad_file(path, "hole in the data section before tensor '", name, "'");
    pos = r.second;
  }
  if (pos != data_size) bad_file(path, "data section is ", data_size, " bytes but the tensors cover ", pos);
}

}  // namespace

std::map<std::string, std::string> SafetensorsFile::checksums_parse(const SafetensorsFile& st,
                                                                    const std::string& path) {
  const auto it = st.metadata_.find(kChecksumKey);
  if (it == st.metadata_.end()) return {};  // not written by agoq (or before checksums)
  const nlohmann::json sums =
      json_parse(it->second, "safetensors file " + path + ": __metadata__ '" + kChecksumKey + "'");
  if (!sums.is_object()) bad_file(path, "__metadata__ '", kChecksumKey, "' is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [name, sum] : sums.items()) {
    if (!sum.is_string() || sum.get<std::string>().size() != 16)
      bad_file(path, "the checksum of tensor '", name, "' is not 16 hex digits");
    if (!st.tensors_.count(name)) bad_file(path, "a checksum names tensor '", name, "', which the file lacks");
    out[name] = sum.get<std::string>();
  }
  for (const auto& [name, info] : st.tensors_)
    if (!out.count(name)) bad_file(path, "tensor '", name, "' has no checksum while the file's others do");
  return out;
}

size_t safetensors_dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  fail("unknown safetensors dtype '", dtype, "'");
}

int64_t safetensors_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    AGOQ_CHECK(d >= 0, "negative dimension in shape ", safetensors_shape_str(shape));
    AGOQ_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", safetensors_shape_str(shape),
               " overflows");
    n *= d;
  }
  return n;
}

std::string safetensors_shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- writer ----

void SafetensorsWriter::add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
                            size_t bytes) {
  AGOQ_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '", name, "'");
  for (const Entry& e : entries_) AGOQ_CHECK(e.name != name, "safetensors: tensor '", name, "' added twice");
  const size_t expect = size_t(safetensors_numel(shape)) * safetensors_dtype_size(dtype);
  AGOQ_CHECK(bytes == expect, "safetensors: tensor '", name, "' ", dtype, safetensors_shape_str(shape), " needs ",
             expect, " bytes, got ", bytes);
  AGOQ_CHECK(data || bytes == 0, "safetensors: tensor '", name, "' has no data");
  entries_.push_back({std::move(name), std::move(dtype), std::move(shape), data, bytes});
}

void SafetensorsWriter::add_f32(std::string name, std::vector<int64_t> shape, const float* data) {
  const size_t bytes = size_t(safetensors_numel(shape)) * 4;
  add(std::move(name), "F32", std::move(shape), data, bytes);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

AtomicFile SafetensorsWriter::write_tmp(const std::string& path) const {
  // ordered_json keeps the header in file order, which makes it readable with `head -c`.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::json sums = nlohmann::json::object();
  for (const Entry& e : entries_) sums[e.name] = checksum_hex(e.data, e.bytes);
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kChecksumKey] = sums.dump();
  header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  AtomicFile f(path);
  f.write(len, 8);
  f.write(text);
  for (const Entry& e : entries_) f.write(e.data, e.bytes);
  f.finish();
  return f;
}

void SafetensorsWriter::write(const std::string& path) const { write_tmp(path).commit(); }

// ---- reader ----

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile st;
  st.path_ = path;
  Fd f{input_file_open(path, "safetensors file")};
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0) bad_file(path, "cannot stat: ", errno_str());
  st.file_size_ = uint64_t(sb.st_size);
  uint64_t data_start = 0;
  const nlohmann::json header = header_read(f.fd, path, st.file_size_, data_start);

  const uint64_t data_size = st.file_size_ - data_start;
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;  // ((begin, end), name)
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      st.metadata_ = metadata_parse(v, path);
      continue;
    }
    SafeTensorInfo info = tensor_entry_parse(name, v, path, data_size);
    ranges.push_back({{info.offset, info.offset + info.bytes}, name});
    info.offset += data_start;
    st.tensors_.emplace(name, std::move(info));
  }
  ranges_check_tiling(ranges, data_size, path);
  st.checksums_ = checksums_parse(st, path);
  return st;
}

const SafeTensorInfo& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  AGOQ_CHECK(it != tensors_.end(), "safetensors file ", path_, ": no tensor named '", name, "'");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

std::string SafetensorsFile::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? std::string() : it->second;
}

void SafetensorsFile::read_raw(const std::string& name, void* dst, size_t dst_bytes) const {
  const SafeTensorInfo& info = get(name);
  AGOQ_CHECK(dst_bytes == info.bytes, "safetensors file ", path_, ": tensor '", name, "' is ", info.bytes,
             " bytes, destination is ", dst_bytes);
  Fd f{input_file_open(path_, "safetensors file")};
  struct stat sb {};
  // The header was validated against the size at open(); a file replaced since then is not the one we checked.
  AGOQ_CHECK(::fstat(f.fd, &sb) == 0 && uint64_t(sb.st_size) == file_size_, "safetensors file ", path_,
             ": changed size since it was opened");
  fd_read_all(f.fd, dst, info.bytes, info.offset, path_);
  const auto sum = checksums_.find(name);
  AGOQ_CHECK(sum == checksums_.end() || sum->second == checksum_hex(dst, info.bytes), "safetensors file ", path_,
             ": tensor '", name, "' does not match the checksum it was saved with (the file is damaged)");
}

void SafetensorsFile::read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const {
  const SafeTensorInfo& info = get(name);
  AGOQ_CHECK(info.shape == expected_shape, "safetensors file ", path_, ": tensor '", name, "' has shape ",
             safetensors_shape_str(info.shape), ", expected ", safetensors_shape_str(expected_shape));
  const size_t n = size_t(safetensors_numel(info.shape));
  if (info.dtype == "F32") return read_raw(name, dst, n * 4);
  const bool f16 = info.dtype == "F16";
  AGOQ_CHECK(f16 || info.dtype == "BF16", "safetensors file ", path_, ": tensor '", name, "' is ", info.dtype,
             ", cannot read it as float32");
  // Read the halves into the upper half of dst, then widen front to back: float i is written only after the
  // halves it overlaps (indices <= i) have been read.
  auto* bytes = reinterpret_cast<uint8_t*>(dst);
  read_raw(name, bytes + 2 * n, 2 * n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * n + 2 * i, 2);
    const float v = f16 ? f16_to_f32(h) : bf16_to_f32(h);
    std::memcpy(bytes + 4 * i, &v, 4);
  }
}

}  // namespace agoq

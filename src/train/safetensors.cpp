#include "train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace agoq {

namespace {

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

void fd_write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<size_t>(n, 1u << 30));
    if (w < 0 && errno == EINTR) continue;
    AGOQ_CHECK(w > 0, "safetensors file ", path, ": write failed: ", errno_str());
    c += w, n -= size_t(w);
  }
}

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

void fsync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (d.fd >= 0) ::fsync(d.fd);  // best effort: some file systems refuse fsync on directories
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half: value = mant * 2^-24, exact in float
    float v = float(mant) * 0x1p-24f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

size_t safetensors_dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
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

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write_tmp(const std::string& path) const {
  // ordered_json keeps the header in file order, which makes it readable with `head -c`.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp";
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  AGOQ_CHECK(f.fd >= 0, "safetensors file ", tmp, ": cannot create: ", errno_str());
  fd_write_all(f.fd, len, 8, tmp);
  fd_write_all(f.fd, text.data(), text.size(), tmp);
  for (const Entry& e : entries_) fd_write_all(f.fd, e.data, e.bytes, tmp);
  AGOQ_CHECK(::fsync(f.fd) == 0, "safetensors file ", tmp, ": fsync failed: ", errno_str());
  const int fd = std::exchange(f.fd, -1);
  AGOQ_CHECK(::close(fd) == 0, "safetensors file ", tmp, ": close failed: ", errno_str());
}

void SafetensorsWriter::write(const std::string& path) const {
  write_tmp(path);
  AGOQ_CHECK(::rename((path + ".tmp").c_str(), path.c_str()) == 0, "safetensors file ", path,
             ": rename from .tmp failed: ", errno_str());
  fsync_parent_dir(path);
}

// ---- reader ----

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile st;
  st.path_ = path;
  auto bad = [&](const auto&... parts) { fail("safetensors file ", path, ": ", parts...); };

  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) bad("cannot open: ", errno_str());
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0) bad("cannot stat: ", errno_str());
  if (!S_ISREG(sb.st_mode)) bad("not a regular file");
  st.file_size_ = uint64_t(sb.st_size);
  if (st.file_size_ < 8) bad("too short for a header length (", st.file_size_, " bytes)");

  uint8_t len_bytes[8];
  fd_read_all(f.fd, len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len_bytes[i]) << (8 * i);
  if (n > st.file_size_ - 8) bad("header length ", n, " exceeds the file size ", st.file_size_, " (truncated?)");
  if (n > kMaxHeaderBytes) bad("header length ", n, " is implausibly large");
  if (n < 2) bad("header length ", n, " is too small for a JSON object");
  std::string text(n, '\0');
  fd_read_all(f.fd, text.data(), n, 8, path);

  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) bad("header is not valid JSON");
  if (!header.is_object()) bad("header is not a JSON object");

  const uint64_t data_start = 8 + n, data_size = st.file_size_ - data_start;
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;  // ((begin, end), name)
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) bad("__metadata__ value for '", k, "' is not a string");
        st.metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad("entry '", name, "' is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("tensor '", name, "' has no dtype string");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("tensor '", name, "' has no shape array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2 ||
        !v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
      bad("tensor '", name, "' needs data_offsets [begin, end] of non-negative integers");
    SafeTensorInfo info;
    info.dtype = v["dtype"].get<std::string>();
    size_t elem = 0;
    try {
      elem = safetensors_dtype_size(info.dtype);
    } catch (const Error&) {
      bad("tensor '", name, "' has unknown dtype '", info.dtype, "'");
    }
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("tensor '", name, "' has a shape entry that is not a non-negative integer");
      info.shape.push_back(d.get<int64_t>());
    }
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>(), end = v["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > data_size)
      bad("tensor '", name, "' data_offsets [", begin, ", ", end, "] out of range (data section is ", data_size,
          " bytes; truncated?)");
    int64_t numel = 0;
    try {
      numel = safetensors_numel(info.shape);
    } catch (const Error& e) {
      bad("tensor '", name, "': ", e.what());
    }
    if (uint64_t(numel) > std::numeric_limits<uint64_t>::max() / elem || uint64_t(numel) * elem != end - begin)
      bad("tensor '", name, "' is ", info.dtype, safetensors_shape_str(info.shape), " but its data_offsets span ",
          end - begin, " bytes");
    info.offset = data_start + begin;
    info.bytes = end - begin;
    ranges.push_back({{begin, end}, name});
    st.tensors_.emplace(name, std::move(info));
  }
  // Like Hugging Face's reader: the tensors must tile the data section exactly (no overlap, no hole, no tail).
  std::sort(ranges.begin(), ranges.end());
  uint64_t pos = 0;
  for (const auto& [r, name] : ranges) {
    if (r.first < pos) bad("tensor '", name, "' overlaps the previous tensor");
    if (r.first > pos) bad("hole in the data section before tensor '", name, "'");
    pos = r.second;
  }
  if (pos != data_size) bad("data section is ", data_size, " bytes but the tensors cover ", pos);
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
  Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  AGOQ_CHECK(f.fd >= 0, "safetensors file ", path_, ": cannot open: ", errno_str());
  struct stat sb {};
  // The header was validated against the size at open(); a file replaced since then is not the one we checked.
  AGOQ_CHECK(::fstat(f.fd, &sb) == 0 && uint64_t(sb.st_size) == file_size_, "safetensors file ", path_,
             ": changed size since it was opened");
  fd_read_all(f.fd, dst, info.bytes, info.offset, path_);
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

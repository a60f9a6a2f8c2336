// The safetensors file format (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
//   {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
// (padded with spaces to a multiple of 8, so the data starts aligned), then the byte buffer the offsets index.
// The writer streams tensors from caller memory into a file written atomically (core/atomic_file.h), so a reader
// never sees half a file, and records each tensor's XXH3-64 in the metadata ("agoq.xxh3"). The reader validates the
// whole header on open and then reads tensors straight into caller memory, checking each against its checksum
// when the file has them (files agoq wrote), so a damaged tensor is refused by name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.h"

namespace agoq {

// Bytes per element of a safetensors dtype ("F32" -> 4); throws agoq::Error for an unknown dtype.
size_t safetensors_dtype_size(std::string_view dtype);
// Element count of a shape (1 for a scalar []); throws on a negative dimension or overflow.
int64_t safetensors_numel(const std::vector<int64_t>& shape);
std::string safetensors_shape_str(const std::vector<int64_t>& shape);  // "[2, 3]"

class SafetensorsWriter {
 public:
  // Records a tensor; `data` must stay valid until write(). bytes must equal numel(shape) * dtype size.
  void add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data, size_t bytes);
  void add_f32(std::string name, std::vector<int64_t> shape, const float* data);
  void set_metadata(std::string key, std::string value);
  // Writes `path` atomically.
  void write(const std::string& path) const;
  // Only the first half of write(): a complete, fsynced temp, put in place by commit() (for callers that commit
  // several files in an order of their own).
  AtomicFile write_tmp(const std::string& path) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafeTensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t bytes = 0;
};

class SafetensorsFile {
 public:
  // Reads and validates the header: a missing file, a header longer than the file, bad JSON, an unknown dtype,
  // offsets out of range, overlapping, leaving holes or not matching dtype x shape all throw agoq::Error naming
  // the file and the problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafeTensorInfo& get(const std::string& name) const;  // throws naming the tensor when absent
  std::vector<std::string> names() const;                    // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::string metadata_value(const std::string& key) const;  // "" when absent

  bool has_checksums() const { return !checksums_.empty(); }
  // Raw bytes of a tensor into dst (dst_bytes must equal the tensor's size), checked against its checksum.
  void read_raw(const std::string& name, void* dst, size_t dst_bytes) const;
  // Reads a tensor as float32 into dst after checking its shape equals expected_shape. F16 and BF16 tensors are
  // widened in place (no extra buffer).
  void read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const;

 private:
  std::string path_;
  uint64_t file_size_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string> checksums_;  // tensor -> XXH3-64 hex; empty when the file has none
  static std::map<std::string, std::string> checksums_parse(const SafetensorsFile& st, const std::string& path);
};

}  // namespace agoq

// The GGUF file format (llama.cpp's ggml/docs/gguf.md), versions 2 and 3, little-endian:
//   "GGUF" | uint32 version | uint64 tensor_count | uint64 kv_count
//   kv_count x (string key | uint32 value type | value)      string = uint64 length + bytes (no terminator)
//   tensor_count x (string name | uint32 n_dims | n_dims x uint64 ne | uint32 ggml type | uint64 offset)
//   padding to general.alignment (a uint32 power of two, default 32), then the data section; each tensor's offset
//   is relative to it and a multiple of the alignment.
// Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (uint32 element type, uint64
// count, the elements; arrays nest), 10 u64, 11 i64, 12 f64. ne[0] is the innermost (fastest) dimension, so a
// tensor's row-major shape is ne reversed.
// open() checks the whole header against the file before allocating for any count: every malformed input
// (truncated, bad magic or version, counts beyond the file, unknown type ids, tensors out of range, overlapping or
// misaligned, a tensor count that does not account for the data section) is one agoq::Error naming the file and
// the problem. What a header may declare is bounded (gguf.cpp: entries, key and tensor-name lengths, array lengths),
// so its cost in memory is a small multiple of the metadata's count, never of its bytes. Tensor bytes are read with
// pread, so nothing of the file stays in memory after a read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12
};
const char* gguf_value_type_name(GgufValueType t);  // "uint32", "string", "array", ...

// One metadata value. Scalars keep their bits (bits: the integer, sign-extended for signed types, or the float's
// IEEE bits). Strings and arrays stay in the file: `at` is where their bytes begin (a string's bytes, an array's
// first element) and the typed reads below read them when asked, so metadata agoq never reads (chat templates,
// vocabularies of an unused tokenizer, another tool's keys) costs no memory.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  GgufValueType elem = GgufValueType::u8;  // arrays: the element type
  uint64_t count = 0;                      // arrays: the element count; strings: the byte length
  uint64_t bits = 0;                       // numbers and bools
  uint64_t at = 0;                         // strings and arrays: the file offset of their bytes
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] innermost
  uint32_t type = 0;        // ggml type id (gguf_quants.h)
  uint64_t offset = 0;      // absolute file offset
  uint64_t bytes = 0;
  std::vector<int64_t> shape() const;  // row-major: ne reversed
  uint64_t rows() const;               // values / ne[0] (1 for a 0-d or empty tensor's)
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order; find() is null when the key is absent.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // Typed reads: absent -> nullopt; another type (or an integer out of range) is one error naming the key.
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type
  std::optional<double> get_float(std::string_view key) const;  // f32 or f64
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(
      std::string_view key) const;  // at most 64 KiB (the ones agoq reads name things)
  std::optional<std::vector<std::string>> get_strings(std::string_view key) const;  // an array of strings
  std::optional<std::vector<float>> get_floats(std::string_view key) const;  // an f32 array
  std::optional<std::vector<int32_t>> get_ints(std::string_view key) const;  // an array of 8/16/32-bit ints

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(std::string_view name) const;  // null when absent
  // Reads n bytes starting `at` bytes into tensor t into dst (the range must lie within the tensor).
  void read(const GgufTensorInfo& t, uint64_t at, void* dst, size_t n) const;

  // "GGUF file <path>: " + parts as one agoq::Error.
  template <class... Parts>
  [[noreturn]] void fail_here(const Parts&... parts) const;

 private:
  GgufFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0, data_offset_ = 0;
  uint32_t version_ = 0, alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<uint32_t> kv_sorted_;  // indexes of kv_ in key order, for find()
  std::vector<GgufTensorInfo> tensors_;
  void header_parse();
  void keys_index();
  void tensors_check();
  std::vector<uint8_t> array_bytes(const GgufValue& v, size_t elem_bytes) const;  // a number array's elements
  void data_section_check(const std::vector<std::pair<uint64_t, const GgufTensorInfo*>>& by_offset) const;
};

}  // namespace agoq

#include "core/error.h"

namespace agoq {
template <class... Parts>
[[noreturn]] void GgufFile::fail_here(const Parts&... parts) const {
  fail("GGUF file ", path_, ": ", parts...);
}
}  // namespace agoq

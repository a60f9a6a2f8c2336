// Storage formats of agoq tensors (docs/quant-formats.md has the byte layouts): fp32 and bf16 "keep" formats and
// group-wise uniform integer quantization (2/3/4/8 bits, fp16 scale per group of G values along the last dimension).
// A format is a runtime value, so a tensor slot's storage can be chosen by the memory planner.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agoq {

enum class QuantKind : uint8_t { fp32, bf16, int_group };
enum class QuantRounding : uint8_t { nearest, stochastic };

struct QuantFormat {
  QuantKind kind = QuantKind::fp32;
  int bits = 32;          // 32 (fp32), 16 (bf16), or 2/3/4/8 (int_group)
  int group = 128;        // G: values per scale, along a row; 32, 64, 128 or 256 (int_group only)
  bool symmetric = true;  // int_group: abs-max, signed codes; false: min/max with an fp32 zero point (the min)
  QuantRounding rounding = QuantRounding::nearest;  // int_group only; keep formats round to nearest (even)
  bool operator==(const QuantFormat&) const = default;
};

constexpr QuantFormat quant_format_fp32() { return {}; }
constexpr QuantFormat quant_format_bf16() { return {QuantKind::bf16, 16}; }
constexpr QuantFormat quant_format_int(int bits, int group = 128, bool symmetric = true,
                                       QuantRounding rounding = QuantRounding::nearest) {
  return {QuantKind::int_group, bits, group, symmetric, rounding};
}

// Throws agoq::Error naming the bad field.
void quant_format_check(const QuantFormat& fmt);
// "fp32", "bf16", "int4.g128.sym.nearest", "int3.g64.asym.stochastic"; quant_format_parse reads the same
// (also the short forms "int4" = int4.g128.sym.nearest, and "sr"/"rn" for the rounding).
std::string quant_format_name(const QuantFormat& fmt);
QuantFormat quant_format_parse(std::string_view name);

// Storage bits per value including scale and zero-point overhead, for a row length that is a multiple of G:
// int b, group G: b + 16/G (symmetric) or b + 48/G (asymmetric: fp16 scale + fp32 min). 4-bit G=128 sym -> 4.125.
double quant_bits_per_value(const QuantFormat& fmt);

// Row layout: rows are independent (a producer can encode row r alone), each starting on a byte boundary.
size_t quant_row_groups(const QuantFormat& fmt, size_t cols);      // ceil(cols / G); 0 for keep formats
size_t quant_row_code_bytes(const QuantFormat& fmt, size_t cols);  // ceil(cols * bits / 8)
constexpr size_t kQuantAlign = 64;  // sections of a tensor's allocation start on this boundary

// Byte offsets of the three sections (codes, fp16 scales, fp32 mins) inside one allocation of quant_bytes().
struct QuantLayout {
  size_t code_bytes_per_row, groups_per_row;
  size_t scales_offset, mins_offset, total_bytes;
};
QuantLayout quant_layout(const QuantFormat& fmt, size_t rows, size_t cols);
// Exact bytes a QuantizedTensor of this shape allocates (for memory planning).
size_t quant_bytes(const QuantFormat& fmt, size_t rows, size_t cols);

// Where one row's (or one tensor's row 0's) bytes live. Keep formats use only `codes` (raw fp32 / bf16 bytes);
// `mins` is used only by asymmetric int formats.
struct QuantView {
  uint8_t* codes = nullptr;
  uint16_t* scales = nullptr;
  float* mins = nullptr;
};
struct QuantConstView {
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const float* mins = nullptr;
  QuantConstView() = default;
  QuantConstView(const uint8_t* c, const uint16_t* s, const float* m) : codes(c), scales(s), mins(m) {}
  QuantConstView(const QuantView& v) : codes(v.codes), scales(v.scales), mins(v.mins) {}
};
// Row 0's view of an allocation laid out as `layout` (quant_layout) starting at `base`, in host or device memory.
QuantView quant_view_at(const QuantFormat& fmt, const QuantLayout& layout, uint8_t* base);
// The view of row `row` given the view of row 0 (offsets from quant_row_code_bytes / quant_row_groups).
QuantView quant_view_row(const QuantFormat& fmt, size_t cols, const QuantView& base, size_t row);
QuantConstView quant_view_row(const QuantFormat& fmt, size_t cols, const QuantConstView& base, size_t row);

// Stochastic rounding is keyed by (seed, tensor id, global element index = row * cols + col).
struct QuantSeed {
  uint64_t seed = 0;
  uint64_t tensor_id = 0;
};

// Result of an encode: inputs it could not represent. Non-finite values (NaN/Inf) and groups whose step does
// not fit fp16 (|x| beyond ~65504 * (2^b - 1) / 2) are counted; such a group decodes to NaN, never to plausible
// garbage. The caller decides (e.g. skip the step).
struct QuantStatus {
  size_t nonfinite = 0;        // NaN/Inf input values
  size_t overflow_groups = 0;  // finite groups whose scale overflowed fp16
  bool ok() const { return nonfinite == 0 && overflow_groups == 0; }
  QuantStatus& operator+=(const QuantStatus& o) {
    nonfinite += o.nonfinite, overflow_groups += o.overflow_groups;
    return *this;
  }
};

}  // namespace agoq

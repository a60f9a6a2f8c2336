// Format-generic quantized storage: encode/decode rows of a row-major fp32 tensor to any QuantFormat, and a
// QuantizedTensor that owns the bytes (one tracked allocation: codes, fp16 scales, fp32 mins; see quant_layout).
//
// Fused use: a producer that has just computed row r (in registers/L1) calls quant_encode_row(fmt, row, cols,
// quant_view_row(fmt, cols, base, r), seed, r); a consumer calls quant_decode_rows for a tile of rows. The
// whole-tensor functions are loops over these, so fused and unfused give identical bytes.
#pragma once
#include <string_view>

#include "core/memory.h"
#include "quant/format.h"

namespace agoq {

// Encodes one row (cols values) into dst_row (the view of this row). row_index keys stochastic rounding
// (global element index = row_index * cols + col). Keep formats need dst_row.codes aligned to 2 (bf16) bytes.
QuantStatus quant_encode_row(const QuantFormat& fmt, const float* row, size_t cols, const QuantView& dst_row,
                             const QuantSeed& seed, size_t row_index);
void quant_decode_row(const QuantFormat& fmt, const QuantConstView& src_row, size_t cols, float* out);

// Rows [row_begin, row_begin + row_count) of a tensor whose row 0 is at `base`; src / out hold those rows only
// (row_count * cols values). OpenMP over rows for large inputs; the result does not depend on the thread count.
QuantStatus quant_encode_rows(const QuantFormat& fmt, const float* src, size_t row_begin, size_t row_count, size_t cols,
                              const QuantView& base, const QuantSeed& seed);
void quant_decode_rows(const QuantFormat& fmt, const QuantConstView& base, size_t row_begin, size_t row_count,
                       size_t cols, float* out);

// A quantized tensor: one tracked allocation laid out by quant_layout, zero-filled, in the memory `Bytes` allocates
// (Buffer<uint8_t>: the host's, QuantizedTensor; cuda/quant_cuda.h's DeviceQuantTensor: the GPU's).
template <class Bytes>
class QuantTensorOf {
 public:
  QuantTensorOf() = default;
  // Allocates quant_bytes(fmt, rows, cols) bytes in category `cat` (e.g. activations).
  QuantTensorOf(const QuantFormat& fmt, size_t rows, size_t cols, MemCategory cat, std::string_view tag = {})
      : fmt_(fmt),
        rows_(rows),
        cols_(cols),
        layout_(quant_layout(fmt, rows, cols)),
        data_(layout_.total_bytes, cat, tag) {}

  const QuantFormat& format() const { return fmt_; }
  size_t rows() const { return rows_; }
  size_t cols() const { return cols_; }
  size_t bytes() const { return data_.bytes(); }
  QuantView view() { return quant_view_at(fmt_, layout_, data_.data()); }  // row 0
  QuantConstView view() const { return const_cast<QuantTensorOf*>(this)->view(); }
  QuantView row(size_t r) { return quant_view_row(fmt_, cols_, view(), r); }
  QuantConstView row(size_t r) const { return quant_view_row(fmt_, cols_, view(), r); }
  Bytes& data() { return data_; }
  const Bytes& data() const { return data_; }

 private:
  QuantFormat fmt_;
  size_t rows_ = 0, cols_ = 0;
  QuantLayout layout_{};
  Bytes data_;
};
using QuantizedTensor = QuantTensorOf<Buffer<uint8_t>>;

// src has rows() * cols() values.
QuantStatus quant_encode(QuantizedTensor& t, const float* src, const QuantSeed& seed);
void quant_decode_rows(const QuantizedTensor& t, size_t row_begin, size_t row_count, float* out);
void quant_decode(const QuantizedTensor& t, float* out);

}  // namespace agoq

#include "quant/tensor.h"

#include "core/error.h"
#include "quant/group_quant.h"
#include "quant/keep.h"
#include "quant/simd.h"

namespace agoq {

namespace {
// Below this many values a tensor is encoded by the calling thread (a parallel region costs microseconds).
constexpr size_t kParallelMin = size_t(1) << 15;
}  // namespace

QuantStatus quant_encode_row(const QuantFormat& f, const float* row, size_t cols, const QuantView& dst,
                             const QuantSeed& seed, size_t row_index) {
  const bool simd = quant_simd_enabled();
  switch (f.kind) {
    case QuantKind::fp32: return {keep_encode_fp32(row, cols, reinterpret_cast<float*>(dst.codes), simd), 0};
    case QuantKind::bf16: return {keep_encode_bf16(row, cols, reinterpret_cast<uint16_t*>(dst.codes), simd), 0};
    case QuantKind::int_group: return quant_int_encode_row(f, row, cols, dst, seed, uint64_t(row_index) * cols, simd);
  }
  fail("quant_encode_row: bad format kind");
}

void quant_decode_row(const QuantFormat& f, const QuantConstView& src, size_t cols, float* out) {
  const bool simd = quant_simd_enabled();
  switch (f.kind) {
    case QuantKind::fp32:
      keep_encode_fp32(reinterpret_cast<const float*>(src.codes), cols, out, simd);  // a copy
      return;
    case QuantKind::bf16: return keep_decode_bf16(reinterpret_cast<const uint16_t*>(src.codes), cols, out, simd);
    case QuantKind::int_group: return quant_int_decode_row(f, src, cols, out, simd);
  }
  fail("quant_decode_row: bad format kind");
}

QuantStatus quant_encode_rows(const QuantFormat& f, const float* src, size_t row_begin, size_t row_count, size_t cols,
                              const QuantView& base, const QuantSeed& seed) {
  quant_format_check(f);
  size_t nonfinite = 0, overflow = 0;
  const auto n = static_cast<long long>(row_count);
#pragma omp parallel for schedule(static) reduction(+ : nonfinite, overflow) if (row_count * cols >= kParallelMin)
  for (long long i = 0; i < n; ++i) {
    const size_t r = row_begin + size_t(i);
    const QuantStatus st = quant_encode_row(f, src + size_t(i) * cols, cols, quant_view_row(f, cols, base, r), seed, r);
    nonfinite += st.nonfinite, overflow += st.overflow_groups;
  }
  return {nonfinite, overflow};
}

void quant_decode_rows(const QuantFormat& f, const QuantConstView& base, size_t row_begin, size_t row_count,
                       size_t cols, float* out) {
  quant_format_check(f);
  const auto n = static_cast<long long>(row_count);
#pragma omp parallel for schedule(static) if (row_count * cols >= kParallelMin)
  for (long long i = 0; i < n; ++i)
    quant_decode_row(f, quant_view_row(f, cols, base, row_begin + size_t(i)), cols, out + size_t(i) * cols);
}

QuantStatus quant_encode(QuantizedTensor& t, const float* src, const QuantSeed& seed) {
  return quant_encode_rows(t.format(), src, 0, t.rows(), t.cols(), t.view(), seed);
}

void quant_decode_rows(const QuantizedTensor& t, size_t row_begin, size_t row_count, float* out) {
  AGOQ_CHECK(row_begin + row_count <= t.rows(), "quant_decode_rows: rows [", row_begin, ", ", row_begin + row_count,
             ") out of ", t.rows());
  quant_decode_rows(t.format(), t.view(), row_begin, row_count, t.cols(), out);
}

void quant_decode(const QuantizedTensor& t, float* out) { quant_decode_rows(t, 0, t.rows(), out); }

}  // namespace agoq

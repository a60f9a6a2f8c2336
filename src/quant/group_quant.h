// Activation format: group-wise uniform quantization of rows (2/3/4/8 bits, G values per fp16 scale, symmetric or
// asymmetric, nearest or stochastic rounding). These are the row kernels; quant/tensor.h has the format-generic
// API (quant_encode_row, quant_encode_rows, QuantizedTensor) built on them.
#pragma once
#include "quant/format.h"
#include "quant/quant_math.h"  // quant_int_offset: the decoding of a code

namespace agoq {

// Encodes one row of `cols` values (fmt.kind must be int_group) into row.codes (quant_row_code_bytes(fmt, cols)
// bytes), row.scales (quant_row_groups values) and, if asymmetric, row.mins. `first` is the global index of x[0]
// (row * cols), which keys stochastic rounding. simd=false runs the portable scalar kernel (same bits).
QuantStatus quant_int_encode_row(const QuantFormat& fmt, const float* x, size_t cols, const QuantView& row,
                                 const QuantSeed& seed, uint64_t first, bool simd);
// Decodes one row into out[0 .. cols).
void quant_int_decode_row(const QuantFormat& fmt, const QuantConstView& row, size_t cols, float* out, bool simd);

}  // namespace agoq

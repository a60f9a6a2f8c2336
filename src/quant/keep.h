// Keep formats: fp32 (a checked copy) and bf16 (round to nearest, ties to even). Same row interface as the int
// formats (quant/tensor.h dispatches); both count non-finite inputs so callers can skip a step.
#pragma once
#include <cstddef>
#include <cstdint>

namespace agoq {

// Copies x to out (out may be unaligned); returns the number of NaN/Inf values.
size_t keep_encode_fp32(const float* x, size_t n, float* out, bool simd);
// bf16 RNE of x (NaN stays a quiet NaN, Inf stays Inf); returns the number of NaN/Inf inputs.
size_t keep_encode_bf16(const float* x, size_t n, uint16_t* out, bool simd);
void keep_decode_bf16(const uint16_t* in, size_t n, float* out, bool simd);

}  // namespace agoq

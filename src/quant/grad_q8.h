// Gradient format: INT8 symmetric codes in [-127, 127] (zero is exact) with one fp32 scale (absmax / 127) per
// block of B consecutive values. Every function works on a range [x, x + n) whose first value starts a block,
// and n need not be a multiple of B (the last block is shorter), so a caller can process N contiguous shards of one
// gradient independently: shard k's codes start at its element offset and its scales at the sum of
// grad_q8_blocks() of the shards before it; blocks never straddle shards.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/memory.h"
#include "quant/format.h"

namespace agoq {

struct GradQ8Options {
  int block = 256;  // B, 1 .. 65536
  QuantRounding rounding = QuantRounding::nearest;
  // Stochastic rounding: element i of the range uses the Philox uniform of global index index_base + i under
  // seed (pass a different seed.seed per accumulation step, or the steps' rounding would be correlated).
  QuantSeed seed{};
  uint64_t index_base = 0;
  // Write the codes with non-temporal (streaming) stores (nearest rounding, AVX2): for a large output that is not
  // read right away, it saves the read-for-ownership of every line. Same codes either way.
  bool stream = false;
};

inline size_t grad_q8_blocks(size_t n, int block) { return (n + size_t(block) - 1) / size_t(block); }

// codes[0..n), scales[0..grad_q8_blocks(n, B)). A block that holds NaN/Inf gets scale NaN (it decodes to NaN);
// the return value is the number of non-finite inputs (0 = ok).
size_t grad_q8_quantize(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& opt = {});
void grad_q8_dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block = 256);
// out += dequantized (for the local sum of received shards).
void grad_q8_dequantize_add(const int8_t* codes, const float* scales, size_t n, float* out, int block = 256);
// The same values as grad_q8_dequantize, written with non-temporal (streaming) stores: for an output larger than
// the cache that is not read right away, it saves the read-for-ownership of every output line.
void grad_q8_dequantize_stream(const int8_t* codes, const float* scales, size_t n, float* out, int block = 256);
// One pass over nsrc quantized copies of the same range (the reduce step of allreduce_q8), block by block:
// y = (codes_0 * scales_0 + codes_1 * scales_1 + ... in source order, each term an fma) / divisor, which is
// bit for bit dequantize(0), dequantize_add(1..nsrc-1), then a division (none when divisor is 1). y goes to
// out_f32 and/or is requantized (nearest) into out_codes/out_scales; either output may be null. Without out_f32
// the block's sum lives in an L1 tile and never reaches memory. Returns the number of non-finite sums.
size_t grad_q8_sum_requantize(const int8_t* const* codes, const float* const* scales, int nsrc, size_t n, float divisor,
                              float* out_f32, int8_t* out_codes, float* out_scales, int block = 256);
// Sum of squares of the dequantized values, straight from the codes (scale^2 * sum code^2 per block, in double,
// blocks summed in a fixed order): a gradient norm without writing the fp32 values anywhere.
double grad_q8_sum_squares(const int8_t* codes, const float* scales, size_t n, int block = 256);
// Local accumulation in one pass: q <- quantize(dequantize(q) + g), block by block (the scale grows with the sum,
// so large sums never overflow the codes). Returns the number of non-finite sums (their blocks get scale NaN).
size_t grad_q8_accumulate(int8_t* codes, float* scales, const float* g, size_t n, const GradQ8Options& opt = {});

// An owning, tracked buffer for one gradient in this format (zero = an empty accumulator).
struct GradQ8Buffer {
  GradQ8Buffer() = default;
  GradQ8Buffer(size_t n, int block, MemCategory cat, std::string_view tag = {})
      : n(n), block(block), codes(n, cat, tag), scales(grad_q8_blocks(n, block), cat, tag) {}
  size_t n = 0;
  int block = 256;
  Buffer<int8_t> codes;
  Buffer<float> scales;
};

}  // namespace agoq

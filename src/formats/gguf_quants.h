// GGML's tensor types as GGUF stores them (ggml.h's ggml_type ids): their block sizes, and the dequantization to
// fp32 of those agoq reads. Every supported type is decoded as llama.cpp's reference dequantize_row_* does it (the
// same products and sums, each rounded to fp32, none fused), so the values are bit-identical to gguf-py's
// gguf.quants.dequantize (tests/formats/test_gguf.cpp). Blocks, QK = values per block:
//   F32, F16, BF16          one value
//   Q8_0  (QK 32, 34 B)     fp16 d, 32 int8 q: d*q
//   Q4_0  (QK 32, 18 B)     fp16 d, 16 bytes of nibbles (value j: low nibble of byte j, j+16: high): d*(q-8)
//   Q4_1  (QK 32, 20 B)     fp16 d, fp16 m, nibbles: d*q + m
//   Q5_0  (QK 32, 22 B)     fp16 d, uint32 of fifth bits (bit j for value j), nibbles: d*(q-16)
//   Q5_1  (QK 32, 24 B)     fp16 d, fp16 m, fifth bits, nibbles: d*q + m
//   Q4_K  (QK 256, 144 B)   fp16 d, dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks of 32, 128 bytes of
//                           nibbles: (d*sc)*q - (dmin*m)
//   Q5_K  (QK 256, 176 B)   as Q4_K, with 32 bytes of fifth bits (bit s of byte l: sub-block s, value l)
//   Q6_K  (QK 256, 210 B)   128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, fp16 d: (d*sc)*(q-32)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace agoq {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30
};

struct GgmlTypeInfo {
  const char* name;    // "Q4_K"
  uint32_t block;      // values per block
  uint32_t bytes;      // bytes per block
  bool dequantizable;  // agoq decodes it (gguf_dequantize)
};
// The type with ggml id `id`, or null for an id GGUF does not define (or one ggml has retired: 4, 5).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// "Q4_K", or "type 77" for an unknown id.
std::string ggml_type_name(uint32_t id);
// The types agoq dequantizes, for messages: "F32, F16, BF16, Q8_0, ...".
std::string ggml_types_supported();

// Decodes n values (a multiple of the type's block) from src, n / block * bytes bytes, into dst. A type agoq does
// not decode throws agoq::Error naming it.
void gguf_dequantize(uint32_t type, const void* src, float* dst, size_t n);

}  // namespace agoq

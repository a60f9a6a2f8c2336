// Small building blocks shared by the quantization kernels: fp16/bf16 conversions, the Philox random bytes
// for stochastic rounding, and the AVX2 versions of both. Every AVX2 helper has a scalar twin that gives the same bits;
// quant_set_simd(false) makes all kernels take the scalar path (tests compare the two).
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/rng.h"
#include "quant/format.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AGOQ_QUANT_AVX2 1
#include <immintrin.h>
#else
#define AGOQ_QUANT_AVX2 0
#endif

namespace agoq {

// True when the AVX2 kernels are compiled in and not switched off. Process-wide; flip only between calls.
bool quant_simd_enabled();
void quant_set_simd(bool on);

// ---- scalar conversions (portable) ----

// fp32 -> fp16 rounding toward +inf, for x >= 0 (scales: rounding up keeps every code in range). NaN -> NaN,
// anything above 65504 -> +inf (the caller reports it as overflow).
inline uint16_t f32_to_f16_up(float x) {
  if (std::isnan(x)) return 0x7E00;
  if (!(x > 0)) return 0;
  if (x > 65504.f) return 0x7C00;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const int e = int(u >> 23) - 127;
  if (e < -14) return uint16_t(std::ceil(x * 0x1p24f));  // fp16 subnormal: units of 2^-24 (exact scaling)
  const uint32_t m = u & 0x7FFFFFu;
  const uint16_t h = uint16_t(((e + 15) << 10) | (m >> 13));
  return uint16_t(h + ((m & 0x1FFFu) != 0));  // a carry into the exponent is the correct next fp16
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(m) * 0x1p-24f));
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | ((m ? m | 0x200u : 0u) << 13));  // NaN: quiet, as F16C
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN, overflow rounds to Inf as RNE does.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// ---- Philox random bytes for stochastic rounding ----
// Stochastic rounding draws one random *byte* per element (8-bit uniforms; docs/quant-formats.md derives the
// resulting bias, at most 1/512 of a step). Element i of a tensor uses
//   byte i % 4 of word (i / 32) % 4 of philox4x32(seed, tensor_id, ctr = (i / 128) * 8 + rev3((i / 4) % 8)),
// rev3 reversing 3 bits, so chunk c (elements [128 c, 128 c + 128)) is exactly 8 Philox calls on counters
// 8c .. 8c + 7. Depends only on (seed, tensor id, i): identical for any thread count, any row split, both kernels.
// Why rev3: the chunk's bytes are kept in the order the AVX2 kernels produce and consume them cheapest (the
// "slot" order below): the 4 word vectors of the 8 counters are stored with one shuffle each, and 32 bytes feed
// the 16-bit rounding lanes of 32 values with one unpack each (the order of packs_epi32's output), no lane-crossing
// permutes. Element j of a 32-aligned block has its byte at position quant_random_slot(j) of the block.
constexpr size_t kQuantRandomChunk = 128;  // elements (bytes) per chunk of 8 Philox calls

// Position of element j's byte in a buffer that starts at an element index that is a multiple of 32: bits 2-4 of
// j rotated right by one (the 4-byte units of a 32-byte block in the order 0 2 4 6 1 3 5 7 of their elements).
constexpr size_t quant_random_slot(size_t j) { return (j & ~size_t(0x1C)) | ((j >> 1) & 0xC) | ((j & 4) << 2); }

inline uint8_t quant_random_byte_at(const QuantSeed& s, uint64_t i) {
  const uint64_t u = (i >> 2) & 7, rev = ((u & 1) << 2) | (u & 2) | (u >> 2);
  const uint32_t w = philox4x32(s.seed, s.tensor_id, (i >> 7) * 8 + rev)[(i >> 5) & 3];
  return uint8_t(w >> (8 * (i & 3)));
}
// The uniform that byte stands for, (byte + 1/2) / 256 in (0, 1) (for tests and documentation).
inline float quant_uniform_at(const QuantSeed& s, uint64_t i) {
  return (float(quant_random_byte_at(s, i)) + 0.5f) * (1.f / 256);
}

// Stochastic rounding of t = T / 256, given T = round_to_nearest_even(256 t) and the element's random byte:
// floor(T / 256) plus 1 iff the 8 fractional bits of T plus the byte carry out. The same as
// floor(t + (byte + 1/2) / 256) except at exact ties of 256 t. E[result] = T / 256 over the byte, so the bias is
// |T / 256 - t| <= 1/512 of a step. Arithmetic shift: a floor for negative T too (the gradient format is signed).
inline int32_t quant_sr_round(int32_t T, uint8_t byte) { return (T + int32_t(byte)) >> 8; }

// The bytes of elements [first, first + n) laid out for a block starting at `first` (element first + j's byte at
// r[quant_random_slot(j)]), from a buffer whose byte 0 belongs to element `base` (a multiple of the chunk): a
// pointer into the buffer when first is a multiple of 32, else a copy into tmp (n rounded up to 32 bytes). Only
// rows or blocks that do not start on a multiple of 32 elements pay for the copy.
const uint8_t* quant_random_copy_block(const uint8_t* buf, size_t off, size_t n, uint8_t* tmp);  // the copy (cold)
inline const uint8_t* quant_random_block(const uint8_t* buf, uint64_t base, uint64_t first, size_t n, uint8_t* tmp) {
  const size_t off = size_t(first - base);
  return off % 32 == 0 ? buf + off : quant_random_copy_block(buf, off, n, tmp);
}

// Bytes of chunks [chunk, chunk + chunks) into out[0 .. 128 * chunks), in slot order: element 128 chunk + j's byte
// at out[quant_random_slot(j)].
void quant_random_chunks_scalar(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out);
#if AGOQ_QUANT_AVX2
void quant_random_chunks_avx2(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out);
#endif

// A sliding window of random bytes over whole chunks, generated as a kernel walks a row (or a thread its blocks)
// in order. prepare() generates ahead: called for the next group just before quantizing the current one, its
// Philox work (long multiply chains, latency-bound on its own) overlaps the quantizer's independent operations
// in the out-of-order core. Consecutive small groups share the chunks they straddle.
class QuantRandomBytes {
 public:
  static constexpr size_t kWindow = 8192;  // bytes held: two batches of 8 groups of 256, plus alignment
  static constexpr size_t kMaxSpan = kWindow - kQuantRandomChunk;  // largest end - keep of prepare()
  QuantRandomBytes(const QuantSeed& s, bool simd);
  // Makes the bytes of elements [keep, end) available (end - keep <= kMaxSpan), generating what is missing; bytes
  // before `keep` may be dropped, and pointers from earlier get() calls may move.
  void prepare(uint64_t keep, uint64_t end) {
    if (keep < lo_ || end > hi_) extend(keep, end);
  }
  // The bytes of elements [first, first + n) (n <= kMaxSpan) as a block starting at `first` (quant_random_block;
  // tmp: n rounded up to 32 bytes), generated if not prepared.
  const uint8_t* get(uint64_t first, size_t n, uint8_t* tmp) {
    prepare(first, first + n);
    return quant_random_block(buf_, lo_, first, n, tmp);
  }
  // The byte of element i (prepared).
  uint8_t at(uint64_t i) const { return buf_[quant_random_slot(size_t(i - lo_))]; }

 private:
  void extend(uint64_t keep, uint64_t end);
  QuantSeed seed_;
  bool simd_;
  uint64_t lo_ = 0, hi_ = 0;              // elements [lo_, hi_) are in buf_ (multiples of the chunk)
  alignas(32) unsigned char key_[704];  // the AVX2 key schedule (simd::PhiloxKey8), built once
  alignas(32) uint8_t buf_[kWindow];
};

}  // namespace agoq

// Small building blocks shared by the quantization kernels: the Philox random bytes for stochastic rounding (the
// fp16/bf16 conversions are in quant/half.h, the per-value math in quant/quant_math.h). Their AVX2 versions are in
// quant/quant_avx2.h, which only .cpp files include; each has a scalar twin here that gives the same bits.
// quant_set_simd(false) makes all kernels take the scalar path (tests compare the two).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/isa.h"
#include "core/rng.h"
#include "quant/format.h"
#include "quant/quant_math.h"

namespace agoq {

// True when the AVX2 kernels are compiled in and not switched off. Process-wide; flip only between calls.
bool quant_simd_enabled();
void quant_set_simd(bool on);
// Where the SIMD kernels are on: true when the CPU has AVX-512 (F, BW, VL, DQ; core/isa.h) and it is not switched
// off, so the kernels take their AVX-512 variants (same bits). quant_set_avx512(false) keeps them on AVX2 (tests
// and `bench quant --avx2` compare the two on one machine); true never enables what the CPU lacks.
bool quant_cpu_has_avx512();
bool quant_avx512_enabled();
void quant_set_avx512(bool on);
// The kernels in use, for messages: "AVX-512", "AVX2" or "scalar".
const char* quant_kernels_name();

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

// quant_random_slot, quant_random_byte_at and quant_sr_round, shared with the CUDA kernels, are in quant/quant_math.h.

// The AVX-512 kernels keep the same bytes in another order within each 32-byte block, the order of the 16-bit lanes
// of packs_epi32(a, b) for zmm a, b (values 0-15 and 16-31): 128-bit lane k holds the 4-byte units k and 4 + k, so
// unit u sits at position 2 (u % 4) + u / 4. Their Philox lanes produce it with one two-source permute per 64 bytes.
constexpr size_t quant_random_slot512(size_t j) {
  return (j & ~size_t(0x1F)) | (((j >> 2) & 3) << 3) | (((j >> 4) & 1) << 2) | (j & 3);
}
enum class QuantRandomLayout : uint8_t { avx2, avx512 };  // quant_random_slot or quant_random_slot512
constexpr size_t quant_random_slot(QuantRandomLayout l, size_t j) {
  return l == QuantRandomLayout::avx512 ? quant_random_slot512(j) : quant_random_slot(j);
}

// The bytes of elements [first, first + n) laid out for a block starting at `first` (element first + j's byte at
// r[quant_random_slot(j)]), from a buffer whose byte 0 belongs to element `base` (a multiple of the chunk): a
// pointer into the buffer when first is a multiple of 32, else a copy into tmp (n rounded up to 32 bytes). Only
// rows or blocks that do not start on a multiple of 32 elements pay for the copy.
// Layout: the buffer's and the result's (quant_random_slot512 for the AVX-512 kernels).
const uint8_t* quant_random_copy_block(const uint8_t* buf, size_t off, size_t n, uint8_t* tmp,
                                       QuantRandomLayout layout);  // the copy (cold)
inline const uint8_t* quant_random_block(const uint8_t* buf, uint64_t base, uint64_t first, size_t n, uint8_t* tmp,
                                         QuantRandomLayout layout = QuantRandomLayout::avx2) {
  const size_t off = size_t(first - base);
  return off % 32 == 0 ? buf + off : quant_random_copy_block(buf, off, n, tmp, layout);
}

// Bytes of chunks [chunk, chunk + chunks) into out[0 .. 128 * chunks), in slot order: element 128 chunk + j's byte
// at out[quant_random_slot(j)].
void quant_random_chunks_scalar(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out);
// The same chunks in quant_random_slot512 order, by the AVX-512 Philox (only where quant_cpu_has_avx512()).
void quant_random_chunks_avx512(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out);

// A sliding window of random bytes over whole chunks, generated as a kernel walks a row (or a thread its blocks)
// in order. prepare() generates ahead: called for the next group just before quantizing the current one, its
// Philox work (long multiply chains, latency-bound on its own) overlaps the quantizer's independent operations
// in the out-of-order core. Consecutive small groups share the chunks they straddle.
class QuantRandomBytes {
 public:
  static constexpr size_t kWindow = 8192;  // bytes held: two batches of 8 groups of 256, plus alignment
  static constexpr size_t kMaxSpan = kWindow - kQuantRandomChunk;  // largest end - keep of prepare()
  // simd: the AVX2 generator, slot order (quant_random_slot); false: the scalar one, same order. avx512: the AVX-512
  // generator, quant_random_slot512 order (only where quant_cpu_has_avx512()).
  QuantRandomBytes(const QuantSeed& s, bool simd, bool avx512 = false);
  QuantRandomLayout layout() const { return avx512_ ? QuantRandomLayout::avx512 : QuantRandomLayout::avx2; }
  // Makes the bytes of elements [keep, end) available (end - keep <= kMaxSpan), generating what is missing; bytes
  // before `keep` may be dropped, and pointers from earlier get() calls may move.
  void prepare(uint64_t keep, uint64_t end) {
    if (keep < lo_ || end > hi_) extend(keep, end);
  }
  // The bytes of elements [first, first + n) (n <= kMaxSpan) as a block starting at `first` (quant_random_block;
  // tmp: n rounded up to 32 bytes), generated if not prepared.
  const uint8_t* get(uint64_t first, size_t n, uint8_t* tmp) {
    prepare(first, first + n);
    return quant_random_block(buf_, lo_, first, n, tmp, layout());
  }

 private:
  void extend(uint64_t keep, uint64_t end);
  QuantSeed seed_;
  bool simd_, avx512_;
  uint64_t lo_ = 0, hi_ = 0;            // elements [lo_, hi_) are in buf_ (multiples of the chunk)
  alignas(32) unsigned char key_[704];  // the AVX2 key schedule (simd::PhiloxKey8), built once
  alignas(32) uint8_t buf_[kWindow];
};

}  // namespace agoq

#include "quant/grad_q8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/simd.h"
#include "quant/quant_avx2.h"
#include "quant/quant_avx512.h"

namespace agoq {
namespace {

constexpr size_t kParallelMin = size_t(1) << 15;

// A block's scale and codes come from quant/quant_math.h (shared with the CUDA kernels).
using BlockParams = GradQ8BlockParams;
inline BlockParams block_params(float amax) { return grad_q8_block_params(amax); }

template <bool Stoch>
inline int8_t quantize_one(float y, const BlockParams& p, uint8_t r) {
  return Stoch ? grad_q8_code_stochastic(y, p, r) : grad_q8_code_nearest(y, p);
}

// Random bytes are fetched in pieces of at most this many elements, each with the start of the next piece (up to
// kRandomAhead elements) generated ahead so that its Philox work overlaps this piece's quantization.
constexpr size_t kRandomPiece = 1024, kRandomAhead = 256;
static_assert(kRandomPiece + kRandomAhead <= QuantRandomBytes::kMaxSpan);

// One block of n values: quantize x (Acc = false) or codes' own dequantized values + x (Acc = true). The scalar
// reference; the AVX2 kernel below gives the same bits. Returns the number of non-finite values.
template <bool Acc, bool Stoch>
size_t block_scalar(const float* x, size_t n, int8_t* codes, float* scale, QuantRandomBytes& rb, uint64_t first) {
  const float old = Acc ? *scale : 0.f;
  auto y = [&](size_t j) { return Acc ? grad_q8_decode_add(codes[j], old, x[j]) : x[j]; };
  float amax = 0.f;
  size_t bad = 0;
  for (size_t j = 0; j < n; ++j) {
    const float v = y(j);
    if (!std::isfinite(v)) ++bad;
    else amax = std::max(amax, std::fabs(v));
  }
  if (bad) {
    std::memset(codes, 0, n);
    *scale = NAN;
    return bad;
  }
  const BlockParams p = block_params(amax);
  uint8_t tmp[kRandomPiece];  // a piece's bytes when it does not start on 32 elements
  for (size_t j0 = 0; j0 < n; j0 += kRandomPiece) {
    const size_t m = std::min(kRandomPiece, n - j0);
    const uint8_t* r = Stoch ? rb.get(first + j0, m, tmp) : nullptr;
    for (size_t j = j0; j < j0 + m; ++j)
      codes[j] = quantize_one<Stoch>(y(j), p, Stoch ? r[quant_random_slot(rb.layout(), j - j0)] : 0);
  }
  *scale = p.scale;
  return 0;
}

#if AGOQ_AVX2
// Pass 1 of a block prefetches its input 4 KiB ahead into L1 (and the codes it accumulates into, 1 KiB ahead), as
// the group encoder does (group_quant_batch.h): measured on the Xeon, 64 MiB, 1 thread, AVX-512 quantize 0.81x
// memcpy without, 1.06x with (stochastic 0.54x, 0.9x). Called every 32 values: one line of floats, half a line of
// codes.
inline void prefetch_ahead(const float* x, const int8_t* codes) {
  _mm_prefetch(reinterpret_cast<const char*>(x + 1024), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(x + 1040), _MM_HINT_T0);
  if (codes) _mm_prefetch(reinterpret_cast<const char*>(codes + 1024), _MM_HINT_T0);
}

inline __m256 load_codes8(const int8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

// simd::pack32_i8 with a non-temporal store where codes is 32-byte aligned (a plain store elsewhere).
inline void pack32_i8_stream(__m256i a, __m256i b, __m256i c, __m256i d, int8_t* codes) {
  __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  v = _mm256_max_epi8(_mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
                      _mm256_set1_epi8(-127));
  if (reinterpret_cast<uintptr_t>(codes) & 31) _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), v);
  else _mm256_stream_si256(reinterpret_cast<__m256i*>(codes), v);
}

// stream: codes with non-temporal stores (nearest rounding only; the caller fences).
template <bool Acc, bool Stoch>
size_t block_avx2(const float* x, size_t n, int8_t* codes, float* scale, QuantRandomBytes& rb, uint64_t first,
                  uint64_t limit, bool stream = false) {
  const float old = Acc ? *scale : 0.f;
  const __m256 vold = _mm256_set1_ps(old);
  auto y8 = [&](size_t j) {
    const __m256 v = _mm256_loadu_ps(x + j);
    return Acc ? _mm256_fmadd_ps(load_codes8(codes + j), vold, v) : v;
  };
  auto y1 = [&](size_t j) { return Acc ? grad_q8_decode_add(codes[j], old, x[j]) : x[j]; };
  // max |y| as the integer max of the bit patterns with the sign cleared (monotone for non-negative floats), which
  // also flags NaN/Inf (patterns >= 0x7F800000). Two accumulators: one chain would be bound by latency.
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  auto bits8 = [&](size_t k) { return _mm256_and_si256(_mm256_castps_si256(y8(k)), abs_mask); };
  __m256i max0 = _mm256_setzero_si256(), max1 = max0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    if (j % 32 == 0) prefetch_ahead(x + j, Acc ? codes + j : nullptr);
    max0 = _mm256_max_epi32(max0, bits8(j)), max1 = _mm256_max_epi32(max1, bits8(j + 8));
  }
  for (; j + 8 <= n; j += 8) max0 = _mm256_max_epi32(max0, bits8(j));
  uint32_t amax_bits = 0;
  {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epi32(max0, max1));
    for (uint32_t v : lanes) amax_bits = std::max(amax_bits, v);
  }
  for (; j < n; ++j) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(y1(j)) & 0x7FFFFFFFu);
  if (amax_bits >= 0x7F800000u) return block_scalar<Acc, Stoch>(x, n, codes, scale, rb, first);  // rare: count, mark
  const BlockParams p = block_params(std::bit_cast<float>(amax_bits));
  // y * pre is y itself when pre = 1 (blocks not tiny): the multiplication is skipped, same bits.
  const bool scaled = p.pre != 1.f;
  const __m256 pre = _mm256_set1_ps(p.pre), inv = _mm256_set1_ps(Stoch ? p.inv256 : p.inv);
  alignas(32) uint8_t tmp[Stoch ? kRandomPiece : 1];  // a piece's bytes when it does not start on 32 elements
  for (size_t j0 = 0; j0 < n; j0 += kRandomPiece) {
    const size_t m = std::min(kRandomPiece, n - j0);
    const uint8_t* r = nullptr;
    if constexpr (Stoch) {  // this piece's bytes, and the next piece's generated ahead
      rb.prepare(first + j0, std::min(first + j0 + m + kRandomAhead, limit));
      r = rb.get(first + j0, m, tmp);
    }
    // Codes before clamping; the packs clamp to [-127, 127] exactly like quantize_one. cvtps rounds to nearest
    // even (the default MXCSR mode, as rintf).
    auto code8 = [&](size_t k) {
      const __m256 v = scaled ? _mm256_mul_ps(y8(k), pre) : y8(k);
      return _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
    };
    for (j = j0; j + 32 <= j0 + m; j += 32) {
      // All four are computed before the store: with Acc they read the codes being overwritten.
      const __m256i a = code8(j), b = code8(j + 8), c = code8(j + 16), d = code8(j + 24);
      if constexpr (Stoch) simd::pack32_i8_sr(a, b, c, d, r + (j - j0), codes + j);
      else if (stream) pack32_i8_stream(a, b, c, d, codes + j);
      else simd::pack32_i8(a, b, c, d, codes + j);
    }
    for (; j < j0 + m; ++j) codes[j] = quantize_one<Stoch>(y1(j), p, Stoch ? r[quant_random_slot(j - j0)] : 0);
  }
  *scale = p.scale;
  return 0;
}
#endif

#if AGOQ_AVX512
AGOQ_AVX512_BEGIN
inline __m512 load_codes16(const int8_t* c) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}

// block_avx2 with 16 values per vector; rb in the AVX-512 layout (quant_random_slot512).
template <bool Acc, bool Stoch>
size_t block_avx512(const float* x, size_t n, int8_t* codes, float* scale, QuantRandomBytes& rb, uint64_t first,
                    uint64_t limit, bool stream = false) {
  const float old = Acc ? *scale : 0.f;
  const __m512 vold = _mm512_set1_ps(old);
  auto y16 = [&](size_t j) {
    const __m512 v = _mm512_loadu_ps(x + j);
    return Acc ? _mm512_fmadd_ps(load_codes16(codes + j), vold, v) : v;
  };
  auto y1 = [&](size_t j) { return Acc ? grad_q8_decode_add(codes[j], old, x[j]) : x[j]; };
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  auto bits16 = [&](size_t k) { return _mm512_and_si512(_mm512_castps_si512(y16(k)), abs_mask); };
  __m512i max0 = _mm512_setzero_si512(), max1 = max0;
  size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    prefetch_ahead(x + j, Acc ? codes + j : nullptr);
    max0 = _mm512_max_epi32(max0, bits16(j)), max1 = _mm512_max_epi32(max1, bits16(j + 16));
  }
  for (; j + 16 <= n; j += 16) max0 = _mm512_max_epi32(max0, bits16(j));
  uint32_t amax_bits = uint32_t(_mm512_reduce_max_epi32(_mm512_max_epi32(max0, max1)));
  for (; j < n; ++j) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(y1(j)) & 0x7FFFFFFFu);
  if (amax_bits >= 0x7F800000u) return block_scalar<Acc, Stoch>(x, n, codes, scale, rb, first);  // rare: count, mark
  const BlockParams p = block_params(std::bit_cast<float>(amax_bits));
  const bool scaled = p.pre != 1.f;
  const __m512 pre = _mm512_set1_ps(p.pre), inv = _mm512_set1_ps(Stoch ? p.inv256 : p.inv);
  alignas(64) uint8_t tmp[Stoch ? kRandomPiece : 1];
  for (size_t j0 = 0; j0 < n; j0 += kRandomPiece) {
    const size_t m = std::min(kRandomPiece, n - j0);
    const uint8_t* r = nullptr;
    if constexpr (Stoch) {
      rb.prepare(first + j0, std::min(first + j0 + m + kRandomAhead, limit));
      r = rb.get(first + j0, m, tmp);
    }
    auto code16 = [&](size_t k) {
      const __m512 v = scaled ? _mm512_mul_ps(y16(k), pre) : y16(k);
      return _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
    };
    auto codes32 = [&](size_t k) {  // values k .. k + 31 as 16-bit lanes
      if constexpr (Stoch) return simd512::codes16_i8_sr(code16(k), code16(k + 16), r + (k - j0));
      else return simd512::codes16(code16(k), code16(k + 16));
    };
    for (j = j0; j + 64 <= j0 + m; j += 64) {
      const __m512i ab = codes32(j), cd = codes32(j + 32);  // both before the store: with Acc they read the codes
      if (stream && !(reinterpret_cast<uintptr_t>(codes + j) & 63))
        _mm512_stream_si512(reinterpret_cast<__m512i*>(codes + j), simd512::codes64_i8(ab, cd));
      else simd512::store_codes64_i8(ab, cd, codes + j);
    }
    if (j + 32 <= j0 + m) simd512::store_codes32_i8(codes32(j), codes + j), j += 32;
    for (; j < j0 + m; ++j) codes[j] = quantize_one<Stoch>(y1(j), p, Stoch ? r[quant_random_slot512(j - j0)] : 0);
  }
  *scale = p.scale;
  return 0;
}

// The AVX-512 part of dequantize: values [j, end) of a block with scale s, 16 at a time; returns where it stopped.
template <bool Add>
size_t dequantize_avx512(const int8_t* codes, float s, size_t j, size_t end, float* out) {
  const __m512 vs = _mm512_set1_ps(s);
  for (; j + 16 <= end; j += 16) {
    simd::prefetch_for_write(out + j);
    const __m512 c = load_codes16(codes + j);
    _mm512_storeu_ps(out + j, Add ? _mm512_fmadd_ps(c, vs, _mm512_loadu_ps(out + j)) : _mm512_mul_ps(c, vs));
  }
  return j;
}
AGOQ_AVX512_END
#endif

template <bool Acc, bool Stoch>
size_t run_blocks(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o) {
  AGOQ_CHECK(o.block >= 1 && o.block <= 65536, "grad_q8: block must be in [1, 65536], got ", o.block);
  const size_t B = size_t(o.block), nb = grad_q8_blocks(n, o.block);
  const bool simd = quant_simd_enabled(), avx512 = quant_avx512_enabled();
  const uint64_t limit = o.index_base + n;
  size_t bad = 0;
  // Each thread walks a contiguous run of blocks with its own window of random bytes (blocks smaller than a
  // Philox chunk share it). The bytes depend only on the element index, so any split gives the same codes.
#pragma omp parallel reduction(+ : bad) if (n >= kParallelMin)
  {
    QuantRandomBytes rb(o.seed, simd, avx512);
#pragma omp for schedule(static)
    for (long long b = 0; b < static_cast<long long>(nb); ++b) {
      const size_t j = size_t(b) * B, m = std::min(B, n - j);
#if AGOQ_AVX512
      if (avx512) {
        bad += block_avx512<Acc, Stoch>(x + j, m, codes + j, scales + b, rb, o.index_base + j, limit, o.stream);
        continue;
      }
#endif
#if AGOQ_AVX2
      if (simd) {
        bad += block_avx2<Acc, Stoch>(x + j, m, codes + j, scales + b, rb, o.index_base + j, limit, o.stream);
        continue;
      }
#endif
      bad += block_scalar<Acc, Stoch>(x + j, m, codes + j, scales + b, rb, o.index_base + j);
    }
#if AGOQ_AVX2
    if (o.stream) _mm_sfence();  // this thread's streaming stores are visible before the region ends
#endif
  }
  return bad;
}

template <bool Add>
void dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block) {
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
  const size_t B = size_t(block), nb = grad_q8_blocks(n, block);
  const bool simd = quant_simd_enabled(), avx512 = quant_avx512_enabled();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long long b = 0; b < static_cast<long long>(nb); ++b) {
    const size_t j0 = size_t(b) * B, end = std::min(j0 + B, n);
    const float s = scales[b];
    size_t j = j0;
#if AGOQ_AVX512
    if (avx512) j = dequantize_avx512<Add>(codes, s, j, end, out);
#endif
#if AGOQ_AVX2
    if (simd) {
      const __m256 vs = _mm256_set1_ps(s);
      for (; j + 8 <= end; j += 8) {
        if (j % 16 == 0) simd::prefetch_for_write(out + j);
        const __m256 c = load_codes8(codes + j);
        _mm256_storeu_ps(out + j, Add ? _mm256_fmadd_ps(c, vs, _mm256_loadu_ps(out + j)) : _mm256_mul_ps(c, vs));
      }
    }
#endif
    for (; j < end; ++j) out[j] = Add ? grad_q8_decode_add(codes[j], s, out[j]) : grad_q8_decode(codes[j], s);
  }
}

// The sum of nsrc dequantized sources for elements [j0, j0 + m) of one block, rank order, as fp32:
// codes_0 * s_0, then fma(codes_r, s_r, sum) for r = 1 .. nsrc - 1, then / divisor (skipped when 1) -- the same
// operations, rounded the same way, as dequantize then dequantize_add then a division.
inline void block_sum_scalar(const int8_t* const* codes, const float* const* scales, int nsrc, size_t b, size_t j0,
                             size_t m, float divisor, float* y) {
  for (size_t j = 0; j < m; ++j) {
    float v = grad_q8_decode(codes[0][j0 + j], scales[0][b]);
    for (int r = 1; r < nsrc; ++r) v = grad_q8_decode_add(codes[r][j0 + j], scales[r][b], v);
    y[j] = grad_q8_sum_finish(v, divisor);
  }
}

#if AGOQ_AVX2
// block_sum_scalar in AVX2; returns max |y| as bits (as block_avx2 computes it, so >= 0x7F800000 flags NaN/Inf).
inline uint32_t block_sum_avx2(const int8_t* const* codes, const float* const* scales, int nsrc, size_t b, size_t j0,
                               size_t m, float divisor, float* y) {
  constexpr int kMaxSrc = 16;  // scales kept in registers; more sources reload them
  __m256 vs[kMaxSrc];
  for (int r = 0; r < std::min(nsrc, kMaxSrc); ++r) vs[r] = _mm256_set1_ps(scales[r][b]);
  auto scale = [&](int r) { return r < kMaxSrc ? vs[r] : _mm256_set1_ps(scales[r][b]); };
  const __m256 vd = _mm256_set1_ps(divisor);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const bool divide = divisor != 1.f;
  __m256i vmax = _mm256_setzero_si256();
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m256 v = _mm256_mul_ps(load_codes8(codes[0] + j0 + j), scale(0));
    for (int r = 1; r < nsrc; ++r) v = _mm256_fmadd_ps(load_codes8(codes[r] + j0 + j), scale(r), v);
    if (divide) v = _mm256_div_ps(v, vd);
    _mm256_storeu_ps(y + j, v);
    vmax = _mm256_max_epi32(vmax, _mm256_and_si256(_mm256_castps_si256(v), abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vmax);
  uint32_t amax_bits = 0;
  for (uint32_t v : lanes) amax_bits = std::max(amax_bits, v);
  if (j < m) block_sum_scalar(codes, scales, nsrc, b, j0 + j, m - j, divisor, y + j);
  for (; j < m; ++j) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(y[j]) & 0x7FFFFFFFu);
  return amax_bits;
}

// block_avx2<false, false> (nearest) for a block whose max |y| is known. Same codes and scale.
inline size_t block_encode_avx2(const float* y, size_t m, uint32_t amax_bits, int8_t* codes, float* scale,
                                QuantRandomBytes& rb) {
  const BlockParams p = block_params(std::bit_cast<float>(amax_bits));
  if (amax_bits >= 0x7F800000u || p.pre != 1.f) return block_avx2<false, false>(y, m, codes, scale, rb, 0, 0);  // rare
  const __m256 inv = _mm256_set1_ps(p.inv);
  auto code8 = [&](size_t k) { return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(y + k), inv)); };
  size_t j = 0;
  for (; j + 32 <= m; j += 32) simd::pack32_i8(code8(j), code8(j + 8), code8(j + 16), code8(j + 24), codes + j);
  for (; j < m; ++j) codes[j] = quantize_one<false>(y[j], p, 0);
  *scale = p.scale;
  return 0;
}
#endif

}  // namespace

size_t grad_q8_sum_requantize(const int8_t* const* codes, const float* const* scales, int nsrc, size_t n, float divisor,
                              float* out_f32, int8_t* out_codes, float* out_scales, int block) {
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
  AGOQ_CHECK(nsrc >= 1, "grad_q8_sum_requantize: needs at least one source");
  const size_t B = size_t(block), nb = grad_q8_blocks(n, block);
  const bool simd = quant_simd_enabled();
  size_t bad = 0;
#pragma omp parallel reduction(+ : bad) if (n >= kParallelMin)
  {
    QuantRandomBytes rb(QuantSeed{}, simd);    // nearest rounding: never drawn from
    std::vector<float> tile(out_f32 ? 0 : B);  // the block's sum when it is not kept: L1 resident
#pragma omp for schedule(static)
    for (long long b = 0; b < static_cast<long long>(nb); ++b) {
      const size_t j = size_t(b) * B, m = std::min(B, n - j);
      float* y = out_f32 ? out_f32 + j : tile.data();
#if AGOQ_AVX2
      if (simd) {
        const uint32_t amax_bits = block_sum_avx2(codes, scales, nsrc, size_t(b), j, m, divisor, y);
        if (out_codes) bad += block_encode_avx2(y, m, amax_bits, out_codes + j, out_scales + b, rb);
        continue;
      }
#endif
      block_sum_scalar(codes, scales, nsrc, size_t(b), j, m, divisor, y);
      if (out_codes) bad += block_scalar<false, false>(y, m, out_codes + j, out_scales + b, rb, 0);
    }
  }
  return bad;
}

void grad_q8_dequantize_stream(const int8_t* codes, const float* scales, size_t n, float* out, int block) {
#if AGOQ_AVX2
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
  if (!quant_simd_enabled()) return dequantize<false>(codes, scales, n, out, block);
  const size_t B = size_t(block), nb = grad_q8_blocks(n, block);
#pragma omp parallel if (n >= kParallelMin)
  {
#pragma omp for schedule(static)
    for (long long b = 0; b < static_cast<long long>(nb); ++b) {
      const size_t j0 = size_t(b) * B, end = std::min(j0 + B, n);
      const float s = scales[b];
      const __m256 vs = _mm256_set1_ps(s);
      size_t j = j0;
      // Plain stores up to the first 32-byte boundary of out, then streaming stores.
      for (; j < end && (reinterpret_cast<uintptr_t>(out + j) & 31); ++j) out[j] = grad_q8_decode(codes[j], s);
      for (; j + 8 <= end; j += 8) _mm256_stream_ps(out + j, _mm256_mul_ps(load_codes8(codes + j), vs));
      for (; j < end; ++j) out[j] = grad_q8_decode(codes[j], s);
    }
    _mm_sfence();  // this thread's streaming stores are visible before the region ends
  }
#else
  dequantize<false>(codes, scales, n, out, block);
#endif
}

size_t grad_q8_quantize(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o) {
  return o.rounding == QuantRounding::stochastic ? run_blocks<false, true>(x, n, codes, scales, o)
                                                 : run_blocks<false, false>(x, n, codes, scales, o);
}

size_t grad_q8_accumulate(int8_t* codes, float* scales, const float* g, size_t n, const GradQ8Options& o) {
  return o.rounding == QuantRounding::stochastic ? run_blocks<true, true>(g, n, codes, scales, o)
                                                 : run_blocks<true, false>(g, n, codes, scales, o);
}

void grad_q8_dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block) {
  dequantize<false>(codes, scales, n, out, block);
}

void grad_q8_dequantize_add(const int8_t* codes, const float* scales, size_t n, float* out, int block) {
  dequantize<true>(codes, scales, n, out, block);
}

double grad_q8_sum_squares(const int8_t* codes, const float* scales, size_t n, int block) {
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
  const size_t B = size_t(block), nb = grad_q8_blocks(n, block);
  std::vector<double> per_block(nb);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long long b = 0; b < static_cast<long long>(nb); ++b) {
    const size_t j0 = size_t(b) * B, end = std::min(j0 + B, n);
    int64_t acc = 0;  // exact: at most 65536 * 127^2
    for (size_t j = j0; j < end; ++j) acc += int32_t(codes[j]) * int32_t(codes[j]);
    per_block[b] = double(scales[b]) * double(scales[b]) * double(acc);
  }
  double total = 0;
  for (double v : per_block) total += v;
  return total;
}

}  // namespace agoq

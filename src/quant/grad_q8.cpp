#include "quant/grad_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/simd.h"
#include "quant/simd_avx2.h"

namespace agoq {
namespace {

constexpr size_t kParallelMin = size_t(1) << 15;

struct BlockParams {
  float scale, inv, pre;
};

// scale = amax / 127, codes = round(x * 127 / amax). For tiny blocks (amax < 2^-64, e.g. denormals) the values are
// first multiplied by 2^64 (exact) so that 127 / amax cannot overflow.
inline BlockParams block_params(float amax) {
  const float pre = amax < 0x1p-64f ? 0x1p64f : 1.f;
  return {amax / 127.f, amax > 0 ? 127.f / (amax * pre) : 0.f, pre};
}

template <bool Stoch>
inline int8_t quantize_one(float y, const BlockParams& p, float r) {
  float t = Stoch ? std::floor(std::fma(y * p.pre, p.inv, r)) : std::nearbyint(y * p.pre * p.inv);
  t = t < -127.f ? -127.f : (t > 127.f ? 127.f : t);
  return int8_t(t);
}

// One block of n values: quantize x (Acc = false) or codes' own dequantized values + x (Acc = true). The scalar
// reference; the AVX2 kernel below gives the same bits. Returns the number of non-finite values.
template <bool Acc, bool Stoch>
size_t block_scalar(const float* x, size_t n, int8_t* codes, float* scale, const QuantSeed& seed, uint64_t first) {
  const float old = Acc ? *scale : 0.f;
  auto y = [&](size_t j) { return Acc ? std::fma(float(codes[j]), old, x[j]) : x[j]; };
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
  alignas(32) float tmp[kQuantUniformMax + 64];
  for (size_t j0 = 0; j0 < n; j0 += kQuantUniformMax) {
    const size_t m = std::min(kQuantUniformMax, n - j0);
    const float* r = Stoch ? quant_uniforms(seed, first + j0, m, tmp, false) : nullptr;
    for (size_t j = j0; j < j0 + m; ++j) codes[j] = quantize_one<Stoch>(y(j), p, Stoch ? r[j - j0] : 0.f);
  }
  *scale = p.scale;
  return 0;
}

#if AGOQ_QUANT_AVX2
inline __m256 load_codes8(const int8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

template <bool Acc, bool Stoch>
size_t block_avx2(const float* x, size_t n, int8_t* codes, float* scale, const QuantSeed& seed, uint64_t first) {
  const float old = Acc ? *scale : 0.f;
  const __m256 vold = _mm256_set1_ps(old);
  auto y8 = [&](size_t j) {
    const __m256 v = _mm256_loadu_ps(x + j);
    return Acc ? _mm256_fmadd_ps(load_codes8(codes + j), vold, v) : v;
  };
  auto y1 = [&](size_t j) { return Acc ? std::fma(float(codes[j]), old, x[j]) : x[j]; };
  // Two independent accumulators each: a single chain would be bound by the max/fma latency, not by loads.
  __m256 max0 = _mm256_setzero_ps(), max1 = max0, bad0 = max0, bad1 = max0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 v0 = y8(j), v1 = y8(j + 8);
    max0 = _mm256_max_ps(max0, simd::abs8(v0)), bad0 = simd::nonfinite_acc8(bad0, v0);
    max1 = _mm256_max_ps(max1, simd::abs8(v1)), bad1 = simd::nonfinite_acc8(bad1, v1);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 v0 = y8(j);
    max0 = _mm256_max_ps(max0, simd::abs8(v0)), bad0 = simd::nonfinite_acc8(bad0, v0);
  }
  float amax = simd::hmax8(_mm256_max_ps(max0, max1));
  bool bad = simd::any_nan8(_mm256_add_ps(bad0, bad1));
  for (; j < n; ++j) {
    const float v = y1(j);
    bad |= !std::isfinite(v);
    amax = std::max(amax, std::fabs(v));
  }
  if (bad) return block_scalar<Acc, Stoch>(x, n, codes, scale, seed, first);  // rare: count and mark
  const BlockParams p = block_params(amax);
  const __m256 pre = _mm256_set1_ps(p.pre), inv = _mm256_set1_ps(p.inv);
  alignas(32) float tmp[kQuantUniformMax + 64];
  for (size_t j0 = 0; j0 < n; j0 += kQuantUniformMax) {
    const size_t m = std::min(kQuantUniformMax, n - j0);
    const float* r = Stoch ? quant_uniforms(seed, first + j0, m, tmp, true) : nullptr;
    // Codes before clamping; pack32_i8 clamps to [-127, 127] exactly like quantize_one.
    auto code8 = [&](size_t k) {
      const __m256 v = _mm256_mul_ps(y8(k), pre);
      return _mm256_cvttps_epi32(Stoch ? _mm256_floor_ps(_mm256_fmadd_ps(v, inv, _mm256_loadu_ps(r + (k - j0))))
                                       : _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    };
    for (j = j0; j + 32 <= j0 + m; j += 32) {
      // All four are computed before the store: with Acc they read the codes being overwritten.
      const __m256i a = code8(j), b = code8(j + 8), c = code8(j + 16), d = code8(j + 24);
      simd::pack32_i8(a, b, c, d, codes + j);
    }
    for (; j < j0 + m; ++j) codes[j] = quantize_one<Stoch>(y1(j), p, Stoch ? r[j - j0] : 0.f);
  }
  *scale = p.scale;
  return 0;
}
#endif

template <bool Acc, bool Stoch>
size_t run_blocks(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o) {
  AGOQ_CHECK(o.block >= 1 && o.block <= 65536, "grad_q8: block must be in [1, 65536], got ", o.block);
  const size_t B = size_t(o.block), nb = grad_q8_blocks(n, o.block);
  const bool simd = quant_simd_enabled();
  size_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n >= kParallelMin)
  for (long long b = 0; b < static_cast<long long>(nb); ++b) {
    const size_t j = size_t(b) * B, m = std::min(B, n - j);
#if AGOQ_QUANT_AVX2
    if (simd) {
      bad += block_avx2<Acc, Stoch>(x + j, m, codes + j, scales + b, o.seed, o.index_base + j);
      continue;
    }
#endif
    bad += block_scalar<Acc, Stoch>(x + j, m, codes + j, scales + b, o.seed, o.index_base + j);
  }
  return bad;
}

template <bool Add>
void dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block) {
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
  const size_t B = size_t(block), nb = grad_q8_blocks(n, block);
  const bool simd = quant_simd_enabled();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long long b = 0; b < static_cast<long long>(nb); ++b) {
    const size_t j0 = size_t(b) * B, end = std::min(j0 + B, n);
    const float s = scales[b];
    size_t j = j0;
#if AGOQ_QUANT_AVX2
    if (simd) {
      const __m256 vs = _mm256_set1_ps(s);
      for (; j + 8 <= end; j += 8) {
        const __m256 c = load_codes8(codes + j);
        _mm256_storeu_ps(out + j, Add ? _mm256_fmadd_ps(c, vs, _mm256_loadu_ps(out + j)) : _mm256_mul_ps(c, vs));
      }
    }
#endif
    for (; j < end; ++j) out[j] = Add ? std::fma(float(codes[j]), s, out[j]) : float(codes[j]) * s;
  }
}

}  // namespace

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

}  // namespace agoq

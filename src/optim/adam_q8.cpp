#include "optim/adam_q8.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/simd.h"
#include "quant/quant_avx2.h"

namespace agoq {

namespace {

constexpr float kQm = 127.f, kQv = 255.f;

void update_scalar(const AdamQ8Format& f, const AdamStepCoeffs& k, float decay, float m_scale, float v_scale,
                   const int8_t* mc, const uint8_t* vc, const float* g, float* p, size_t j0, size_t j1, AdamQ8Tile& t) {
  const float dm = q8_step(m_scale, kQm), dv = q8_step(v_scale, kQv);
  for (size_t j = j0; j < j1; ++j) {
    const float m = q8_power(float(mc[j]) * dm, f.m_root), v = q8_power(float(vc[j]) * dv, f.v_root);
    const float m1 = adam_m_next(m, g[j], k), sv = std::sqrt(adam_v_next(v, g[j], k));
    p[j] = adam_param_next(p[j], decay, m1, sv, k);
    t.m[j] = q8_m_root(m1, f.m_root), t.v[j] = q8_v_root_of_sqrt(sv, f.v_root);
    t.m_max = std::max(t.m_max, std::fabs(t.m[j])), t.v_max = std::max(t.v_max, std::fabs(t.v[j]));
  }
}

void encode_scalar(const AdamQ8Tile& t, size_t n, int8_t* mc, uint8_t* vc, const uint8_t* random) {
  const float im = q8_inverse_step(t.m_max, kQm), iv = q8_inverse_step(t.v_max, kQv);
  for (size_t j = 0; j < n; ++j) {
    if (random) {
      mc[j] = int8_t(std::clamp(q8_code_stochastic(t.m[j], im, random[j]), -127, 127));
      vc[j] = uint8_t(std::clamp(q8_code_stochastic(t.v[j], iv, random[256 + j]), 0, 255));
    } else {
      mc[j] = q8_code_m(t.m[j], im), vc[j] = q8_code_v(t.v[j], iv);
    }
  }
}

#if AGOQ_AVX2
using simd::abs8;
using simd::hmax8;

// update_scalar, 8 values at a time (the same operations; MR, VR: the roots of m and v).
template <int MR, int VR>
void update_avx2(const AdamStepCoeffs& k, float decay, float m_scale, float v_scale, const int8_t* mc,
                 const uint8_t* vc, const float* g, float* p, size_t j0, size_t j1, AdamQ8Tile& t) {
  const __m256 dm = _mm256_set1_ps(q8_step(m_scale, kQm)), dv = _mm256_set1_ps(q8_step(v_scale, kQv));
  const __m256 b1 = _mm256_set1_ps(k.b1), c1 = _mm256_set1_ps(k.one_minus_b1), b2 = _mm256_set1_ps(k.b2),
               c2 = _mm256_set1_ps(k.one_minus_b2), nstep = _mm256_set1_ps(-k.step_size),
               isb = _mm256_set1_ps(k.inv_sqrt_bc2), eps = _mm256_set1_ps(k.eps), dec = _mm256_set1_ps(decay),
               sign = _mm256_set1_ps(-0.f);
  __m256 mmax = _mm256_setzero_ps(), vmax = _mm256_setzero_ps();
  size_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    const __m128i cm = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mc + j));
    const __m128i cv = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(vc + j));
    const __m256 rm = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(cm)), dm);
    const __m256 rv = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(cv)), dv);
    const __m256 m = MR == 1 ? rm : _mm256_mul_ps(rm, abs8(rm));
    __m256 v = rv;
    if constexpr (VR >= 2) v = _mm256_mul_ps(rv, rv);
    if constexpr (VR == 4) v = _mm256_mul_ps(v, v);
    const __m256 gj = _mm256_loadu_ps(g + j);
    const __m256 m1 = _mm256_fmadd_ps(b1, m, _mm256_mul_ps(c1, gj));
    const __m256 sv = _mm256_sqrt_ps(_mm256_fmadd_ps(b2, v, _mm256_mul_ps(c2, _mm256_mul_ps(gj, gj))));
    const __m256 den = _mm256_fmadd_ps(sv, isb, eps);
    _mm256_storeu_ps(p + j, _mm256_fmadd_ps(nstep, _mm256_div_ps(m1, den), _mm256_mul_ps(_mm256_loadu_ps(p + j), dec)));
    __m256 root_m = m1, root_v = sv;
    if constexpr (MR == 2) root_m = _mm256_or_ps(_mm256_and_ps(sign, m1), _mm256_sqrt_ps(abs8(m1)));
    if constexpr (VR == 4) root_v = _mm256_sqrt_ps(sv);
    if constexpr (VR == 1) root_v = _mm256_mul_ps(sv, sv);
    _mm256_storeu_ps(t.m + j, root_m);
    _mm256_storeu_ps(t.v + j, root_v);
    mmax = _mm256_max_ps(mmax, abs8(root_m)), vmax = _mm256_max_ps(vmax, abs8(root_v));
  }
  t.m_max = std::max(t.m_max, hmax8(mmax)), t.v_max = std::max(t.v_max, hmax8(vmax));
  if (j < j1) update_scalar({.m_root = MR, .v_root = VR}, k, decay, m_scale, v_scale, mc, vc, g, p, j, j1, t);
}

// encode_scalar (nearest) 32 values at a time: cvtps rounds to nearest even like nearbyint, the packs clamp.
void encode_avx2(const AdamQ8Tile& t, size_t n, int8_t* mc, uint8_t* vc) {
  const float im = q8_inverse_step(t.m_max, kQm), iv = q8_inverse_step(t.v_max, kQv);
  const __m256 vim = _mm256_set1_ps(im), viv = _mm256_set1_ps(iv);
  auto code = [](const float* x, __m256 inv) { return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv)); };
  size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    simd::pack32_i8(code(t.m + j, vim), code(t.m + j + 8, vim), code(t.m + j + 16, vim), code(t.m + j + 24, vim),
                    mc + j);
    simd::pack32<8>(code(t.v + j, viv), code(t.v + j + 8, viv), code(t.v + j + 16, viv), code(t.v + j + 24, viv),
                    vc + j);
  }
  for (; j < n; ++j) mc[j] = q8_code_m(t.m[j], im), vc[j] = q8_code_v(t.v[j], iv);
}
#endif

}  // namespace

void adam_q8_format_check(const AdamQ8Format& f) {
  AGOQ_CHECK(f.block == 32 || f.block == 64 || f.block == 128 || f.block == 256,
             "8-bit optimizer state: block must be 32, 64, 128 or 256 (got ", f.block, ")");
  AGOQ_CHECK(f.m_root == 1 || f.m_root == 2, "8-bit optimizer state: m root must be 1 or 2 (got ", f.m_root, ")");
  AGOQ_CHECK(f.v_root == 1 || f.v_root == 2 || f.v_root == 4, "8-bit optimizer state: v root must be 1, 2 or 4 (got ",
             f.v_root, ")");
}

size_t adam_q8_blocks(size_t n, int block) { return (n + size_t(block) - 1) / size_t(block); }
size_t adam_q8_bytes(size_t n, int block) { return 2 * n + 2 * sizeof(float) * adam_q8_blocks(n, block); }

void adam_q8_update(const AdamQ8Format& f, const AdamStepCoeffs& k, float decay, float m_scale, float v_scale,
                    const int8_t* mc, const uint8_t* vc, const float* g, float* p, size_t j0, size_t j1,
                    AdamQ8Tile& tile, bool scalar) {
#if AGOQ_AVX2
  if (!scalar) {
    auto run = [&](auto mr, auto vr) {
      update_avx2<decltype(mr)::value, decltype(vr)::value>(k, decay, m_scale, v_scale, mc, vc, g, p, j0, j1, tile);
    };
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I4 = std::integral_constant<int, 4>;
    if (f.m_root == 1) {
      if (f.v_root == 2) return run(I1{}, I2{});
      if (f.v_root == 4) return run(I1{}, I4{});
      return run(I1{}, I1{});
    }
    if (f.v_root == 2) return run(I2{}, I2{});
    if (f.v_root == 4) return run(I2{}, I4{});
    return run(I2{}, I1{});
  }
#endif
  update_scalar(f, k, decay, m_scale, v_scale, mc, vc, g, p, j0, j1, tile);
}

void adam_q8_encode(const AdamQ8Format& f, const AdamQ8Tile& tile, size_t n, int8_t* mc, uint8_t* vc, float* m_scale,
                    float* v_scale, const uint8_t* random, bool scalar) {
#if AGOQ_AVX2
  if (!scalar && !random) encode_avx2(tile, n, mc, vc);
  else encode_scalar(tile, n, mc, vc, random);
#else
  encode_scalar(tile, n, mc, vc, random);
#endif
  *m_scale = tile.m_max, *v_scale = tile.v_max;
}

AdamQ8State::AdamQ8State(size_t n, const AdamQ8Format& f, uint64_t index_base)
    : fmt_(f),
      index_base_(index_base),
      m_(n, MemCategory::optimizer, "adam.q8"),
      v_(n, MemCategory::optimizer, "adam.q8"),
      m_scale_(adam_q8_blocks(n, f.block), MemCategory::optimizer, "adam.q8"),
      v_scale_(adam_q8_blocks(n, f.block), MemCategory::optimizer, "adam.q8") {
  adam_q8_format_check(f);
}

void AdamQ8State::step(float* params, const float* grads, const AdamStepCoeffs& k, float decay_factor,
                       const std::vector<AdamDecayRun>& runs, long step, size_t from, size_t to) {
  const size_t n = size(), B = size_t(fmt_.block);
  AGOQ_CHECK(from <= to && to <= n && from % B == 0 && (to == n || to % B == 0), "8-bit AdamW: values [", from, ", ",
             to, ") of ", n, " do not lie on blocks of ", B, " (internal)");
  const size_t first = from / B, nb = adam_q8_blocks(to, fmt_.block) - first;
  const bool scalar = !quant_simd_enabled(), stochastic = fmt_.rounding == QuantRounding::stochastic;
  int8_t* mc = m_.data();
  uint8_t* vc = v_.data();
#pragma omp parallel if (nb >= 128)
  {
    const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
    const size_t b0 = first + nb * t / nt, b1 = first + nb * (t + 1) / nt;
    // This thread's first run: the one holding its first value.
    size_t r = size_t(std::upper_bound(runs.begin(), runs.end(), b0 * B,
                                       [](size_t at, const AdamDecayRun& x) { return at < x.end; }) -
                      runs.begin());
    AdamQ8Tile tile;
    uint8_t random[512];
    for (size_t b = b0; b < b1; ++b) {
      const size_t s = b * B, e = std::min(n, s + B);
      tile.m_max = tile.v_max = 0;
      for (size_t j = s; j < e;) {
        while (runs[r].end <= j) ++r;
        const size_t stop = std::min(e, runs[r].end);
        adam_q8_update(fmt_, k, runs[r].decay ? decay_factor : 1.f, m_scale_[b], v_scale_[b], mc + s, vc + s, grads + s,
                       params + s, j - s, stop - s, tile, scalar);
        j = stop;
      }
      if (stochastic) {  // m's bytes, then v's (another tensor id), by global index: any thread split alike
        const QuantSeed sm{fmt_.seed, 2 * uint64_t(step)}, sv{fmt_.seed, 2 * uint64_t(step) + 1};
        for (size_t j = 0; j < e - s; ++j) {
          random[j] = quant_random_byte_at(sm, index_base_ + s + j);
          random[256 + j] = quant_random_byte_at(sv, index_base_ + s + j);
        }
      }
      adam_q8_encode(fmt_, tile, e - s, mc + s, vc + s, &m_scale_[b], &v_scale_[b], stochastic ? random : nullptr,
                     scalar);
    }
  }
}

void AdamQ8State::load_fp32(const float* m, const float* v) {
  const size_t n = size(), B = size_t(fmt_.block);
#pragma omp parallel for schedule(static) if (blocks() >= 128)
  for (size_t b = 0; b < blocks(); ++b) {
    const size_t s = b * B, e = std::min(n, s + B);
    AdamQ8Tile tile;
    for (size_t j = s; j < e; ++j) {
      tile.m[j - s] = q8_m_root(m[j], fmt_.m_root);
      tile.v[j - s] = q8_v_root_of_sqrt(std::sqrt(std::max(v[j], 0.f)), fmt_.v_root);
      tile.m_max = std::max(tile.m_max, std::fabs(tile.m[j - s])), tile.v_max = std::max(tile.v_max, tile.v[j - s]);
    }
    adam_q8_encode(fmt_, tile, e - s, m_.data() + s, v_.data() + s, &m_scale_[b], &v_scale_[b]);
  }
}

void AdamQ8State::store_fp32(float* m, float* v) const {
  adam_q8_decode(fmt_, m_.data(), v_.data(), m_scale_.data(), v_scale_.data(), size(), m, v);
}

void adam_q8_decode(const AdamQ8Format& f, const int8_t* mc, const uint8_t* vc, const float* m_scales,
                    const float* v_scales, size_t n, float* m, float* v) {
  const size_t B = size_t(f.block), nb = adam_q8_blocks(n, f.block);
#pragma omp parallel for schedule(static) if (nb >= 128)
  for (size_t b = 0; b < nb; ++b) {
    const float dm = q8_step(m_scales[b], kQm), dv = q8_step(v_scales[b], kQv);
    for (size_t j = b * B; j < std::min(n, b * B + B); ++j)
      m[j] = q8_power(float(mc[j]) * dm, f.m_root), v[j] = q8_power(float(vc[j]) * dv, f.v_root);
  }
}

}  // namespace agoq

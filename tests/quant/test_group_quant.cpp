// Activation (group) format: round-trip error bounds, stochastic rounding statistics and reproducibility, special
// values, fused row API, and SIMD == scalar.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "quant/group_quant.h"
#include "quant/half.h"
#include "quant/simd.h"
#include "quant/stats.h"
#include "quant/tensor.h"
#include "tests/common/bits_equal.h"
#include "tests/common/quant_kernels.h"

namespace agoq {
namespace {

std::vector<float> random_rows(size_t rows, size_t cols, uint64_t seed, bool shifted) {
  Rng rng(seed);
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const float sigma = std::ldexp(1.f, int(rng.below(24)) - 12), shift = shifted ? 3.f * sigma : 0.f;
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] = shift + sigma * rng.normal();
  }
  return x;
}

std::vector<QuantFormat> all_int_formats() {
  std::vector<QuantFormat> v;
  for (int bits : {2, 3, 4, 8})
    for (int g : {32, 64, 128, 256})
      for (bool sym : {true, false})
        for (auto r : {QuantRounding::nearest, QuantRounding::stochastic})
          v.push_back(quant_format_int(bits, g, sym, r));
  return v;
}

// Checks every element of every group against the bound. With R the group's range (symmetric: 2 max|x|,
// asymmetric: max - min) and Δ = R / (2^b - 1):
//  - the stored fp16 scale s is Δ rounded up: Δ (1 - 2^-22) <= s <= Δ (1 + 2^-10) + 2^-24 (2^-10: one fp16 ulp
//    relative; 2^-24: the fp16 subnormal spacing; 2^-22: Δ itself is computed in fp32);
//  - |x - decode| <= s/2 (nearest) or <= (511/512) s < s (stochastic with 8-bit uniforms: the result is
//    floor(T/256) or one more, T = round(256 t), so it is within 255/256 of T/256 and T/256 within 1/512 of t),
//    plus a slack of 2^-20 (|x| + (2^b - 1) s) for the fp32 rounding of (x - offset) * (1/s) and of the decoding
//    fma (a few ulps of values of that size).
void expect_round_trip_bound(const QuantFormat& f, const std::vector<float>& x, size_t rows, size_t cols) {
  QuantizedTensor t(f, rows, cols, MemCategory::workspace);
  ASSERT_TRUE(quant_encode(t, x.data(), {99, 5}).ok());
  std::vector<float> y(x.size());
  quant_decode(t, y.data());
  const double qmax = (1 << f.bits) - 1;
  const bool sr = f.rounding == QuantRounding::stochastic;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c0 = 0, g = 0; c0 < cols; c0 += f.group, ++g) {
      const size_t c1 = std::min(cols, c0 + f.group);
      double lo = INFINITY, hi = -INFINITY, amax = 0;
      for (size_t c = c0; c < c1; ++c) {
        const double v = x[r * cols + c];
        lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
      }
      const double delta = (f.symmetric ? 2 * amax : hi - lo) / qmax;
      const double s = f16_to_f32(t.row(r).scales[g]);
      ASSERT_GE(s, delta * (1 - 0x1p-22)) << quant_format_name(f);
      ASSERT_LE(s, delta * (1 + 0x1p-10) + 0x1p-24) << quant_format_name(f);
      for (size_t c = c0; c < c1; ++c) {
        const double v = x[r * cols + c], err = std::fabs(v - y[r * cols + c]);
        const double slack = 0x1p-20 * (std::fabs(v) + qmax * s);
        if (sr) ASSERT_LE(err, s * 511 / 512 + slack) << quant_format_name(f) << " r" << r << " c" << c;
        else ASSERT_LE(err, s / 2 + slack) << quant_format_name(f) << " r" << r << " c" << c << " v " << v;
      }
    }
}

}  // namespace

TEST(QuantGroup, RoundTripErrorWithinHalfStepEveryFormat) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (const QuantFormat& f : all_int_formats())
      for (size_t cols : {size_t(1), size_t(7), size_t(f.group - 1), size_t(f.group), size_t(f.group + 5),
                          size_t(3 * f.group + 17)}) {
        SCOPED_TRACE(testing::Message() << quant_format_name(f) << " cols " << cols << " simd " << simd);
        expect_round_trip_bound(f, random_rows(3, cols, cols * 31 + f.bits, !f.symmetric), 3, cols);
      }
  }
  quant_use_default_kernels();
}

// The bound test must be able to fail: a coarser format's error exceeds a finer format's bound.
TEST(QuantGroup, RoundTripBoundIsTight) {
  const auto x = random_rows(4, 256, 3, false);
  QuantizedTensor t(quant_format_int(4), 4, 256, MemCategory::workspace);
  quant_encode(t, x.data(), {});
  std::vector<float> y(x.size());
  quant_decode(t, y.data());
  double worst = 0;  // largest error in units of the group's step: close to 1/2 for nearest rounding
  for (size_t r = 0; r < 4; ++r)
    for (size_t g = 0; g < 2; ++g) {
      const float s = f16_to_f32(t.row(r).scales[g]);
      for (size_t c = g * 128; c < g * 128 + 128; ++c)
        worst = std::max(worst, double(std::fabs(x[r * 256 + c] - y[r * 256 + c]) / s));
    }
  EXPECT_GT(worst, 0.45);
  EXPECT_LE(worst, 0.5 + 1e-5);
}

// Stochastic rounding is unbiased up to the 8-bit uniforms: for each element the mean over N seeds of the decoded
// value converges to x + bias, |bias| <= s/512 (the rounding of t = (x - o)/s is decided on T = round(256 t), so
// E[code] = T/256, within 1/512 of t; test_format.cpp checks that exhaustively). One rounding has variance
// p (1 - p) s^2 <= s^2 / 4, so the mean of N has standard deviation sd <= s / (2 sqrt N) = s/110 here; we allow
// 6 sd + s/512 + 2^-14 s (the last for the fp32 rounding of 1/s, of -lo/s and of t: 3 qmax 2^-24 steps). Nearest
// rounding, run through the same check, misses it by up to s/2 (~55 sd): the test can fail.
struct SrStats {
  size_t over_bound = 0;  // elements whose |mean - x| exceeds the bound
  double mean_z = 0;      // mean over elements of |mean - x| / sd
};
SrStats stochastic_mean_stats(const QuantFormat& f, const std::vector<float>& x, int N) {
  const size_t cols = x.size();
  std::vector<double> sum(cols, 0);
  std::vector<float> y(cols);
  QuantizedTensor t(f, 1, cols, MemCategory::workspace);
  for (int k = 0; k < N; ++k) {
    EXPECT_TRUE(quant_encode(t, x.data(), {uint64_t(1000 + k), 3}).ok());
    quant_decode(t, y.data());
    for (size_t c = 0; c < cols; ++c) sum[c] += y[c];
  }
  SrStats st;
  for (size_t c = 0; c < cols; ++c) {
    const double s = f16_to_f32(t.view().scales[c / f.group]), sd = s / (2 * std::sqrt(double(N)));
    const double dev = std::fabs(sum[c] / N - x[c]);
    st.over_bound += dev > 6 * sd + s / 512 + 0x1p-14 * s;
    st.mean_z += dev / sd / double(cols);
  }
  return st;
}

TEST(QuantGroup, StochasticRoundingIsUnbiased) {
  constexpr int N = 3000;
  const auto x = random_rows(1, 200, 11, false);
  for (const QuantFormat f : {quant_format_int(2, 128, true, QuantRounding::stochastic),
                              quant_format_int(4, 64, false, QuantRounding::stochastic),
                              quant_format_int(3, 32, true, QuantRounding::stochastic),
                              quant_format_int(8, 128, false, QuantRounding::stochastic)}) {
    SCOPED_TRACE(quant_format_name(f));
    const SrStats st = stochastic_mean_stats(f, x, N);
    EXPECT_EQ(st.over_bound, 0u);
    // Mean |z|: <= 0.8 for a Gaussian with sd at its bound (less: p (1 - p) < 1/4 on average), plus the bias
    // (<= 0.22 sd), plus a margin for averaging over only 200 elements.
    EXPECT_LT(st.mean_z, 1.1);
  }
  // The negative control: nearest rounding (the same codes at every seed) fails the same check.
  // Its errors are spread over [0, s/2], about 55 sd, so ~90% of the elements exceed 6 sd + s/512.
  const SrStats rn = stochastic_mean_stats(quant_format_int(4, 64, false, QuantRounding::nearest), x, N);
  EXPECT_GT(rn.over_bound, 150u);
  EXPECT_GT(rn.mean_z, 10.0);
}

TEST(QuantGroup, StochasticIsReproducibleAcrossThreadsAndFusedRows) {
  const size_t rows = 300, cols = 999;  // rows start at unaligned element indices
  const auto x = random_rows(rows, cols, 5, false);
  for (const QuantFormat f : {quant_format_int(4, 128, true, QuantRounding::stochastic),
                              quant_format_int(3, 64, false, QuantRounding::stochastic), quant_format_int(8)}) {
    SCOPED_TRACE(quant_format_name(f));
    const int saved = omp_get_max_threads();
    QuantizedTensor a(f, rows, cols, MemCategory::workspace), b(f, rows, cols, MemCategory::workspace);
    QuantizedTensor c(f, rows, cols, MemCategory::workspace), d(f, rows, cols, MemCategory::workspace);
    omp_set_num_threads(1);
    quant_encode(a, x.data(), {77, 9});
    omp_set_num_threads(2);
    quant_encode(b, x.data(), {77, 9});
    omp_set_num_threads(saved);
    EXPECT_TRUE(bits_equal(a.view().codes, b.view().codes, a.bytes()));
    // A producer writing row by row, in any order, with the same (seed, tensor id).
    for (size_t r = rows; r-- > 0;) quant_encode_row(f, x.data() + r * cols, cols, c.row(r), {77, 9}, r);
    EXPECT_TRUE(bits_equal(a.view().codes, c.view().codes, a.bytes()));
    // Row ranges: the same bytes as the whole tensor.
    quant_encode_rows(f, x.data(), 0, 100, cols, d.view(), {77, 9});
    quant_encode_rows(f, x.data() + 100 * cols, 100, rows - 100, cols, d.view(), {77, 9});
    EXPECT_TRUE(bits_equal(a.view().codes, d.view().codes, a.bytes()));
    // Decoding a tile of rows gives the whole-tensor decode's rows.
    std::vector<float> all(rows * cols), tile(7 * cols);
    quant_decode(a, all.data());
    quant_decode_rows(a, 50, 7, tile.data());
    EXPECT_TRUE(bits_equal(all.data() + 50 * cols, tile.data(), tile.size() * 4));
    if (f.rounding == QuantRounding::stochastic) {  // another seed or tensor id gives other codes
      quant_encode(b, x.data(), {78, 9});
      EXPECT_NE(0, std::memcmp(a.view().codes, b.view().codes, quant_layout(f, rows, cols).scales_offset));
      quant_encode(b, x.data(), {77, 10});
      EXPECT_NE(0, std::memcmp(a.view().codes, b.view().codes, quant_layout(f, rows, cols).scales_offset));
    }
  }
}

TEST(QuantGroup, SimdMatchesScalarBitForBit) {
  const size_t rows = 3, cols = 17 * 256 + 45;  // more than two batches of 8 groups at every G
  auto x = random_rows(rows, cols, 21, false);
  x[5] = 0x1p-140f, x[cols + 3] = -0.f;                       // a denormal and a negative zero
  for (size_t c = 0; c < 300; ++c) x[2 * cols + c] = 0.25f;   // constant groups
  for (size_t c = 600; c < 1100; ++c) x[cols + c] += 1000.f;  // far from zero: the asymmetric x - lo encoder
  std::vector<QuantFormat> formats = all_int_formats();
  formats.push_back(quant_format_bf16());
  formats.push_back(quant_format_fp32());
  for (QuantKernels k : quant_simd_kernels_here())
    for (const QuantFormat& f : formats) {
      SCOPED_TRACE(testing::Message() << quant_format_name(f) << " " << k);
      QuantizedTensor a(f, rows, cols, MemCategory::workspace), b(f, rows, cols, MemCategory::workspace);
      quant_use_kernels(k);
      ASSERT_TRUE(quant_encode(a, x.data(), {5, 6}).ok());
      std::vector<float> ya(x.size()), yb(x.size());
      quant_decode(a, ya.data());
      quant_use_kernels(QuantKernels::scalar);
      ASSERT_TRUE(quant_encode(b, x.data(), {5, 6}).ok());
      quant_decode(a, yb.data());
      quant_use_default_kernels();
      EXPECT_TRUE(bits_equal(a.view().codes, b.view().codes, a.bytes()));
      EXPECT_TRUE(bits_equal(ya.data(), yb.data(), ya.size() * 4));
    }
}

TEST(QuantGroup, ZerosConstantsAndDenormals) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (const QuantFormat& f : all_int_formats()) {
      SCOPED_TRACE(testing::Message() << quant_format_name(f) << " simd " << simd);
      const size_t cols = 2 * f.group + 3;
      std::vector<float> y(cols);
      QuantizedTensor t(f, 1, cols, MemCategory::workspace);
      std::vector<float> zeros(cols, 0.f);
      ASSERT_TRUE(quant_encode(t, zeros.data(), {1, 1}).ok());
      quant_decode(t, y.data());
      for (float v : y) ASSERT_EQ(v, 0.f);
      if (!f.symmetric)  // asymmetric: a constant group is exact (scale 0, the value is the stored fp32 min)
        for (float cst : {0.1f, -3.7e10f, 1e-41f, 65504.f * 300}) {
          std::vector<float> x(cols, cst);
          ASSERT_TRUE(quant_encode(t, x.data(), {1, 1}).ok());
          quant_decode(t, y.data());
          for (float v : y) ASSERT_EQ(v, cst);
        }
      // Values far from zero relative to their range (the asymmetric encoder subtracts the min first).
      std::vector<float> far(cols);
      for (size_t c = 0; c < cols; ++c) far[c] = 1000.f + 0.01f * float(int(c * 37 % 101) - 50);
      expect_round_trip_bound(f, far, 1, cols);
      // Denormals (alone and mixed with normal values) stay within the round-trip bound.
      std::vector<float> den(cols);
      for (size_t c = 0; c < cols; ++c) den[c] = float(int(c % 7) - 3) * 0x1p-140f;
      expect_round_trip_bound(f, den, 1, cols);
      den[f.group + 1] = 1.f;
      expect_round_trip_bound(f, den, 1, cols);
    }
  }
  quant_use_default_kernels();
}

TEST(QuantGroup, NonFiniteAndOverflowAreReportedAndDecodeToNaN) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (const QuantFormat f : {quant_format_int(4), quant_format_int(3, 32, false, QuantRounding::stochastic),
                                quant_format_bf16(), quant_format_fp32()}) {
      SCOPED_TRACE(testing::Message() << quant_format_name(f) << " simd " << simd);
      const size_t cols = 300;
      auto x = random_rows(2, cols, 8, false);
      x[cols + 130] = NAN, x[cols + 131] = INFINITY, x[cols + 7] = -INFINITY;
      QuantizedTensor t(f, 2, cols, MemCategory::workspace);
      const QuantStatus st = quant_encode(t, x.data(), {});
      EXPECT_EQ(st.nonfinite, 3u);
      EXPECT_EQ(st.overflow_groups, 0u);
      EXPECT_FALSE(st.ok());
      std::vector<float> y(x.size());
      quant_decode(t, y.data());
      for (size_t i = 0; i < cols; ++i) ASSERT_TRUE(std::isfinite(y[i]));  // row 0 is untouched
      if (f.kind == QuantKind::int_group) {
        // The groups that held them decode to NaN; the others are fine.
        for (size_t c = 0; c < cols; ++c) {
          const size_t G = size_t(f.group), g = c / G;
          const bool bad_group = g == 7 / G || g == 130 / G || g == 131 / G;
          ASSERT_EQ(std::isnan(y[cols + c]), bad_group) << c;
        }
        // A finite group whose step does not fit fp16 is an overflow, not silently clamped.
        std::vector<float> big(cols, 1.f);
        big[5] = 1e7f;
        QuantizedTensor t1(f, 1, cols, MemCategory::workspace);
        const QuantStatus so = quant_encode(t1, big.data(), {});
        EXPECT_EQ(so.nonfinite, 0u);
        EXPECT_EQ(so.overflow_groups, 1u);
        quant_decode(t1, y.data());
        EXPECT_TRUE(std::isnan(y[0]));
        EXPECT_NEAR(y[cols - 1], 1.f, 1e-3) << "the other groups are fine";
      } else {
        EXPECT_TRUE(std::isnan(y[cols + 130]));
        EXPECT_EQ(y[cols + 131], INFINITY);
        EXPECT_EQ(y[cols + 7], -INFINITY);
      }
    }
  }
  quant_use_default_kernels();
}

// The asymmetric AVX2 pass 1 takes min and max from integer maxima of the bit patterns when a group has both signs
// and falls back to float min/max otherwise: groups of either sign, of both, with -0, and with NaNs of either sign
// (which must mark exactly their group bad) encode as the scalar kernel does.
TEST(QuantGroup, AsymmetricGroupsOfAnySignMatchScalar) {
  const size_t cols = 32 * 12;
  auto x = random_rows(1, cols, 17, false);
  for (size_t c = 0; c < 32; ++c) x[c] = std::fabs(x[c]) + 0.5f;                      // group 0: positive
  for (size_t c = 32; c < 64; ++c) x[c] = -std::fabs(x[c]) - 0.5f;                    // group 1: negative
  for (size_t c = 64; c < 96; ++c) x[c] = c % 2 ? -0.f : std::fabs(x[c]);             // group 2: >= 0 with -0
  for (size_t c = 96; c < 128; ++c) x[c] = c % 2 ? -0.f : -std::fabs(x[c]);           // group 3: <= 0
  x[130] = -NAN, x[170] = NAN;                                                        // groups 4, 5: mixed with NaN
  x[5 + 192] = std::fabs(x[5 + 192]), x[7 + 192] = -NAN;                              // group 6 ...
  for (size_t c = 192; c < 224; ++c) x[c] = c == 199 ? x[c] : std::fabs(x[c]) + 1.f;  // ... positive and -NaN
  for (size_t c = 224; c < 256; ++c) x[c] = c == 230 ? NAN : -std::fabs(x[c]) - 1.f;  // group 7: negative and NaN
  x[300] = -INFINITY;                                                                 // group 9: mixed with -Inf
  for (QuantKernels k : quant_simd_kernels_here())
    for (auto r : {QuantRounding::nearest, QuantRounding::stochastic}) {
      const QuantFormat f = quant_format_int(4, 32, false, r);
      SCOPED_TRACE(testing::Message() << quant_format_name(f) << " " << k);
      QuantizedTensor a(f, 1, cols, MemCategory::workspace), b(f, 1, cols, MemCategory::workspace);
      quant_use_kernels(k);
      const QuantStatus sa = quant_encode(a, x.data(), {3, 4});
      quant_use_kernels(QuantKernels::scalar);
      const QuantStatus sb = quant_encode(b, x.data(), {3, 4});
      quant_use_default_kernels();
      EXPECT_EQ(sa.nonfinite, 5u);
      EXPECT_EQ(sb.nonfinite, 5u);
      EXPECT_TRUE(bits_equal(a.view().codes, b.view().codes, a.bytes()));
      std::vector<float> y(cols);
      quant_decode(a, y.data());
      for (size_t c = 0; c < cols; ++c) {
        const size_t g = c / 32;
        ASSERT_EQ(std::isnan(y[c]), g == 4 || g == 5 || g == 6 || g == 7 || g == 9) << c;
      }
    }
}

TEST(QuantGroup, LengthZeroAndOne) {
  for (const QuantFormat& f : all_int_formats()) {
    QuantizedTensor empty(f, 0, 0, MemCategory::workspace);
    EXPECT_EQ(empty.bytes(), 0u);
    EXPECT_TRUE(quant_encode(empty, nullptr, {}).ok());
    QuantizedTensor zero_cols(f, 4, 0, MemCategory::workspace);
    EXPECT_TRUE(quant_encode(zero_cols, nullptr, {}).ok());
    quant_decode(zero_cols, nullptr);
    const float one[3] = {-2.5f, 0.75f, 1e-3f};
    QuantizedTensor t(f, 3, 1, MemCategory::workspace);
    ASSERT_TRUE(quant_encode(t, one, {}).ok());
    float y[3];
    quant_decode(t, y);
    // A single value is its group's extreme: the symmetric top level (2^b - 1)/2 * s, s >= 2|x|/(2^b - 1), and the
    // asymmetric min are within an fp16 rounding of it (relative 2^-10, or 2^-24 per level when s is subnormal).
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(y[i], one[i], std::fabs(one[i]) * 0x1p-10 + 128 * 0x1p-24) << quant_format_name(f);
  }
  float y = 1;
  QuantizedTensor bf(quant_format_bf16(), 1, 1, MemCategory::workspace);
  const float v = 1.00390625f;  // 1 + 2^-8: a tie, to even (1.0)
  quant_encode(bf, &v, {});
  quant_decode(bf, &y);
  EXPECT_EQ(y, 1.f);
}

// The sensitivity C of plan/bit_alloc.h: sum over groups of R^2 x group size.
TEST(QuantStats, RangeEnergy) {
  const float x[] = {-1, 3, 0.5f, 0.5f};
  EXPECT_DOUBLE_EQ(quant_range_energy(x, 1, 4, 2, true), 36.0 * 2 + 1.0 * 2);
  EXPECT_DOUBLE_EQ(quant_range_energy(x, 1, 4, 2, false), 16.0 * 2 + 0.0);
  EXPECT_DOUBLE_EQ(quant_range_energy(x, 2, 2, 2, false), 16.0 * 2);
  EXPECT_DOUBLE_EQ(quant_range_energy(x, 1, 4, 3, false), 16.0 * 3 + 0.0);  // short last group
}

}  // namespace agoq

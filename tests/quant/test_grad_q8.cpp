// Gradient format (INT8, fp32 scale per block): round trip, local accumulation bound, overflow, shards, special
// values, thread-count and SIMD/scalar reproducibility.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "quant/grad_q8.h"
#include "quant/simd.h"
#include "tests/common/bits_equal.h"
#include "tests/common/quant_kernels.h"

namespace agoq {
namespace {

std::vector<float> normal_vec(size_t n, float sigma, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = sigma * rng.normal();
  return v;
}

GradQ8Options opts(int block, QuantRounding r = QuantRounding::nearest, uint64_t seed = 0) {
  GradQ8Options o;
  o.block = block, o.rounding = r, o.seed = {seed, 17};
  return o;
}

}  // namespace

TEST(GradQ8, RoundTripWithinHalfStep) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (int block : {1, 7, 128, 256, 1000})
      for (auto r : {QuantRounding::nearest, QuantRounding::stochastic})
        for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(3001)}) {
          SCOPED_TRACE(testing::Message() << "block " << block << " n " << n << " sr " << int(r) << " simd " << simd);
          auto x = normal_vec(n, 3.f, n + block);
          std::vector<int8_t> q(n);
          std::vector<float> s(grad_q8_blocks(n, block)), y(n);
          ASSERT_EQ(grad_q8_quantize(x.data(), n, q.data(), s.data(), opts(block, r, 3)), 0u);
          grad_q8_dequantize(q.data(), s.data(), n, y.data(), block);
          for (size_t i = 0; i < n; ++i) {
            const size_t b = i / block;
            float amax = 0;
            for (size_t j = b * block; j < std::min(n, (b + 1) * size_t(block)); ++j)
              amax = std::max(amax, std::fabs(x[j]));
            ASSERT_EQ(s[b], amax / 127.f);
            // Nearest: <= s/2; stochastic: <= (511/512) s < s (8-bit uniforms, see test_format.cpp); plus 2^-16 s
            // for the fp32 rounding of x * 127 / amax.
            const double err = std::fabs(double(x[i]) - y[i]);
            ASSERT_LE(err, (r == QuantRounding::nearest ? 0.5 : 511.0 / 512) * s[b] * (1 + 0x1p-16)) << i;
          }
        }
  }
  quant_use_default_kernels();
}

// Local accumulation of K gradients, against the exact fp64 sum. Step k re-quantizes the block sum y_k with scale
// s_k = max|y_k| / 127, adding an error <= s_k / 2 (nearest) or < s_k (stochastic); the fp32 sum fma(code, s, g)
// itself rounds by <= 2^-24 |y_k| <= 2^-24 * 127 s_k. So after K steps |q - sum| <= sum_k s_k (1/2 + 2^-16) for
// nearest (s_k (1 + 2^-16) for stochastic), with s_k read back after each step.
TEST(GradQ8, AccumulateStaysWithinDerivedBound) {
  const size_t n = 1000;
  const int block = 256, K = 40;
  for (auto r : {QuantRounding::nearest, QuantRounding::stochastic}) {
    std::vector<int8_t> q(n, 0);
    std::vector<float> s(grad_q8_blocks(n, block), 0.f), y(n);
    std::vector<double> exact(n, 0), bound(n, 0);
    for (int k = 0; k < K; ++k) {
      const auto g = normal_vec(n, std::ldexp(1.f, k % 7 - 3), 100 + k);  // mixed magnitudes
      ASSERT_EQ(grad_q8_accumulate(q.data(), s.data(), g.data(), n, opts(block, r, 1000 + k)), 0u);
      for (size_t i = 0; i < n; ++i) {
        exact[i] += g[i];
        bound[i] += s[i / block] * (r == QuantRounding::nearest ? 0.5 + 0x1p-16 : 1 + 0x1p-16);
      }
    }
    grad_q8_dequantize(q.data(), s.data(), n, y.data(), block);
    double err2 = 0, var = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(y[i] - exact[i]), bound[i]) << i;
      err2 += (y[i] - exact[i]) * (y[i] - exact[i]);
      var += bound[i] * bound[i];
    }
    // The bound is not vacuous: the error actually reached is a sizeable part of one step, far below a sum of K.
    EXPECT_GT(std::sqrt(err2 / n), 0.01 * std::sqrt(var / n) / K);
  }
}

// Stochastic rounding is unbiased up to the 8-bit uniforms, for quantize and for accumulate: the mean over N seeds
// of the decoded value is within 6 sd + s/512 + 2^-16 s of the value rounded (x, or the fp32 sum fma(u, s_old, g)),
// sd = s / (2 sqrt N) (one rounding has variance <= s^2 / 4), s/512 the bias of deciding on round(256 t) (see
// test_format.cpp), 2^-16 s the fp32 rounding of 127/amax and of t (2 * 127 * 2^-24 steps). Nearest rounding, run
// through the same check, fails it.
namespace {
size_t grad_sr_over_bound(QuantRounding r, bool acc, int N) {
  const size_t n = 600;  // blocks of 256, 256 and 88
  const auto x = normal_vec(n, 1.f, 21), g = normal_vec(n, 0.3f, 22);
  std::vector<int8_t> q0(n), q(n);
  std::vector<float> s0(3), s(3), y(n);
  grad_q8_quantize(x.data(), n, q0.data(), s0.data(), opts(256));
  std::vector<double> target(n), sum(n, 0);
  for (size_t i = 0; i < n; ++i) target[i] = acc ? std::fma(float(q0[i]), s0[i / 256], g[i]) : x[i];
  for (int k = 0; k < N; ++k) {
    q = q0, s = s0;
    if (acc) EXPECT_EQ(grad_q8_accumulate(q.data(), s.data(), g.data(), n, opts(256, r, 5000 + k)), 0u);
    else EXPECT_EQ(grad_q8_quantize(x.data(), n, q.data(), s.data(), opts(256, r, 5000 + k)), 0u);
    grad_q8_dequantize(q.data(), s.data(), n, y.data(), 256);
    for (size_t i = 0; i < n; ++i) sum[i] += y[i];
  }
  size_t over = 0;
  for (size_t i = 0; i < n; ++i) {
    const double sc = s[i / 256], sd = sc / (2 * std::sqrt(double(N)));  // the scale is the same at every seed
    over += std::fabs(sum[i] / N - target[i]) > 6 * sd + sc / 512 + 0x1p-16 * sc;
  }
  return over;
}
}  // namespace

TEST(GradQ8, StochasticRoundingIsUnbiased) {
  for (bool acc : {false, true}) {
    SCOPED_TRACE(acc ? "accumulate" : "quantize");
    EXPECT_EQ(grad_sr_over_bound(QuantRounding::stochastic, acc, 3000), 0u);
    EXPECT_GT(grad_sr_over_bound(QuantRounding::nearest, acc, 3000), 400u);  // of 600: the check can fail
  }
}

// Without the old value the result would be the last gradient only: check that accumulation really sums.
TEST(GradQ8, AccumulateSumsAndScaleGrows) {
  const size_t n = 300;
  std::vector<int8_t> q(n, 0);
  std::vector<float> s(2, 0.f), y(n);
  std::vector<float> g(n, 100.f);
  for (int k = 0; k < 10; ++k) ASSERT_EQ(grad_q8_accumulate(q.data(), s.data(), g.data(), n, opts(256)), 0u);
  grad_q8_dequantize(q.data(), s.data(), n, y.data(), 256);
  for (float v : y) EXPECT_NEAR(v, 1000.f, 1e-3);
  EXPECT_NEAR(s[0], 1000.f / 127, 1e-3);  // codes never overflow: the scale follows the sum
  // Huge values: 100 steps of ~1e35 stay finite and accurate to the bound.
  auto big = normal_vec(n, 1e35f, 4);
  std::fill(q.begin(), q.end(), 0), std::fill(s.begin(), s.end(), 0.f);
  double bound = 0;
  for (int k = 0; k < 100; ++k) {
    ASSERT_EQ(grad_q8_accumulate(q.data(), s.data(), big.data(), n, opts(256)), 0u);
    bound += s[0] * (0.5 + 0x1p-16);
  }
  grad_q8_dequantize(q.data(), s.data(), n, y.data(), 256);
  for (size_t i = 0; i < 256; ++i) {
    ASSERT_TRUE(std::isfinite(y[i]));
    ASSERT_LE(std::fabs(double(y[i]) - 100.0 * big[i]), bound);
  }
}

// The norm from the codes equals the norm of the dequantized values (up to fp32 rounding of code * scale,
// relative 2^-24 per value) for lengths that end mid-block.
TEST(GradQ8, SumSquaresFromCodesEqualsDequantizedNorm) {
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(1000), size_t(70001)}) {
    Rng rng(n + 3);
    std::vector<float> x(n), y(n);
    for (float& v : x) v = (rng.uniform() - 0.5f) * 10.0f;
    std::vector<int8_t> codes(n);
    std::vector<float> scales(grad_q8_blocks(n, 256));
    grad_q8_quantize(x.data(), n, codes.data(), scales.data());
    grad_q8_dequantize(codes.data(), scales.data(), n, y.data());
    double ref = 0;
    for (float v : y) ref += double(v) * v;
    const double got = grad_q8_sum_squares(codes.data(), scales.data(), n);
    EXPECT_NEAR(got, ref, 1e-6 * ref + 1e-30) << n;
  }
}

TEST(GradQ8, DequantizeAddSumsShards) {
  const size_t n = 777;
  const auto a = normal_vec(n, 1.f, 1), b = normal_vec(n, 2.f, 2);
  std::vector<int8_t> qa(n), qb(n);
  std::vector<float> sa(grad_q8_blocks(n, 128)), sb(sa.size()), out(n, 0.f), da(n), db(n);
  grad_q8_quantize(a.data(), n, qa.data(), sa.data(), opts(128));
  grad_q8_quantize(b.data(), n, qb.data(), sb.data(), opts(128));
  grad_q8_dequantize_add(qa.data(), sa.data(), n, out.data(), 128);
  grad_q8_dequantize_add(qb.data(), sb.data(), n, out.data(), 128);
  grad_q8_dequantize(qa.data(), sa.data(), n, da.data(), 128);
  grad_q8_dequantize(qb.data(), sb.data(), n, db.data(), 128);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], std::fma(float(qb[i]), sb[i / 128], da[i]));
}

// The fused reduce step is bit for bit the unfused chain: dequantize, dequantize_add, divide, quantize.
TEST(GradQ8, SumRequantizeEqualsDequantizeAddDivideQuantize) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    for (int block : {1, 7, 256, 1000})
      for (int nsrc : {1, 2, 3, 5, 17})
        for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(3001), size_t(40003)})
          for (float divisor : {1.f, float(nsrc)}) {
            SCOPED_TRACE(testing::Message() << "block " << block << " nsrc " << nsrc << " n " << n << " simd " << simd
                                            << " divisor " << divisor);
            const size_t nb = grad_q8_blocks(n, block);
            std::vector<std::vector<int8_t>> q(nsrc, std::vector<int8_t>(n));
            std::vector<std::vector<float>> sc(nsrc, std::vector<float>(nb));
            std::vector<const int8_t*> qp;
            std::vector<const float*> sp;
            for (int r = 0; r < nsrc; ++r) {
              auto x = normal_vec(n, 1.f + r, 100 + r);
              if (n > 300 && r == 1) x[299] = NAN;  // poisons one block of the sum
              grad_q8_quantize(x.data(), n, q[r].data(), sc[r].data(), opts(block));
              qp.push_back(q[r].data()), sp.push_back(sc[r].data());
            }
            std::vector<float> ref(n);
            grad_q8_dequantize(qp[0], sp[0], n, ref.data(), block);
            for (int r = 1; r < nsrc; ++r) grad_q8_dequantize_add(qp[r], sp[r], n, ref.data(), block);
            if (divisor != 1.f)
              for (float& v : ref) v /= divisor;
            std::vector<int8_t> ref_q(n), got_q(n);
            std::vector<float> ref_s(nb), got_s(nb), got(n);
            const size_t ref_bad = grad_q8_quantize(ref.data(), n, ref_q.data(), ref_s.data(), opts(block));
            EXPECT_EQ(grad_q8_sum_requantize(qp.data(), sp.data(), nsrc, n, divisor, got.data(), got_q.data(),
                                             got_s.data(), block),
                      ref_bad);
            EXPECT_TRUE(bits_equal(ref.data(), got.data(), n * 4));
            EXPECT_EQ(ref_q, got_q);
            EXPECT_TRUE(bits_equal(ref_s.data(), got_s.data(), nb * 4));
            // Without the fp32 output (the sum stays in a tile), and the fp32 output alone.
            std::fill(got_q.begin(), got_q.end(), int8_t(0));
            grad_q8_sum_requantize(qp.data(), sp.data(), nsrc, n, divisor, nullptr, got_q.data(), got_s.data(), block);
            EXPECT_EQ(ref_q, got_q);
            EXPECT_TRUE(bits_equal(ref_s.data(), got_s.data(), nb * 4));
            std::fill(got.begin(), got.end(), 0.f);
            grad_q8_sum_requantize(qp.data(), sp.data(), nsrc, n, divisor, got.data(), nullptr, nullptr, block);
            EXPECT_TRUE(bits_equal(ref.data(), got.data(), n * 4));
          }
  }
  quant_use_default_kernels();
}

// Streaming stores write the same values as the plain kernels, at any alignment of the output.
TEST(GradQ8, StreamingStoresGiveTheSameOutput) {
  const size_t n = 70001;
  const auto x = normal_vec(n, 1.f, 21);
  for (int block : {1, 7, 256}) {
    std::vector<int8_t> q(n), qs(n + 64);
    std::vector<float> s(grad_q8_blocks(n, block)), ss(s.size()), ref(n), got(n + 8);
    grad_q8_quantize(x.data(), n, q.data(), s.data(), opts(block));
    GradQ8Options o = opts(block);
    o.stream = true;
    const size_t aligned = (32 - reinterpret_cast<uintptr_t>(qs.data()) % 32) % 32;  // streaming needs 32 bytes
    for (size_t off : {aligned, aligned + 1, aligned + 8}) {
      grad_q8_quantize(x.data(), n, qs.data() + off, ss.data(), o);
      EXPECT_TRUE(bits_equal(q.data(), qs.data() + off, n)) << "block " << block << " offset " << off;
      EXPECT_TRUE(bits_equal(s.data(), ss.data(), s.size() * 4));
    }
    grad_q8_dequantize(q.data(), s.data(), n, ref.data(), block);
    for (size_t off : {0, 1, 3, 7}) {
      grad_q8_dequantize_stream(q.data(), s.data(), n, got.data() + off, block);
      EXPECT_TRUE(bits_equal(ref.data(), got.data() + off, n * 4)) << "block " << block << " offset " << off;
    }
  }
}

// Shards: each shard starts its own blocks; stochastic rounding keyed by index_base gives the same codes as the
// whole vector wherever the shard boundary is block-aligned.
TEST(GradQ8, ShardsWithIndexBase) {
  const int block = 64;
  const size_t n = 1000;
  const auto x = normal_vec(n, 1.f, 9);
  std::vector<int8_t> whole(n), parts(n);
  std::vector<float> sw(grad_q8_blocks(n, block)), sp(grad_q8_blocks(n, block) + 3);
  GradQ8Options o = opts(block, QuantRounding::stochastic, 5);
  grad_q8_quantize(x.data(), n, whole.data(), sw.data(), o);
  const size_t cut[] = {0, 320, 333, 1000};  // 320 is block-aligned, 333 is not
  size_t first_scale = 0;
  for (int k = 0; k < 3; ++k) {
    o.index_base = cut[k];
    const size_t len = cut[k + 1] - cut[k];
    grad_q8_quantize(x.data() + cut[k], len, parts.data() + cut[k], sp.data() + first_scale, o);
    first_scale += grad_q8_blocks(len, block);
  }
  EXPECT_EQ(first_scale, 5u + 1 + 11);
  EXPECT_TRUE(bits_equal(whole.data(), parts.data(), 320));  // shard 0 = blocks 0..4 of the whole
  EXPECT_TRUE(bits_equal(sw.data(), sp.data(), 5 * sizeof(float)));
}

TEST(GradQ8, NonFiniteIsCountedAndPoisonsOnlyItsBlock) {
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    auto x = normal_vec(600, 1.f, 3);
    x[300] = NAN, x[301] = -INFINITY;
    std::vector<int8_t> q(600);
    std::vector<float> s(3), y(600);
    EXPECT_EQ(grad_q8_quantize(x.data(), 600, q.data(), s.data(), opts(256)), 2u);
    EXPECT_TRUE(std::isnan(s[1]));
    EXPECT_TRUE(std::isfinite(s[0]) && std::isfinite(s[2]));
    grad_q8_dequantize(q.data(), s.data(), 600, y.data(), 256);
    EXPECT_TRUE(std::isnan(y[256]) && std::isnan(y[511]) && std::isfinite(y[255]) && std::isfinite(y[512]));
    // Accumulate: an overflowing sum is non-finite too.
    x[300] = x[301] = 0.f;
    grad_q8_quantize(x.data(), 600, q.data(), s.data(), opts(256));
    std::vector<float> g(600, 0.f);
    g[10] = INFINITY;
    EXPECT_EQ(grad_q8_accumulate(q.data(), s.data(), g.data(), 600, opts(256)), 1u);
    EXPECT_TRUE(std::isnan(s[0]));
    g[10] = 0, g[599] = 3e38f;
    std::vector<float> big(600, 3e38f);
    grad_q8_quantize(big.data(), 600, q.data(), s.data(), opts(256));
    EXPECT_EQ(grad_q8_accumulate(q.data(), s.data(), g.data(), 600, opts(256)), 1u);  // 3e38 + 3e38 = Inf
    EXPECT_TRUE(std::isnan(s[2]) && std::isfinite(s[1]));
  }
  quant_use_default_kernels();
}

TEST(GradQ8, ZerosAndDenormals) {
  std::vector<float> x(300, 0.f), y(300);
  std::vector<int8_t> q(300);
  std::vector<float> s(2);
  EXPECT_EQ(grad_q8_quantize(x.data(), 300, q.data(), s.data(), opts(256, QuantRounding::stochastic)), 0u);
  grad_q8_dequantize(q.data(), s.data(), 300, y.data(), 256);
  for (float v : y) EXPECT_EQ(v, 0.f);
  for (size_t i = 0; i < 300; ++i) x[i] = float(int(i % 11) - 5) * 0x1p-145f;  // denormals only
  for (QuantKernels simd : quant_kernels_here()) {
    quant_use_kernels(simd);
    EXPECT_EQ(grad_q8_quantize(x.data(), 300, q.data(), s.data(), opts(256)), 0u);
    grad_q8_dequantize(q.data(), s.data(), 300, y.data(), 256);
    // Bound: s/2 plus the rounding of the subnormal scale itself (2^-150 per unit of code, 127 units).
    for (size_t i = 0; i < 300; ++i) ASSERT_LE(std::fabs(double(x[i]) - y[i]), s[i / 256] / 2 + 127 * 0x1p-150) << i;
    EXPECT_EQ(q[10], 127);  // the extreme value maps to the extreme code despite 127 / amax overflowing fp32
  }
  quant_use_default_kernels();
  EXPECT_THROW(grad_q8_quantize(x.data(), 300, q.data(), s.data(), opts(0)), Error);
}

TEST(GradQ8, ReproducibleAcrossThreadsAndSimdMatchesScalar) {
  const size_t n = 200003;  // large enough to run in parallel, odd length
  const auto x = normal_vec(n, 1.f, 12), g = normal_vec(n, 0.5f, 13);
  std::vector<std::vector<int8_t>> q;
  std::vector<std::vector<float>> s, y;
  const int saved = omp_get_max_threads();
  // (threads, kernels): 1 and 2 threads with the default kernels, then every variant with 2.
  std::vector<std::pair<int, QuantKernels>> cfgs = {{1, quant_kernels_here()[0]}};
  for (QuantKernels k : quant_kernels_here()) cfgs.push_back({2, k});
  for (const auto& [threads, kernels] : cfgs) {
    omp_set_num_threads(threads);
    quant_use_kernels(kernels);
    std::vector<int8_t> qi(n);
    std::vector<float> si(grad_q8_blocks(n, 256)), yi(n, 1.f);
    grad_q8_quantize(x.data(), n, qi.data(), si.data(), opts(256, QuantRounding::stochastic, 8));
    grad_q8_accumulate(qi.data(), si.data(), g.data(), n, opts(256, QuantRounding::stochastic, 9));
    grad_q8_accumulate(qi.data(), si.data(), x.data(), n, opts(256, QuantRounding::nearest));
    grad_q8_dequantize_add(qi.data(), si.data(), n, yi.data(), 256);
    q.push_back(qi), s.push_back(si), y.push_back(yi);
  }
  omp_set_num_threads(saved);
  quant_use_default_kernels();
  for (size_t cfg = 1; cfg < cfgs.size(); ++cfg) {
    EXPECT_EQ(q[0], q[cfg]) << cfg;
    EXPECT_TRUE(bits_equal(s[0].data(), s[cfg].data(), s[0].size() * 4)) << cfg;
    EXPECT_TRUE(bits_equal(y[0].data(), y[cfg].data(), y[0].size() * 4)) << cfg;
  }
}

// Blocks and shards that do not start on a multiple of 32 elements take the random bytes through a copy (the AVX2
// rounding reads them in 32-element blocks): still the bytes of their element indices, as the scalar kernel.
TEST(GradQ8, StochasticSimdMatchesScalarAtAnyAlignment) {
  const size_t n = 5000;
  const auto x = normal_vec(n, 1.f, 14);
  for (int block : {100, 256, 1500})
    for (uint64_t base : {uint64_t(0), uint64_t(7), uint64_t(4096 + 20)}) {
      GradQ8Options o = opts(block, QuantRounding::stochastic, 21);
      o.index_base = base;
      const std::vector<QuantKernels> kernels = quant_kernels_here();
      std::vector<std::vector<int8_t>> q(kernels.size(), std::vector<int8_t>(n));
      for (size_t k = 0; k < kernels.size(); ++k) {
        quant_use_kernels(kernels[k]);
        std::vector<float> sc(grad_q8_blocks(n, block));
        grad_q8_quantize(x.data(), n, q[k].data(), sc.data(), o);
      }
      quant_use_default_kernels();
      for (size_t k = 0; k + 1 < kernels.size(); ++k)
        EXPECT_EQ(q[k], q.back()) << block << " " << base << " " << kernels[k];
    }
}

}  // namespace agoq

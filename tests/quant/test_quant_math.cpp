// The shared per-value math (quant/quant_math.h, quant/half.h), which the CUDA kernels compile for the GPU, against
// the CPU kernels, bit for bit, for every format. The references below compute each byte from the shared functions
// alone, in the order the GPU kernels do (units of 8 values, group statistics as min/max over the units, each
// value's random byte from quant_random_byte_at), so a GPU that evaluates these functions as the CPU does produces
// the CPU's bytes; tests/cuda checks that on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/grad_q8.h"
#include "quant/quant_math.h"
#include "quant/simd.h"
#include "quant/tensor.h"
#include "tests/common/bits_equal.h"
#include "tests/common/quant_kernels.h"
#include "tests/common/quant_test_inputs.h"

namespace agoq {
namespace {

// One row's bytes of an int format from the shared functions; returns the status.
QuantStatus shared_encode_row(const QuantFormat& f, const float* x, size_t cols, const QuantView& row,
                              const QuantSeed& seed, uint64_t first) {
  QuantStatus st;
  const size_t G = size_t(f.group);
  const float qmax = float((1 << f.bits) - 1);
  for (size_t g = 0, c0 = 0; c0 < cols; ++g, c0 += G) {
    const size_t n = std::min(G, cols - c0);
    float lo = INFINITY, hi = -INFINITY;
    size_t nonfinite = 0;
    for (size_t j = 0; j < n; ++j)
      nonfinite += !float_is_finite(x[c0 + j]), lo = fminf(lo, x[c0 + j]), hi = fmaxf(hi, x[c0 + j]);
    QuantGroupParams p{};
    const bool ok = nonfinite == 0 && quant_group_params(f.bits, f.symmetric, lo + 0.f, hi + 0.f, p);
    for (size_t u = 0; u < n; u += 8) {  // a unit of 8 codes fills f.bits bytes
      uint64_t w = 0;
      const size_t m = std::min<size_t>(8, n - u);
      for (size_t k = 0; ok && k < m; ++k) {
        const float v = x[c0 + u + k];
        const uint8_t q = f.rounding == QuantRounding::stochastic
                              ? quant_code_stochastic(v, p, qmax, quant_random_byte_at(seed, first + c0 + u + k))
                              : quant_code_nearest(v, p, qmax);
        w |= uint64_t(q) << (k * f.bits);
      }
      for (size_t k = 0; k < (m * f.bits + 7) / 8; ++k) row.codes[(c0 + u) / 8 * f.bits + k] = uint8_t(w >> (8 * k));
    }
    row.scales[g] = ok ? p.h : uint16_t(0x7E00);
    if (!f.symmetric) row.mins[g] = ok ? p.offset : NAN;
    if (!ok) st.nonfinite += nonfinite, st.overflow_groups += nonfinite == 0;
  }
  return st;
}

void shared_decode_row(const QuantFormat& f, const QuantConstView& row, size_t cols, float* out) {
  for (size_t c = 0; c < cols; ++c) {
    const size_t g = c / size_t(f.group), bit = c * size_t(f.bits);
    uint32_t w = 0;
    for (int k = 0; k < 2; ++k)
      w |= bit / 8 + k < (cols * f.bits + 7) / 8 ? uint32_t(row.codes[bit / 8 + k]) << (8 * k) : 0;
    const uint32_t q = (w >> (bit % 8)) & ((1u << f.bits) - 1);
    const float scale = f16_to_f32(row.scales[g]);
    out[c] = quant_code_decode(q, scale, quant_int_offset(f.bits, f.symmetric, scale, f.symmetric ? 0.f : row.mins[g]));
  }
}

class QuantMathShared : public ::testing::TestWithParam<QuantKernels> {  // each variant of the CPU kernels
 protected:
  void SetUp() override {
    if (!quant_kernels_available(GetParam())) GTEST_SKIP() << GetParam() << " kernels: not on this CPU or build";
    quant_use_kernels(GetParam());
  }
  void TearDown() override { quant_use_default_kernels(); }
};

TEST_P(QuantMathShared, GroupCodesEqualTheKernels) {
  const QuantSeed seed{123, 9};
  for (const QuantFormat& f : quant_test_formats()) {
    if (f.kind != QuantKind::int_group) continue;
    for (const auto [rows, cols] : quant_test_shapes()) {
      const std::vector<float> x = quant_test_rows(rows, cols, rows * 31 + cols, true);
      QuantizedTensor kernel(f, rows, cols, MemCategory::workspace), shared(f, rows, cols, MemCategory::workspace);
      const QuantStatus ks = quant_encode(kernel, x.data(), seed);
      QuantStatus ss;
      for (size_t r = 0; r < rows; ++r)
        ss += shared_encode_row(f, x.data() + r * cols, cols, shared.row(r), seed, r * cols);
      const std::string what = quant_format_name(f) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      ASSERT_TRUE(bits_equal(kernel.view().codes, shared.view().codes, kernel.bytes())) << what;
      EXPECT_EQ(ks.nonfinite, ss.nonfinite) << what;
      EXPECT_EQ(ks.overflow_groups, ss.overflow_groups) << what;
      std::vector<float> a(x.size()), b(x.size());
      quant_decode(kernel, a.data());
      for (size_t r = 0; r < rows; ++r) shared_decode_row(f, kernel.row(r), cols, b.data() + r * cols);
      ASSERT_TRUE(bits_equal(a.data(), b.data(), a.size() * sizeof(float))) << what;
    }
  }
}

TEST_P(QuantMathShared, KeepFormatsEqualTheKernels) {
  const std::vector<float> x = quant_test_rows(5, 200, 4, true);
  QuantizedTensor t(quant_format_bf16(), 5, 200, MemCategory::workspace);
  EXPECT_EQ(quant_encode(t, x.data(), {}).nonfinite, 2u);
  const auto* h = reinterpret_cast<const uint16_t*>(t.view().codes);
  std::vector<float> y(x.size());
  quant_decode(t, y.data());
  for (size_t j = 0; j < x.size(); ++j) {
    ASSERT_EQ(h[j], f32_to_bf16(x[j])) << j;
    ASSERT_EQ(float_bits(y[j]), float_bits(bf16_to_f32(h[j]))) << j;
  }
}

// The gradient format from the shared functions: quantize (Acc = false) or accumulate into codes/scales.
size_t shared_grad_blocks(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o, bool acc) {
  size_t bad = 0;
  const size_t B = size_t(o.block);
  for (size_t b = 0, j0 = 0; j0 < n; ++b, j0 += B) {
    const size_t m = std::min(B, n - j0);
    const float old = acc ? scales[b] : 0.f;
    std::vector<float> y(m);
    uint32_t amax = 0;
    size_t nonfinite = 0;
    for (size_t j = 0; j < m; ++j) {
      y[j] = acc ? grad_q8_decode_add(codes[j0 + j], old, x[j0 + j]) : x[j0 + j];
      const uint32_t bits = float_bits(y[j]) & 0x7FFFFFFFu;
      if (bits >= 0x7F800000u) ++nonfinite;
      else amax = std::max(amax, bits);
    }
    if (nonfinite) {
      std::memset(codes + j0, 0, m), scales[b] = NAN, bad += nonfinite;
      continue;
    }
    const GradQ8BlockParams p = grad_q8_block_params(bits_float(amax));
    for (size_t j = 0; j < m; ++j)
      codes[j0 + j] = o.rounding == QuantRounding::stochastic
                          ? grad_q8_code_stochastic(y[j], p, quant_random_byte_at(o.seed, o.index_base + j0 + j))
                          : grad_q8_code_nearest(y[j], p);
    scales[b] = p.scale;
  }
  return bad;
}

TEST_P(QuantMathShared, GradientBlocksEqualTheKernels) {
  const size_t n = 5000;
  const std::vector<float> g1 = grad_test_values(n, 1, true), g2 = grad_test_values(n, 2, false);
  for (int block : {32, 256, 1000})
    for (auto rounding : {QuantRounding::nearest, QuantRounding::stochastic}) {
      GradQ8Options o;
      o.block = block, o.rounding = rounding, o.seed = {77, 3}, o.index_base = 96;
      const size_t nb = grad_q8_blocks(n, block);
      std::vector<int8_t> kc(n), sc(n);
      std::vector<float> ks(nb), ss(nb);
      EXPECT_EQ(grad_q8_quantize(g2.data(), n, kc.data(), ks.data(), o),
                shared_grad_blocks(g2.data(), n, sc.data(), ss.data(), o, false));
      EXPECT_EQ(grad_q8_accumulate(kc.data(), ks.data(), g1.data(), n, o),
                shared_grad_blocks(g1.data(), n, sc.data(), ss.data(), o, true));
      const std::string what =
          "block " + std::to_string(block) + (rounding == QuantRounding::nearest ? " nearest" : " sr");
      ASSERT_TRUE(bits_equal(kc.data(), sc.data(), n)) << what;
      ASSERT_TRUE(bits_equal(ks.data(), ss.data(), nb * sizeof(float))) << what;
      std::vector<float> a(g1), b(g1);  // dequantize_add onto the same values
      grad_q8_dequantize_add(kc.data(), ks.data(), n, a.data(), block);
      for (size_t j = 0; j < n; ++j) b[j] = grad_q8_decode_add(kc[j], ks[j / size_t(block)], b[j]);
      ASSERT_TRUE(bits_equal(a.data(), b.data(), n * sizeof(float))) << what;
    }
}

TEST_P(QuantMathShared, SumRequantizeEqualsTheKernel) {
  const size_t n = 3000, block = 256, nb = grad_q8_blocks(n, block);
  const int nsrc = 3;
  std::vector<std::vector<int8_t>> codes(nsrc, std::vector<int8_t>(n));
  std::vector<std::vector<float>> scales(nsrc, std::vector<float>(nb));
  std::vector<const int8_t*> cp;
  std::vector<const float*> sp;
  for (int r = 0; r < nsrc; ++r) {
    grad_q8_quantize(grad_test_values(n, 10 + r, false).data(), n, codes[r].data(), scales[r].data());
    cp.push_back(codes[r].data()), sp.push_back(scales[r].data());
  }
  std::vector<float> y(n), ref(n);
  std::vector<int8_t> kc(n), sc(n);
  std::vector<float> ks(nb), ss(nb);
  grad_q8_sum_requantize(cp.data(), sp.data(), nsrc, n, float(nsrc), y.data(), kc.data(), ks.data(), int(block));
  for (size_t j = 0; j < n; ++j) {
    float v = grad_q8_decode(codes[0][j], scales[0][j / block]);
    for (int r = 1; r < nsrc; ++r) v = grad_q8_decode_add(codes[r][j], scales[r][j / block], v);
    ref[j] = grad_q8_sum_finish(v, float(nsrc));
  }
  ASSERT_TRUE(bits_equal(y.data(), ref.data(), n * sizeof(float)));
  GradQ8Options o;
  o.block = int(block);
  shared_grad_blocks(ref.data(), n, sc.data(), ss.data(), o, false);
  ASSERT_TRUE(bits_equal(kc.data(), sc.data(), n));
  ASSERT_TRUE(bits_equal(ks.data(), ss.data(), nb * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Kernels, QuantMathShared,
                         ::testing::Values(QuantKernels::avx512, QuantKernels::avx2, QuantKernels::scalar),
                         [](const auto& info) { return quant_kernels_name(info.param); });

}  // namespace
}  // namespace agoq

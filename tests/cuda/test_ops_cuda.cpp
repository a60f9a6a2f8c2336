// What the op table (tests/common/op_cases.h, run on the CUDA backend by tests/cuda_train/test_op_table_cuda.cpp)
// does not reach, because it is not an op called through a ModelBackend: the optimizer's kernels (AdamW, the
// gradient's sum of squares and scaling), the in-place residual add, the NaN loss of a target out of range (the
// backend's op, which the table calls, is not held to one: the CPU's does not check targets), and CudaMatmul on its own
// with explicit dtypes: bf16 inputs given as bf16, held to the fp32 bound 1e-5 (what is left is fp32 accumulation),
// where the table's bf16 bound is the one it shares with the CPU's oneDNN products. Where the device evaluates exactly
// the CPU's operations in the CPU's order (AdamW's update, the adds) the bits must be equal.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/matmul_cuda.h"
#include "cuda/ops_cuda.h"
#include "quant/half.h"
#include "tests/common/bits_equal.h"
#include "tests/common/op_check.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

constexpr double kSumTol = 1e-5;

template <class T>
DeviceBuffer<T> dev(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size(), MemCategory::activations, "test");
  d.upload(h.data(), h.size());
  return d;
}
template <class T>
std::vector<T> host(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  d.download(h.data(), h.size());
  return h;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && bits_equal(a.data(), b.data(), a.size() * sizeof(float));
}

// A target at V: the device gives that row a NaN loss (cuda/ops_cuda.h: the targets live on the device), not a
// plausible one; the other rows' losses and gradients are the op table's crossentropy_forward_backward_10x4099 case.
TEST(CudaOps, CrossEntropyTargetAtVGivesNaN) {
  AGOQ_REQUIRE_GPU();
  const int N = 10, V = 4099;
  const auto logits = randn(size_t(N) * V, 80, 3.0f);
  const std::vector<int> targets = {0, 4098, 5, -1, 17, 2, 8, -100, 30, V};
  DeviceBuffer<float> dZ = dev(logits), dLoss(N, MemCategory::activations);
  DeviceBuffer<int> dT = dev(targets);
  cuda_crossentropy_forward_backward(dZ.data(), dLoss.data(), dT.data(), N, V, 0.25f);
  const auto losses = host(dLoss);
  EXPECT_TRUE(std::isnan(losses[N - 1])) << "a target at V must not give a plausible loss";
  for (int n = 0; n + 1 < N; ++n) EXPECT_TRUE(std::isfinite(losses[n])) << n;
}

// The in-place residual add (a helper of the device model code, not a backend op; the table's residual_add case
// holds cuda_residual_add to the CPU's bits) and AdamW, which the optimizer calls.
TEST(CudaOps, ResidualAddInplaceAndAdamWAsTheCpuBitForBit) {
  AGOQ_REQUIRE_GPU();
  const size_t n = (size_t(1) << 17) + 3;
  const auto a = randn(n, 100), b = randn(n, 101);
  DeviceBuffer<float> dA = dev(a), dB = dev(b);
  cuda_residual_add_inplace(dA.data(), dB.data(), n);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  EXPECT_TRUE(same_bits(host(dA), want));

  // Three AdamW steps with weight decay: the shared adamw_update on the host is the CPU's fp32 path.
  auto p = randn(n, 102), m = randn(n, 103, 0.1f), v = randn(n, 104, 0.1f), g = randn(n, 105);
  for (float& x : v) x = x * x;
  DeviceBuffer<float> dP = dev(p), dM = dev(m), dV = dev(v), dG = dev(g);
  for (long step = 1; step <= 3; ++step) {
    const float lr = 1e-3f * float(step), decay = 1.0f - lr * 0.1f;
    const AdamStepCoeffs k = adam_step_coeffs(0.9f, 0.95f, 1e-8f, lr, step);
    for (size_t i = 0; i < n; ++i) adamw_update(p[i], m[i], v[i], g[i], decay, k);
    cuda_adamw_step(dP.data(), dM.data(), dV.data(), dG.data(), n, decay, k);
  }
  EXPECT_TRUE(same_bits(host(dP), p));
  EXPECT_TRUE(same_bits(host(dM), m));
  EXPECT_TRUE(same_bits(host(dV), v));
}

TEST(CudaOps, GradSumSquaresAndScale) {
  AGOQ_REQUIRE_GPU();
  const size_t n = (size_t(3) << 16) + 77;  // four chunks, the last partial
  const auto g = randn(n, 110);
  DeviceBuffer<float> dG = dev(g);
  double want = 0;
  for (float x : g) want += double(x) * x;
  const double got = cuda_grad_sum_squares(dG.data(), n);
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(cuda_grad_sum_squares(dG.data(), n), got) << "the same sum every run";
  cuda_grad_scale(dG.data(), n, 0.5f);
  std::vector<float> half(g);
  for (float& x : half) x *= 0.5f;
  EXPECT_TRUE(same_bits(host(dG), half));
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
  return h;
}
std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

TEST(CudaMatmul, ForwardAndBackwardFp32AndBf16) {
  AGOQ_REQUIRE_GPU();
  CudaMatmul mm;
  struct Shape {
    int N, in_dim, out_dim;
  };
  for (Shape s : {Shape{7, 13, 5}, Shape{1, 1, 1}, Shape{130, 256, 688}})
    for (CudaDtype t : {CudaDtype::f32, CudaDtype::bf16}) {
      const bool bf = t == CudaDtype::bf16;
      auto in = randn(size_t(s.N) * s.in_dim, 1), w = randn(size_t(s.out_dim) * s.in_dim, 2),
           dout = randn(size_t(s.N) * s.out_dim, 3);
      const auto din0 = randn(in.size(), 4), dw0 = randn(w.size(), 5);
      if (bf) in = bf16_rounded(in), w = bf16_rounded(w), dout = bf16_rounded(dout);  // exactly what the GPU reads
      DeviceBuffer<float> fIn = dev(in), fW = dev(w), fDout = dev(dout);
      DeviceBuffer<uint16_t> hIn = dev(to_bf16(in)), hW = dev(to_bf16(w)), hDout = dev(to_bf16(dout));
      const void* pin = bf ? (const void*)hIn.data() : fIn.data();
      const void* pw = bf ? (const void*)hW.data() : fW.data();
      const void* pdout = bf ? (const void*)hDout.data() : fDout.data();
      DeviceBuffer<float> dOut(size_t(s.N) * s.out_dim, MemCategory::activations), dDin = dev(din0), dDw = dev(dw0);
      mm.forward(dOut.data(), pin, pw, t, s.N, s.in_dim, s.out_dim);
      Vec want(dOut.size()), ind = to_double(in), wd = to_double(w), dd = to_double(dout), want_din, want_dw;
      ref::matmul_forward(want.data(), ind.data(), wd.data(), s.N, s.in_dim, s.out_dim);
      const std::string what = std::to_string(s.N) + "x" + std::to_string(s.in_dim) + "x" + std::to_string(s.out_dim) +
                               (bf ? " bf16" : " fp32");
      EXPECT_LT(rel_err(host(dOut), want), kSumTol) << what;

      ref::matmul_backward(want_din, want_dw, dd, ind, wd, s.N, s.in_dim, s.out_dim);
      mm.backward(dDin.data(), dDw.data(), pdout, pin, pw, t, s.N, s.in_dim, s.out_dim, /*accumulate_din=*/true);
      auto din = host(dDin), dw = host(dDw);
      for (size_t i = 0; i < din.size(); ++i) din[i] -= din0[i];
      for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
      EXPECT_LT(rel_err(din, want_din), kSumTol) << what << " din (accumulated)";
      EXPECT_LT(rel_err(dw, want_dw), kSumTol) << what << " dw";
      mm.backward(dDin.data(), nullptr, pdout, pin, pw, t, s.N, s.in_dim, s.out_dim);  // overwrites
      EXPECT_LT(rel_err(host(dDin), want_din), kSumTol) << what << " din (overwritten)";
    }
}

}  // namespace
}  // namespace agoq

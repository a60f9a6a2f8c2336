// The model's ops on the GPU (cuda/ops_cuda.h, cuda/matmul_cuda.h) against the same float64 reference and finite
// differences as the CPU ops (tests/model/test_ops.cpp), with the CPU's tolerances: forwards ≤ 2e-6 element-wise and
// ≤ 1e-5 for reductions, backwards ≤ 1e-4 against finite differences. Where the device evaluates exactly the CPU's
// operations in the CPU's order (the embedding's accumulation, AdamW's update, the residual adds) the bits must be
// equal. bf16 GEMMs are checked against the reference of their bf16-rounded inputs: what is left is fp32
// accumulation, so the fp32 bound holds.
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

constexpr double kFwdTol = 2e-6, kSumTol = 1e-5, kGradTol = 1e-4;

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

TEST(CudaOps, RmsnormForwardApplyAndAccumulatingBackward) {
  AGOQ_REQUIRE_GPU();
  for (auto [N0, C0] : {std::pair{7, 13}, std::pair{67, 256}, std::pair{3, 4099}}) {
    const int N = N0, C = C0;
    const auto x = randn(size_t(N) * C, 10, 3.0f), w = randn(C, 11), R = randn(x.size(), 14);
    const auto dx0 = randn(x.size(), 15), dw0 = randn(C, 16);
    DeviceBuffer<float> dX = dev(x), dW = dev(w), dR = dev(R), dOut(x.size(), MemCategory::activations),
                        dRstd(N, MemCategory::activations), dOut2(x.size(), MemCategory::activations);
    cuda_rmsnorm_forward(dOut.data(), dRstd.data(), dX.data(), dW.data(), N, C, 1e-5f);
    cuda_rmsnorm_apply(dOut2.data(), dX.data(), dRstd.data(), dW.data(), N, C);
    Vec want(x.size()), want_rstd(N), xd = to_double(x), wd = to_double(w), Rd = to_double(R);
    ref::rmsnorm_forward(want.data(), want_rstd.data(), xd.data(), wd.data(), N, C, 1e-5);
    const auto out = host(dOut);
    EXPECT_LT(rel_err(out, want), kFwdTol) << N << "x" << C;
    EXPECT_LT(rel_err(host(dRstd), want_rstd), kFwdTol) << N << "x" << C;
    EXPECT_TRUE(same_bits(host(dOut2), out)) << "apply rebuilds the forward's output";

    DeviceBuffer<float> dDx = dev(dx0), dDw = dev(dw0);
    cuda_rmsnorm_backward(dDx.data(), dDw.data(), dR.data(), dX.data(), dW.data(), dRstd.data(), N, C);
    auto dx = host(dDx), dw = host(dDw);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
    for (int c = 0; c < C; ++c) dw[c] -= dw0[c];
    Vec o(x.size());
    auto loss = [&] {
      ref::rmsnorm_forward(o.data(), nullptr, xd.data(), wd.data(), N, C, 1e-5);
      return ref::dot(o, Rd);
    };
    EXPECT_LT(fd_err(dx.data(), xd, loss), kGradTol) << "dx " << N << "x" << C;
    EXPECT_LT(fd_err(dw.data(), wd, loss), kGradTol) << "dw " << N << "x" << C;
  }
}

// The CPU's tables (rope_init_tables: angles in double, rounded once).
void rope_tables(std::vector<float>& cos, std::vector<float>& sin, int T, int hd, double theta) {
  const int half = hd / 2;
  cos.resize(size_t(T) * half), sin.resize(cos.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double a = double(t) * std::pow(theta, -2.0 * i / hd);
      cos[size_t(t) * half + i] = float(std::cos(a)), sin[size_t(t) * half + i] = float(std::sin(a));
    }
}

TEST(CudaOps, RopeForwardAndItsTranspose) {
  AGOQ_REQUIRE_GPU();
  struct Shape {
    int B, T, n_heads, hd;
  };
  for (Shape s : {Shape{2, 5, 4, 6}, Shape{1, 67, 2, 64}, Shape{2, 256, 8, 128}}) {
    const int N = s.B * s.T;
    std::vector<float> cos, sin;
    rope_tables(cos, sin, s.T, s.hd, 500000.0);
    const auto x = randn(size_t(N) * s.n_heads * s.hd, 20);
    DeviceBuffer<float> dX = dev(x), dCos = dev(cos), dSin = dev(sin);
    cuda_rope_forward(dX.data(), dCos.data(), dSin.data(), N, s.T, s.n_heads, s.hd);
    Vec want = to_double(x);
    ref::rope_forward(want.data(), N, s.T, s.n_heads, s.hd, 500000.0);
    EXPECT_LT(rel_err(host(dX), want), kFwdTol) << "T=" << s.T << " hd=" << s.hd;
    cuda_rope_backward(dX.data(), dCos.data(), dSin.data(), N, s.T, s.n_heads, s.hd);  // the inverse rotation
    EXPECT_LT(rel_err(host(dX), to_double(x)), kFwdTol) << "T=" << s.T << " hd=" << s.hd;
  }
}

TEST(CudaOps, SwigluForwardAndBackward) {
  AGOQ_REQUIRE_GPU();
  const size_t n = 100003;
  const auto gate = randn(n, 70, 4.0f), up = randn(n, 71), R = randn(n, 72);
  DeviceBuffer<float> dG = dev(gate), dU = dev(up), dR = dev(R), dOut(n, MemCategory::activations),
                      dDg(n, MemCategory::activations), dDu(n, MemCategory::activations);
  cuda_swiglu_forward(dOut.data(), dG.data(), dU.data(), n);
  cuda_swiglu_backward(dDg.data(), dDu.data(), dR.data(), dG.data(), dU.data(), n);
  Vec g = to_double(gate), u = to_double(up), want(n);
  ref::swiglu_forward(want.data(), g.data(), u.data(), n);
  EXPECT_LT(rel_err(host(dOut), want), kFwdTol);
  const auto dgate = host(dDg), dup = host(dDu);
  double worst = 0;
  for (size_t i : pick(n, 300, 3)) {  // an element-wise op: each element's derivative on its own
    auto f = [&](double gi) { return gi / (1 + std::exp(-gi)) * u[i] * R[i]; };
    const double want_g = (f(g[i] + 1e-4) - f(g[i] - 1e-4)) / 2e-4, want_u = g[i] / (1 + std::exp(-g[i])) * R[i];
    worst = std::max(worst, std::abs(dgate[i] - want_g) / (1 + std::abs(want_g)));
    worst = std::max(worst, std::abs(dup[i] - want_u) / (1 + std::abs(want_u)));
  }
  EXPECT_LT(worst, kGradTol);
}

TEST(CudaOps, CrossEntropyLossAndGradient) {
  AGOQ_REQUIRE_GPU();
  const int N = 10, V = 4099;
  auto logits = randn(size_t(N) * V, 80, 3.0f);
  logits[5 * V + 2] = 1000.0f;                                               // a huge logit must not overflow
  const std::vector<int> targets = {0, 4098, 5, -1, 17, 2, 8, -100, 30, V};  // the last one is out of range
  const float scale = 0.25f;
  DeviceBuffer<float> dZ = dev(logits), dLoss(N, MemCategory::activations);
  DeviceBuffer<int> dT = dev(targets);
  cuda_crossentropy_forward_backward(dZ.data(), dLoss.data(), dT.data(), N, V, scale);
  const auto grad = host(dZ), losses = host(dLoss);
  Vec z = to_double(logits), want(N - 1);
  ref::crossentropy_forward(want.data(), z.data(), targets.data(), N - 1, V);
  for (int n = 0; n + 1 < N; ++n) EXPECT_NEAR(losses[n], want[n], 2e-6 * (1 + std::abs(want[n]))) << n;
  EXPECT_TRUE(std::isnan(losses[N - 1])) << "a target at V must not give a plausible loss";
  for (int n : {3, 7})
    for (int v = 0; v < V; ++v) ASSERT_EQ(grad[size_t(n) * V + v], 0.0f) << "ignored row " << n;
  for (int n = 0; n + 1 < N; ++n) {
    if (targets[n] < 0) continue;
    const double lse = want[n] + z[size_t(n) * V + targets[n]];
    for (int v = 0; v < V; v += 37) {
      const double p = scale * (std::exp(z[size_t(n) * V + v] - lse) - (v == targets[n]));
      ASSERT_NEAR(grad[size_t(n) * V + v], p, 1e-6 + 2e-6 * std::abs(p)) << n << "," << v;
    }
  }
}

TEST(CudaOps, EmbeddingAsTheCpuBitForBit) {
  AGOQ_REQUIRE_GPU();
  const int N = 300, C = 200, V = 11;
  std::vector<int> tokens(N);
  Rng rng(90);
  for (int& t : tokens) t = int(rng.below(V));  // repeats guaranteed
  const auto table = randn(size_t(V) * C, 91), R = randn(size_t(N) * C, 92), dt0 = randn(table.size(), 93);
  for (int v_begin : {0, 4}) {  // the whole table, and the shard [4, 8) of a vocabulary-parallel one
    const int Vs = v_begin ? 4 : V;
    std::vector<float> shard(table.begin() + size_t(v_begin) * C, table.begin() + size_t(v_begin + Vs) * C);
    std::vector<float> want_out(size_t(N) * C, 0.f), want_dt(dt0.begin(), dt0.begin() + shard.size());
    for (int n = 0; n < N; ++n) {  // the CPU's definition and order: rows in token order per column
      const int t = tokens[n] - v_begin;
      if (t < 0 || t >= Vs) continue;
      for (int c = 0; c < C; ++c) {
        want_out[size_t(n) * C + c] = shard[size_t(t) * C + c];
        want_dt[size_t(t) * C + c] += R[size_t(n) * C + c];
      }
    }
    DeviceBuffer<float> dTab = dev(shard), dR = dev(R), dOut(size_t(N) * C, MemCategory::activations);
    DeviceBuffer<float> dDt = dev(std::vector<float>(dt0.begin(), dt0.begin() + shard.size()));
    DeviceBuffer<int> dTok = dev(tokens);
    cuda_embedding_forward(dOut.data(), dTok.data(), dTab.data(), N, C, v_begin, Vs);
    cuda_embedding_backward(dDt.data(), dR.data(), dTok.data(), N, C, v_begin, Vs);
    EXPECT_TRUE(same_bits(host(dOut), want_out)) << "v_begin " << v_begin;
    EXPECT_TRUE(same_bits(host(dDt), want_dt)) << "v_begin " << v_begin;
  }
}

TEST(CudaOps, ResidualAddsAndAdamWAsTheCpuBitForBit) {
  AGOQ_REQUIRE_GPU();
  const size_t n = (size_t(1) << 17) + 3;
  const auto a = randn(n, 100), b = randn(n, 101);
  DeviceBuffer<float> dA = dev(a), dB = dev(b), dOut(n, MemCategory::activations);
  cuda_residual_add(dOut.data(), dA.data(), dB.data(), n);
  cuda_residual_add_inplace(dA.data(), dB.data(), n);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  EXPECT_TRUE(same_bits(host(dOut), want));
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

// The reference products of matmul_backward: din = dout · w, dw = doutᵀ · in (float64).
void matmul_backward_ref(Vec& din, Vec& dw, const Vec& dout, const Vec& in, const Vec& w, int N, int I, int O) {
  din.assign(size_t(N) * I, 0.0), dw.assign(size_t(O) * I, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < I; ++i) {
        din[size_t(n) * I + i] += dout[size_t(n) * O + o] * w[size_t(o) * I + i];
        dw[size_t(o) * I + i] += dout[size_t(n) * O + o] * in[size_t(n) * I + i];
      }
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

      matmul_backward_ref(want_din, want_dw, dd, ind, wd, s.N, s.in_dim, s.out_dim);
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

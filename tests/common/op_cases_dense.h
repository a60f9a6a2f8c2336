// The op table's cases of the GEMMs, RMSNorm, RoPE, SwiGLU, the residual add and the embedding (op_cases.h), each
// on the shapes the CPU's and the CUDA's hand-written op tests had: odd sizes, a size of one, sizes past a SIMD width,
// a thread's chunk and a CUDA block.
#pragma once
#include <string>
#include <vector>

#include "core/rng.h"
#include "tests/common/op_case.h"

namespace agoq::op_cases_detail {

// A bf16 backend's products are checked against the float64 product of the same bf16-rounded inputs, within the
// fp32 accumulation's bound for the sum's length (round_for_gemm, gemm_tol). Outputs that accumulate start from
// random values and those that overwrite from garbage.
inline void add_matmul_cases(std::vector<OpCase>& cases, int N, int I, int O) {
  const std::string shape = "_" + std::to_string(N) + "x" + std::to_string(I) + "x" + std::to_string(O);
  OpCase forward{"matmul_forward" + shape, {ModelOp::matmul_forward}, [=](ModelBackend& be) {
                   OnBackend d(be);
                   const auto in = randn(size_t(N) * I, 1), w = randn(size_t(O) * I, 2);
                   float* out = d.put(randn(size_t(N) * O, 3));  // overwritten
                   be.matmul_forward(out, d.put(in), d.put(w), N, I, O);
                   Vec want(size_t(N) * O), ind = round_for_gemm(be, in), wd = round_for_gemm(be, w);
                   ref::matmul_forward(want.data(), ind.data(), wd.data(), N, I, O);
                   return std::vector<OpCheck>{near("out", d.get(out, want.size()), want, gemm_tol(be, I))};
                 }};
  // accumulate_din true and false, and the two calls the model makes with one gradient only (the other null).
  OpCase backward{"matmul_backward" + shape, {ModelOp::matmul_backward}, [=](ModelBackend& be) {
                    OnBackend d(be);
                    const auto in = randn(size_t(N) * I, 4), w = randn(size_t(O) * I, 5),
                               dout = randn(size_t(N) * O, 6);
                    const auto din0 = randn(in.size(), 7), dw0 = randn(w.size(), 8);
                    float *din = d.put(din0), *dw = d.put(dw0), *din_over = d.put(randn(in.size(), 9));
                    float* dw_alone = d.put(dw0);
                    const float *in_d = d.put(in), *w_d = d.put(w), *dout_d = d.put(dout);
                    be.matmul_backward(din, dw, dout_d, in_d, w_d, N, I, O, /*accumulate_din=*/true);
                    be.matmul_backward(din_over, nullptr, dout_d, in_d, w_d, N, I, O, /*accumulate_din=*/false);
                    be.matmul_backward(nullptr, dw_alone, dout_d, in_d, w_d, N, I, O, /*accumulate_din=*/false);
                    Vec want_din, want_dw;
                    ref::matmul_backward(want_din, want_dw, round_for_gemm(be, dout), round_for_gemm(be, in),
                                         round_for_gemm(be, w), N, I, O);
                    const double tol_din = gemm_tol(be, O), tol_dw = gemm_tol(be, N);
                    const auto din_acc = d.get(din, in.size()), dw_acc = d.get(dw_alone, w.size());
                    std::vector<OpCheck> checks{near("din accumulated", din_acc, plus(din0, want_din), tol_din),
                                                near("dw accumulated", d.get(dw, w.size()), plus(dw0, want_dw), tol_dw),
                                                near("din overwritten", d.get(din_over, in.size()), want_din, tol_din),
                                                near("dw accumulated, din null", dw_acc, plus(dw0, want_dw), tol_dw)};
                    // On sums of at most 64 terms the accumulations element by element too, each within tol · (1 +
                    // |want|) (a longer sum's rounding may exceed that on a small element).
                    if (O <= 64)
                      checks.push_back(each_near("din, each element", din_acc, plus(din0, want_din), tol_din, tol_din));
                    if (N <= 64)
                      checks.push_back(each_near("dw, each element", dw_acc, plus(dw0, want_dw), tol_dw, tol_dw));
                    return checks;
                  }};
  forward.bits_vary_with_threads = backward.bits_vary_with_threads = true;
  cases.push_back(forward), cases.push_back(backward);
}

// rmsnorm_apply rebuilds the forward's output from the saved rstd: the same bits (activation recomputation). The
// backward not on rows of one element, whose output is sign(x)·w: a gradient of nearly 0, no relative bound.
inline void add_rmsnorm_cases(std::vector<OpCase>& cases, int N, int C) {
  const std::string shape = "_" + std::to_string(N) + "x" + std::to_string(C);
  const auto x = randn(size_t(N) * C, 10, 3.0f), g = randn(C, 11);
  cases.push_back(
      {"rmsnorm_forward+apply" + shape, {ModelOp::rmsnorm_forward, ModelOp::rmsnorm_apply}, [=](ModelBackend& be) {
         OnBackend d(be);
         float *out = d.put(randn(x.size(), 12)), *rstd = d.put(randn(N, 13));
         float* again = d.put(randn(x.size(), 14));
         const float *x_d = d.put(x), *g_d = d.put(g);
         be.rmsnorm_forward(out, rstd, x_d, g_d, N, C, 1e-5f);
         be.rmsnorm_apply(again, x_d, rstd, g_d, N, C);
         Vec want(x.size()), want_rstd(N), xd = to_double(x), gd = to_double(g);
         ref::rmsnorm_forward(want.data(), want_rstd.data(), xd.data(), gd.data(), N, C, 1e-5);
         const auto y = d.get(out, x.size());
         return std::vector<OpCheck>{near("out", y, want, kElemTol), near("rstd", d.get(rstd, N), want_rstd, kElemTol),
                                     same_bits("apply: the forward's bits", d.get(again, x.size()), y)};
       }});
  if (C == 1) return;
  cases.push_back(
      {"rmsnorm_backward" + shape, {ModelOp::rmsnorm_forward, ModelOp::rmsnorm_backward}, [=](ModelBackend& be) {
         OnBackend d(be);
         const auto R = randn(x.size(), 15), dx0 = randn(x.size(), 16), dg0 = randn(C, 17);
         float *out = d.put(std::vector<float>(x.size())), *rstd = d.put(std::vector<float>(N));
         float *dx = d.put(dx0), *dg = d.put(dg0);
         const float *x_d = d.put(x), *g_d = d.put(g);
         be.rmsnorm_forward(out, rstd, x_d, g_d, N, C, 1e-5f);
         be.rmsnorm_backward(dx, dg, d.put(R), x_d, g_d, rstd, N, C);
         Vec xd = to_double(x), gd = to_double(g), Rd = to_double(R);
         auto loss = [&] {
           Vec y(xd.size());
           ref::rmsnorm_forward(y.data(), nullptr, xd.data(), gd.data(), N, C, 1e-5);
           return ref::dot(y, Rd);
         };
         return std::vector<OpCheck>{grad("dx accumulated", minus(d.get(dx, x.size()), dx0), xd, loss, kGradTol),
                                     grad("dw accumulated", minus(d.get(dg, C), dg0), gd, loss, kGradTol)};
       }});
}

// RoPE on (B·T rows, heads, hd): the Hugging Face formula; rope_backward is its transpose (⟨rope(x), y⟩ =
// ⟨x, ropeᵀ(y)⟩ to 1e-6 of Σ|x·y|), its inverse (a rotation's) and the gradient of ⟨rope(x), R⟩. Finite differences
// only where the reference's cost allows (`fd`).
inline void add_rope_case(std::vector<OpCase>& cases, int B, int T, int heads, int hd, double theta, bool fd) {
  const std::string shape = "_B" + std::to_string(B) + "_T" + std::to_string(T) + "_heads" + std::to_string(heads) +
                            "_hd" + std::to_string(hd) + "_theta" + std::to_string(int(theta));
  cases.push_back({"rope_forward+backward" + shape,
                   {ModelOp::rope_forward, ModelOp::rope_backward},
                   [=](ModelBackend& be) {
    OnBackend d(be);
    const int N = B * T;
    const size_t n = size_t(N) * heads * hd;
    std::vector<float> cos(size_t(T) * hd / 2), sin(cos.size());
    rope_init_tables(cos.data(), sin.data(), T, hd, float(theta));
    const auto x = randn(n, 18), y = randn(n, 19);
    float *x_d = d.put(x), *y_d = d.put(y);
    const float *cos_d = d.put(cos), *sin_d = d.put(sin);
    be.rope_forward(x_d, cos_d, sin_d, N, T, heads, hd);
    be.rope_backward(y_d, cos_d, sin_d, N, T, heads, hd);
    const auto rx = d.get(x_d, n), ry = d.get(y_d, n);
    be.rope_backward(x_d, cos_d, sin_d, N, T, heads, hd);
    Vec want = to_double(x), xd = to_double(x), yd = to_double(y);
    ref::rope_forward(want.data(), N, T, heads, hd, theta);
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < n; ++i)
      lhs += double(rx[i]) * y[i], rhs += double(x[i]) * ry[i], scale += std::abs(double(x[i]) * y[i]);
    std::vector<OpCheck> checks{near("forward", rx, want, kElemTol),
                                {"transpose: <rope(x), y> = <x, rope^T(y)>", std::abs(lhs - rhs) / scale, 1e-6, ry},
                                near("backward(forward(x)) = x", d.get(x_d, n), xd, kElemTol)};
    auto loss = [&] {
      Vec t = xd;
      ref::rope_forward(t.data(), N, T, heads, hd, theta);
      return ref::dot(t, yd);
    };
    if (fd) checks.push_back(grad("backward: the gradient", ry, xd, loss, kGradTol, 40));
    return checks;
                   }});
}

// A forward-only model's MLP (ModelBackend::mlp_forward_only; the CPU's bf16 backend fuses it into its GEMMs'
// epilogues) against float64 down(SwiGLU(in · w_gateᵀ, in · w_upᵀ)) on the GEMMs' inputs: with bf16 GEMMs the SwiGLU
// output is rounded to bf16 too, and one that rounds the other way in fp32 than in float64 is off by 2^-8 of itself.
inline OpCase mlp_forward_only_case(int N, int C, int F) {
  OpCase c{"mlp_forward_only_" + std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(F),
           {ModelOp::matmul_forward, ModelOp::swiglu_forward},
           [=](ModelBackend& be) {
    OnBackend d(be);
    const auto in = randn(size_t(N) * C, 26), wg = randn(size_t(F) * C, 27), wu = randn(size_t(F) * C, 28);
    const auto wd = randn(size_t(C) * F, 29);
    float *out = d.put(randn(size_t(N) * C, 30)), *gate = d.put(randn(size_t(N) * F, 31));  // overwritten
    float* up = d.put(randn(size_t(N) * F, 32));
    be.mlp_forward_only(out, d.put(in), d.put(wg), d.put(wu), d.put(wd), N, C, F, gate, up);
    const Vec ind = round_for_gemm(be, in);
    Vec g(size_t(N) * F), u(g.size()), s(g.size()), want(size_t(N) * C);
    ref::matmul_forward(g.data(), ind.data(), round_for_gemm(be, wg).data(), N, C, F);
    ref::matmul_forward(u.data(), ind.data(), round_for_gemm(be, wu).data(), N, C, F);
    ref::swiglu_forward(s.data(), g.data(), u.data(), s.size());
    const Vec sd = round_for_gemm(be, std::vector<float>(s.begin(), s.end()));
    ref::matmul_forward(want.data(), sd.data(), round_for_gemm(be, wd).data(), N, F, C);
    const bool bf16 = be.gemm_precision() == GemmPrecision::bf16;
    return std::vector<OpCheck>{near("out", d.get(out, want.size()), want, bf16 ? 0x1p-8 : gemm_tol(be, C + F))};
           }};
  c.bits_vary_with_threads = true;  // OpenBLAS's, as matmul_forward's
  return c;
}

// SwiGLU, an element-wise op: the loss Σ out·R has ∂/∂gate_i = R_i·∂out_i/∂gate_i, so on a long vector each picked
// element's derivative is taken on its own (within 1e-4 of 1 + |derivative|) instead of re-running all of n.
inline void add_swiglu_cases(std::vector<OpCase>& cases, size_t n) {
  const auto gate = randn(n, 20, 4.0f), up = randn(n, 21);
  cases.push_back({"swiglu_forward_" + std::to_string(n), {ModelOp::swiglu_forward}, [=](ModelBackend& be) {
                     OnBackend d(be);
                     float* out = d.put(randn(n, 22));  // overwritten
                     be.swiglu_forward(out, d.put(gate), d.put(up), n);
                     Vec want(n), gd = to_double(gate), ud = to_double(up);
                     ref::swiglu_forward(want.data(), gd.data(), ud.data(), n);
                     return std::vector<OpCheck>{near("out", d.get(out, n), want, kElemTol)};
                   }});
  cases.push_back(
      {"swiglu_backward_" + std::to_string(n), {ModelOp::swiglu_backward}, [=](ModelBackend& be) {
         OnBackend d(be);
         const auto R = randn(n, 23);
         float *dgate = d.put(randn(n, 24)), *dup = d.put(randn(n, 25));  // overwritten
         be.swiglu_backward(dgate, dup, d.put(R), d.put(gate), d.put(up), n);
         Vec gd = to_double(gate), ud = to_double(up), Rd = to_double(R);
         const auto dg = d.get(dgate, n), du = d.get(dup, n);
         if (n < 1000) {
           auto loss = [&] {
             Vec y(n);
             ref::swiglu_forward(y.data(), gd.data(), ud.data(), n);
             return ref::dot(y, Rd);
           };
           return std::vector<OpCheck>{grad("dgate", dg, gd, loss, kGradTol), grad("dup", du, ud, loss, kGradTol)};
         }
         Vec want_g(n), want_u(n);
         for (size_t i : pick(n, 300, 3)) {
           auto f = [&](double gi) { return gi / (1 + std::exp(-gi)) * ud[i] * Rd[i]; };
           want_g[i] = (f(gd[i] + 1e-4) - f(gd[i] - 1e-4)) / 2e-4;
           want_u[i] = gd[i] / (1 + std::exp(-gd[i])) * Rd[i];
         }
         std::vector<float> dg_picked(n), du_picked(n);  // the picked elements; 0 elsewhere, as want
         for (size_t i : pick(n, 300, 3)) dg_picked[i] = dg[i], du_picked[i] = du[i];
         return std::vector<OpCheck>{each_near("dgate, each picked element", dg_picked, want_g, kGradTol, kGradTol),
                                     each_near("dup, each picked element", du_picked, want_u, kGradTol, kGradTol),
                                     {"dgate, dup", 0, 0, joined({&dg, &du})}};
       }});
}

// out = a + b, in a fresh buffer and in place (out aliasing a): one fp32 addition per element, so the bits of a + b.
inline void add_residual_case(std::vector<OpCase>& cases, size_t n) {
  OpCase c{"residual_add_" + std::to_string(n), {ModelOp::residual_add}, [=](ModelBackend& be) {
             OnBackend d(be);
             const auto a = randn(n, 32), b = randn(n, 33);
             float *out = d.put(randn(n, 34)), *acc = d.put(a);
             const float* b_d = d.put(b);
             be.residual_add(out, d.put(a), b_d, n);
             be.residual_add(acc, acc, b_d, n);
             std::vector<float> want(n);
             for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
             return std::vector<OpCheck>{same_bits("out", d.get(out, n), want),
                                         same_bits("out aliasing a", d.get(acc, n), want)};
           }};
  c.cpu_bits = true;
  cases.push_back(c);
}

// The embedding of a shard [v_begin, v_begin + Vs) of a vocabulary of V: tokens outside it give zero rows and no
// gradient; the gradient adds each dout row at its token, per column in token order, so its bits are those of that
// float sum (the CPU's definition, which the device repeats).
inline void add_embedding_cases(std::vector<OpCase>& cases, int N, int C, int V, int v_begin, int Vs) {
  const std::string shape = "_N" + std::to_string(N) + "_C" + std::to_string(C) + "_rows" + std::to_string(v_begin) +
                            "-" + std::to_string(v_begin + Vs) + "_of" + std::to_string(V);
  std::vector<int> tokens(N);
  Rng rng(90);
  for (int& t : tokens) t = int(rng.below(uint32_t(V)));  // repeats for N > V
  const auto table = randn(size_t(Vs) * C, 28);
  const auto in_shard = [=](int n) { return tokens[n] >= v_begin && tokens[n] < v_begin + Vs; };
  OpCase forward{"embedding_forward" + shape, {ModelOp::embedding_forward}, [=](ModelBackend& be) {
                   OnBackend d(be);
                   float* out = d.put(randn(size_t(N) * C, 29));  // overwritten
                   be.embedding_forward(out, d.put(tokens), d.put(table), N, C, v_begin, Vs);
                   std::vector<float> want(size_t(N) * C, 0.0f);
                   for (int n = 0; n < N; ++n)
                     for (int c = 0; c < C && in_shard(n); ++c)
                       want[size_t(n) * C + c] = table[size_t(tokens[n] - v_begin) * C + c];
                   return std::vector<OpCheck>{same_bits("out", d.get(out, want.size()), want)};
                 }};
  OpCase backward{"embedding_backward" + shape, {ModelOp::embedding_backward}, [=](ModelBackend& be) {
                    OnBackend d(be);
                    const auto dout = randn(size_t(N) * C, 30), dtable0 = randn(table.size(), 31);
                    float* dtable = d.put(dtable0);
                    be.embedding_backward(dtable, d.put(dout), d.put(tokens), N, C, v_begin, Vs);
                    std::vector<float> want = dtable0;
                    for (int n = 0; n < N; ++n)
                      for (int c = 0; c < C && in_shard(n); ++c)
                        want[size_t(tokens[n] - v_begin) * C + c] += dout[size_t(n) * C + c];
                    return std::vector<OpCheck>{same_bits("dtable accumulated", d.get(dtable, table.size()), want)};
                  }};
  forward.cpu_bits = backward.cpu_bits = true;
  cases.push_back(forward), cases.push_back(backward);
}

}  // namespace agoq::op_cases_detail

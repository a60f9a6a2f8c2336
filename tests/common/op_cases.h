// One table of cases for the ops of model/op_table.h, run through any ModelBackend against the float64 references
// (op_reference.h) and finite differences (op_check.h), as ggml's test-backend-ops does: inputs are made on the host,
// uploaded, the op runs on the backend, outputs come back and are compared. Outputs that accumulate start from
// random values and those that overwrite from garbage, so each op's overwrite / accumulate rule (model/ops.h) is
// checked too. tests/model runs the table on the CPU backend, the timed one and the device-like one; tests/cuda_train
// on the CUDA backend (skipped without a GPU). Every op of the table has a case: OpTable.EveryOpHasACase says so.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/ops.h"
#include "quant/half.h"
#include "tests/common/op_check.h"

namespace agoq {

// One compared output: its name, its normwise relative error and the bound.
struct OpCheck {
  std::string what;
  double err, tol;
};

struct OpCase {
  std::string name;
  std::vector<ModelOp> ops;  // the ops the case calls
  std::function<std::vector<OpCheck>(ModelBackend&)> run;
};

// Host arrays in a backend's memory, alive while this is.
class OnBackend {
 public:
  explicit OnBackend(ModelBackend& be) : be_(be) {}
  float* put(const std::vector<float>& h) {
    floats_.push_back(be_.buffer<float>(h.size(), MemCategory::workspace, "test"));
    be_.upload(floats_.back().data(), h.data(), h.size() * sizeof(float));
    return floats_.back().data();
  }
  int* put(const std::vector<int>& h) {
    ints_.push_back(be_.buffer<int>(h.size(), MemCategory::workspace, "test"));
    be_.upload(ints_.back().data(), h.data(), h.size() * sizeof(int));
    return ints_.back().data();
  }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    be_.download(h.data(), d, n * sizeof(float));
    return h;
  }

 private:
  ModelBackend& be_;
  std::vector<BackendBuffer<float>> floats_;
  std::vector<BackendBuffer<int>> ints_;
};

namespace op_cases_detail {

constexpr double kFwdTol = 1e-5, kGradTol = 1e-4;

inline std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}
inline Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec s(b.size());
  for (size_t i = 0; i < b.size(); ++i) s[i] = double(a[i]) + b[i];
  return s;
}

// din = dout · w, dw = doutᵀ · in (double).
inline void matmul_grads(Vec& din, Vec& dw, const Vec& dout, const Vec& in, const Vec& w, int N, int I, int O) {
  din.assign(size_t(N) * I, 0), dw.assign(size_t(O) * I, 0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < I; ++i) {
        din[size_t(n) * I + i] += dout[size_t(n) * O + o] * w[size_t(o) * I + i];
        dw[size_t(o) * I + i] += dout[size_t(n) * O + o] * in[size_t(n) * I + i];
      }
}

// Softmax cross-entropy of the whole vocabulary in double: losses and dloss_scale · (softmax − onehot).
inline void crossentropy_ref(Vec& losses, Vec& dlogits, const std::vector<float>& z, const std::vector<int>& t, int N,
                             int V, double scale) {
  const Vec zd = to_double(z);
  losses.assign(N, 0), dlogits.assign(zd.size(), 0);
  ref::crossentropy_forward(losses.data(), zd.data(), t.data(), N, V);
  for (int n = 0; n < N; ++n) {
    if (t[n] < 0) continue;
    double m = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, zd[size_t(n) * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(zd[size_t(n) * V + v] - m);
    for (int v = 0; v < V; ++v)
      dlogits[size_t(n) * V + v] = scale * (std::exp(zd[size_t(n) * V + v] - m) / sum - (v == t[n] ? 1.0 : 0.0));
  }
}

// A GEMM's input as the backend reads it: itself, or rounded to bf16 (nearest even) on a bf16 backend.
inline Vec round_for_gemm(const ModelBackend& be, const std::vector<float>& x) {
  Vec d = to_double(x);
  if (be.gemm_precision() == GemmPrecision::bf16)
    for (double& v : d) v = bf16_to_f32(f32_to_bf16(float(v)));
  return d;
}

// The tolerance of a product of sums of `k` terms against the float64 one of the same inputs: fp32 accumulation,
// at most k roundings of 2^-24 each (normwise, with margin for cancellation), and never below the fp32 ops' kFwdTol.
inline double gemm_tol(const ModelBackend& be, int k) {
  return be.gemm_precision() == GemmPrecision::bf16 ? std::max(kFwdTol, 4.0 * k * std::ldexp(1.0, -24)) : kFwdTol;
}

// Attention's bounds: fp32's, or on a bf16 backend (reference on the bf16-rounded inputs) the rounding of P and dS
// where a product reads them, 2^-9 relative each, with margin 4 (tests/model/test_ops.cpp's OpsAttentionBf16 holds
// the CPU's to tighter ones where it can: lse).
inline double attention_tol(const ModelBackend& be, bool grad) {
  if (be.gemm_precision() != GemmPrecision::bf16) return grad ? kGradTol : kFwdTol;
  return grad ? 0x1p-6 : 0x1p-7;
}

}  // namespace op_cases_detail

inline std::vector<OpCase> op_cases() {
  using namespace op_cases_detail;
  std::vector<OpCase> cases;
  const int N = 6, I = 7, O = 5, C = 12;

  // A bf16 backend's products are checked against the float64 product of the same bf16-rounded inputs, within the
  // fp32 accumulation's bound for the sum's length (round_for_gemm, gemm_tol).
  struct GemmShape {
    const char* tag;
    int N, I, O;
  };
  for (const GemmShape shape : {GemmShape{"", N, I, O}, GemmShape{"_large", 67, 96, 80}}) {
    const char* tag = shape.tag;
    const int N = shape.N, I = shape.I, O = shape.O;  // (the small shape's are the outer ones)
    const auto case_matmul_forward = [=](ModelBackend& be) {
      OnBackend d(be);
      const auto in = randn(size_t(N) * I, 1), w = randn(size_t(O) * I, 2);
      float* out = d.put(randn(size_t(N) * O, 3));  // overwritten
      be.matmul_forward(out, d.put(in), d.put(w), N, I, O);
      Vec want(size_t(N) * O), ind = round_for_gemm(be, in), wd = round_for_gemm(be, w);
      ref::matmul_forward(want.data(), ind.data(), wd.data(), N, I, O);
      return std::vector<OpCheck>{{"out", rel_err(d.get(out, want.size()), want), gemm_tol(be, I)}};
    };
    cases.push_back({std::string("matmul_forward") + tag, {ModelOp::matmul_forward}, case_matmul_forward});

    const auto case_matmul_backward = [=](ModelBackend& be) {
      OnBackend d(be);
      const auto in = randn(size_t(N) * I, 4), w = randn(size_t(O) * I, 5), dout = randn(size_t(N) * O, 6);
      const auto din0 = randn(in.size(), 7), dw0 = randn(w.size(), 8);
      float *din = d.put(din0), *dw = d.put(dw0), *din_over = d.put(randn(in.size(), 9));
      const float *in_d = d.put(in), *w_d = d.put(w), *dout_d = d.put(dout);
      be.matmul_backward(din, dw, dout_d, in_d, w_d, N, I, O, /*accumulate_din=*/true);
      be.matmul_backward(din_over, nullptr, dout_d, in_d, w_d, N, I, O, /*accumulate_din=*/false);
      Vec want_din, want_dw;
      matmul_grads(want_din, want_dw, round_for_gemm(be, dout), round_for_gemm(be, in), round_for_gemm(be, w), N, I, O);
      const double tol_din = gemm_tol(be, O), tol_dw = gemm_tol(be, N);
      return std::vector<OpCheck>{{"din accumulated", rel_err(d.get(din, in.size()), plus(din0, want_din)), tol_din},
                                  {"dw accumulated", rel_err(d.get(dw, w.size()), plus(dw0, want_dw)), tol_dw},
                                  {"din overwritten", rel_err(d.get(din_over, in.size()), want_din), tol_din}};
    };
    cases.push_back({std::string("matmul_backward") + tag, {ModelOp::matmul_backward}, case_matmul_backward});
  }

  const auto x = randn(size_t(N) * C, 10, 3.0f), g = randn(C, 11);
  const auto case_rmsnorm_forward_apply = [=](ModelBackend& be) {
    OnBackend d(be);
    float *out = d.put(randn(x.size(), 12)), *rstd = d.put(randn(N, 13)), *again = d.put(randn(x.size(), 14));
    const float *x_d = d.put(x), *g_d = d.put(g);
    be.rmsnorm_forward(out, rstd, x_d, g_d, N, C, 1e-5f);
    be.rmsnorm_apply(again, x_d, rstd, g_d, N, C);
    Vec want(x.size()), want_rstd(N), xd = to_double(x), gd = to_double(g);
    ref::rmsnorm_forward(want.data(), want_rstd.data(), xd.data(), gd.data(), N, C, 1e-5);
    return std::vector<OpCheck>{{"out", rel_err(d.get(out, x.size()), want), kFwdTol},
                                {"rstd", rel_err(d.get(rstd, N), want_rstd), kFwdTol},
                                {"apply", rel_err(d.get(again, x.size()), want), kFwdTol}};
  };
  cases.push_back(
      {"rmsnorm_forward+apply", {ModelOp::rmsnorm_forward, ModelOp::rmsnorm_apply}, case_rmsnorm_forward_apply});

  const auto case_rmsnorm_backward = [=](ModelBackend& be) {
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
    const auto gx = minus(d.get(dx, x.size()), dx0), gg = minus(d.get(dg, C), dg0);
    return std::vector<OpCheck>{{"dx accumulated", fd_err(gx.data(), xd, loss), kGradTol},
                                {"dw accumulated", fd_err(gg.data(), gd, loss), kGradTol}};
  };
  cases.push_back({"rmsnorm_backward", {ModelOp::rmsnorm_forward, ModelOp::rmsnorm_backward}, case_rmsnorm_backward});

  const int T = 3, heads = 2, hd = 6;  // rope rows: N = 2 sequences of T
  const auto case_rope_forward_backward = [=](ModelBackend& be) {
    OnBackend d(be);
    const size_t n = size_t(N) * heads * hd;
    std::vector<float> cos(size_t(T) * hd / 2), sin(cos.size());
    rope_init_tables(cos.data(), sin.data(), T, hd, 10000.0f);
    const auto q = randn(n, 18), R = randn(n, 19);
    float *q_d = d.put(q), *r_d = d.put(R);
    const float *cos_d = d.put(cos), *sin_d = d.put(sin);
    be.rope_forward(q_d, cos_d, sin_d, N, T, heads, hd);
    be.rope_backward(r_d, cos_d, sin_d, N, T, heads, hd);
    Vec want = to_double(q), qd = to_double(q), Rd = to_double(R);
    ref::rope_forward(want.data(), N, T, heads, hd, 10000.0);
    auto loss = [&] {  // rope_backward is the transpose: the gradient of <rope(q), R>
      Vec y = qd;
      ref::rope_forward(y.data(), N, T, heads, hd, 10000.0);
      return ref::dot(y, Rd);
    };
    const auto back = d.get(r_d, n);
    return std::vector<OpCheck>{{"forward", rel_err(d.get(q_d, n), want), kFwdTol},
                                {"backward", fd_err(back.data(), qd, loss), kGradTol}};
  };
  cases.push_back(
      {"rope_forward+backward", {ModelOp::rope_forward, ModelOp::rope_backward}, case_rope_forward_backward});

  const size_t nf = 40;
  const auto gate = randn(nf, 20, 3.0f), up = randn(nf, 21);
  const auto case_swiglu_forward = [=](ModelBackend& be) {
    OnBackend d(be);
    float* out = d.put(randn(nf, 22));
    be.swiglu_forward(out, d.put(gate), d.put(up), nf);
    Vec want(nf), gd = to_double(gate), ud = to_double(up);
    ref::swiglu_forward(want.data(), gd.data(), ud.data(), nf);
    return std::vector<OpCheck>{{"out", rel_err(d.get(out, nf), want), kFwdTol}};
  };
  cases.push_back({"swiglu_forward", {ModelOp::swiglu_forward}, case_swiglu_forward});

  const auto case_swiglu_backward = [=](ModelBackend& be) {
    OnBackend d(be);
    const auto R = randn(nf, 23);
    float *dgate = d.put(randn(nf, 24)), *dup = d.put(randn(nf, 25));  // overwritten
    be.swiglu_backward(dgate, dup, d.put(R), d.put(gate), d.put(up), nf);
    Vec gd = to_double(gate), ud = to_double(up), Rd = to_double(R);
    auto loss = [&] {
      Vec y(nf);
      ref::swiglu_forward(y.data(), gd.data(), ud.data(), nf);
      return ref::dot(y, Rd);
    };
    const auto dg = d.get(dgate, nf), du = d.get(dup, nf);
    return std::vector<OpCheck>{{"dgate", fd_err(dg.data(), gd, loss), kGradTol},
                                {"dup", fd_err(du.data(), ud, loss), kGradTol}};
  };
  cases.push_back({"swiglu_backward", {ModelOp::swiglu_backward}, case_swiglu_backward});

  const int V = 10;
  const auto z = randn(size_t(N) * V, 26, 2.0f);
  const std::vector<int> targets = {3, -1, 0, 9, 5, 5};
  const auto case_crossentropy_forward_backward = [=](ModelBackend& be) {
    OnBackend d(be);
    float *logits = d.put(z), *losses = d.put(randn(N, 27)), *stats = d.put(std::vector<float>(3 * N));
    be.crossentropy_forward_backward(logits, losses, d.put(targets), N, V, 0.25f, stats);
    Vec want_loss, want_dz;
    crossentropy_ref(want_loss, want_dz, z, targets, N, V, 0.25);
    return std::vector<OpCheck>{{"losses", rel_err(d.get(losses, N), want_loss), kFwdTol},
                                {"dlogits", rel_err(d.get(logits, z.size()), want_dz), kFwdTol}};
  };
  cases.push_back(
      {"crossentropy_forward_backward", {ModelOp::crossentropy_forward_backward}, case_crossentropy_forward_backward});

  // The vocabulary in two shards [0, 4) and [4, 10), with the reductions between the phases done here.
  const auto case_crossentropy_shards = [=](ModelBackend& be) {
    OnBackend d(be);
    const int bounds[3] = {0, 4, V};
    std::vector<float*> shard(2), row_max(2), sums(2), losses(2);
    const int* t_d = d.put(targets);
    for (int s = 0; s < 2; ++s) {
      std::vector<float> part;
      for (int n = 0; n < N; ++n)
        part.insert(part.end(), z.begin() + n * V + bounds[s], z.begin() + n * V + bounds[s + 1]);
      shard[s] = d.put(part), row_max[s] = d.put(std::vector<float>(N)), sums[s] = d.put(std::vector<float>(2 * N));
      losses[s] = d.put(std::vector<float>(N));
      be.crossentropy_shard_max(shard[s], N, bounds[s + 1] - bounds[s], row_max[s]);
    }
    std::vector<float> m0 = d.get(row_max[0], N), m1 = d.get(row_max[1], N);
    for (int n = 0; n < N; ++n) m0[n] = std::max(m0[n], m1[n]);
    std::vector<float> total(2 * N, 0.0f);
    for (int s = 0; s < 2; ++s) {
      be.upload(row_max[s], m0.data(), N * sizeof(float));
      be.crossentropy_shard_exp(shard[s], t_d, N, bounds[s + 1] - bounds[s], bounds[s], row_max[s], sums[s]);
      const auto part = d.get(sums[s], 2 * N);
      for (int i = 0; i < 2 * N; ++i) total[i] += part[i];
    }
    std::vector<float> got_dz(z.size());
    for (int s = 0; s < 2; ++s) {
      const int Vs = bounds[s + 1] - bounds[s];
      be.upload(sums[s], total.data(), 2 * N * sizeof(float));
      be.crossentropy_shard_finish(shard[s], losses[s], t_d, N, Vs, bounds[s], row_max[s], sums[s], 0.25f);
      const auto part = d.get(shard[s], size_t(N) * Vs);
      for (int n = 0; n < N; ++n)
        std::copy(part.begin() + n * Vs, part.begin() + (n + 1) * Vs, got_dz.begin() + n * V + bounds[s]);
    }
    Vec want_loss, want_dz;
    crossentropy_ref(want_loss, want_dz, z, targets, N, V, 0.25);
    return std::vector<OpCheck>{{"losses", rel_err(d.get(losses[0], N), want_loss), kFwdTol},
                                {"dlogits", rel_err(got_dz, want_dz), kFwdTol}};
  };
  cases.push_back(
      {"crossentropy_shards",
       {ModelOp::crossentropy_shard_max, ModelOp::crossentropy_shard_exp, ModelOp::crossentropy_shard_finish},
       case_crossentropy_shards});

  // A shard of rows [2, 7) of a vocabulary of 9: tokens outside it give zero rows and no gradient.
  const int v_begin = 2, Vs = 5;
  const std::vector<int> tokens = {2, 8, 4, 4, 0, 6};
  const auto table = randn(size_t(Vs) * C, 28);
  const auto case_embedding_forward = [=](ModelBackend& be) {
    OnBackend d(be);
    float* out = d.put(randn(size_t(N) * C, 29));
    be.embedding_forward(out, d.put(tokens), d.put(table), N, C, v_begin, Vs);
    Vec want(size_t(N) * C, 0.0);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C && tokens[n] >= v_begin && tokens[n] < v_begin + Vs; ++c)
        want[size_t(n) * C + c] = table[size_t(tokens[n] - v_begin) * C + c];
    return std::vector<OpCheck>{{"out", rel_err(d.get(out, want.size()), want), 0.0}};
  };
  cases.push_back({"embedding_forward", {ModelOp::embedding_forward}, case_embedding_forward});

  const auto case_embedding_backward = [=](ModelBackend& be) {
    OnBackend d(be);
    const auto dout = randn(size_t(N) * C, 30), dtable0 = randn(table.size(), 31);
    float* dtable = d.put(dtable0);
    be.embedding_backward(dtable, d.put(dout), d.put(tokens), N, C, v_begin, Vs);
    Vec want = to_double(dtable0);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C && tokens[n] >= v_begin && tokens[n] < v_begin + Vs; ++c)
        want[size_t(tokens[n] - v_begin) * C + c] += dout[size_t(n) * C + c];
    return std::vector<OpCheck>{{"dtable accumulated", rel_err(d.get(dtable, table.size()), want), kFwdTol}};
  };
  cases.push_back({"embedding_backward", {ModelOp::embedding_backward}, case_embedding_backward});

  const auto case_residual_add = [=](ModelBackend& be) {
    OnBackend d(be);
    const auto a = randn(nf, 32), b = randn(nf, 33);
    float* out = d.put(randn(nf, 34));
    be.residual_add(out, d.put(a), d.put(b), nf);
    Vec want(nf);
    for (size_t i = 0; i < nf; ++i) want[i] = double(a[i]) + double(b[i]);
    return std::vector<OpCheck>{{"out", rel_err(d.get(out, nf), want), kFwdTol}};
  };
  cases.push_back({"residual_add", {ModelOp::residual_add}, case_residual_add});

  // Attention over a tile boundary (T > kAttentionTile), grouped-query heads, packed documents.
  const int B = 2, Ta = kAttentionTile + 6, H = 4, Hkv = 2, ahd = 8;
  const size_t nq = size_t(B) * Ta * H * ahd, nk = size_t(B) * Ta * Hkv * ahd;
  const auto q = randn(nq, 35), k = randn(nk, 36), v = randn(nk, 37);
  const std::vector<int32_t> docs = doc_starts_random(B, Ta, 38);
  const auto case_attention_forward = [=](ModelBackend& be) {
    OnBackend d(be);
    float *o = d.put(randn(nq, 39)), *lse = d.put(randn(size_t(B) * H * Ta, 40));
    be.attention_forward(o, lse, d.put(q), d.put(k), d.put(v), B, Ta, H, Hkv, ahd, d.put(docs));
    Vec want(nq), want_lse(size_t(B) * H * Ta), qd = round_for_gemm(be, q), kd = round_for_gemm(be, k);
    const Vec vd = round_for_gemm(be, v);
    ref::attention_forward(want.data(), want_lse.data(), qd.data(), kd.data(), vd.data(), B, Ta, H, Hkv, ahd,
                           docs.data());
    return std::vector<OpCheck>{{"o", rel_err(d.get(o, nq), want), attention_tol(be, false)},
                                {"lse", rel_err(d.get(lse, want_lse.size()), want_lse), attention_tol(be, false)}};
  };
  cases.push_back({"attention_forward", {ModelOp::attention_forward}, case_attention_forward});

  const auto case_attention_backward = [=](ModelBackend& be) {
    OnBackend d(be);
    const auto R = randn(nq, 41);
    float *o = d.put(std::vector<float>(nq)), *lse = d.put(std::vector<float>(size_t(B) * H * Ta));
    float *dq = d.put(randn(nq, 42)), *dk = d.put(randn(nk, 43)), *dv = d.put(randn(nk, 44));  // overwritten
    const float *q_d = d.put(q), *k_d = d.put(k), *v_d = d.put(v);
    const int32_t* docs_d = d.put(docs);
    be.attention_forward(o, lse, q_d, k_d, v_d, B, Ta, H, Hkv, ahd, docs_d);
    be.attention_backward(dq, dk, dv, d.put(R), q_d, k_d, v_d, o, lse, B, Ta, H, Hkv, ahd, docs_d);
    Vec qd = round_for_gemm(be, q), kd = round_for_gemm(be, k), vd = round_for_gemm(be, v), Rd = round_for_gemm(be, R);
    auto loss = [&] {
      Vec y(nq), l(size_t(B) * H * Ta);
      ref::attention_forward(y.data(), l.data(), qd.data(), kd.data(), vd.data(), B, Ta, H, Hkv, ahd, docs.data());
      return ref::dot(y, Rd);
    };
    const auto gq = d.get(dq, nq), gk = d.get(dk, nk), gv = d.get(dv, nk);
    const double tol = attention_tol(be, true);
    return std::vector<OpCheck>{{"dq", fd_err(gq.data(), qd, loss, 20), tol},
                                {"dk", fd_err(gk.data(), kd, loss, 20), tol},
                                {"dv", fd_err(gv.data(), vd, loss, 20), tol}};
  };
  cases.push_back(
      {"attention_backward", {ModelOp::attention_forward, ModelOp::attention_backward}, case_attention_backward});
  return cases;
}

}  // namespace agoq

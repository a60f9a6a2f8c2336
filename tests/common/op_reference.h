// Float64 reference forwards of the ops in model/ops.h, written as plainly as possible (the naive definition, no
// tiling, full T×T softmax), for the op tests and their finite differences.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace agoq::ref {

using Vec = std::vector<double>;

// out (N, out_dim) = in (N, in_dim) · wᵀ, w (out_dim, in_dim).
inline void matmul_forward(double* out, const double* in, const double* w, int N, int in_dim, int out_dim) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < out_dim; ++o) {
      double s = 0;
      for (int i = 0; i < in_dim; ++i) s += in[n * in_dim + i] * w[o * in_dim + i];
      out[n * out_dim + o] = s;
    }
}

// Its gradients: din = dout · w, dw = doutᵀ · in.
inline void matmul_backward(Vec& din, Vec& dw, const Vec& dout, const Vec& in, const Vec& w, int N, int in_dim,
                            int out_dim) {
  din.assign(size_t(N) * in_dim, 0), dw.assign(size_t(out_dim) * in_dim, 0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < out_dim; ++o)
      for (int i = 0; i < in_dim; ++i) {
        din[size_t(n) * in_dim + i] += dout[size_t(n) * out_dim + o] * w[size_t(o) * in_dim + i];
        dw[size_t(o) * in_dim + i] += dout[size_t(n) * out_dim + o] * in[size_t(n) * in_dim + i];
      }
}

// out = x / sqrt(mean(x²) + eps) · w; rstd (N) optional.
inline void rmsnorm_forward(double* out, double* rstd, const double* x, const double* w, int N, int C, double eps) {
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    if (rstd) rstd[n] = r;
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * r * w[c];
  }
}

// Hugging Face apply_rotary_pos_emb: out = x·cos + rotate_half(x)·sin, rotate_half(x) = cat(−x[hd/2:], x[:hd/2]),
// with cos, sin of the angle pos·theta^(−2i/hd) repeated over both halves (emb = cat(freqs, freqs)).
inline void rope_forward(double* x, int N, int T, int n_heads, int hd, double theta) {
  const int half = hd / 2;
  std::vector<double> head(hd), rot(hd);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < n_heads; ++h) {
      double* xh = x + (n * n_heads + h) * hd;
      for (int i = 0; i < hd; ++i) head[i] = xh[i];
      for (int i = 0; i < hd; ++i) rot[i] = i < half ? -head[i + half] : head[i - half];
      for (int i = 0; i < hd; ++i) {
        const double angle = (n % T) * std::pow(theta, -2.0 * (i % half) / hd);
        xh[i] = head[i] * std::cos(angle) + rot[i] * std::sin(angle);
      }
    }
}

// Causal attention with the full softmax: q (B,T,H,hd), k, v (B,T,Hkv,hd) -> o (B,T,H,hd), lse (B,H,T). With
// doc_start (B,T), query i sees keys doc_start_i .. i only (document masking); with gaps (B,T,2), not those in
// [gaps_2i, gaps_2i+1).
inline void attention_forward(double* o, double* lse, const double* q, const double* k, const double* v, int B, int T,
                              int H, int Hkv, int hd, const int32_t* doc_start = nullptr,
                              const int32_t* gaps = nullptr) {
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> s(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / Hkv);
      for (int i = 0; i < T; ++i) {
        const double* qi = q + ((b * T + i) * H + h) * hd;
        const int j0 = doc_start ? doc_start[b * T + i] : 0;
        const int g0 = gaps ? gaps[2 * (b * T + i)] : 0, g1 = gaps ? gaps[2 * (b * T + i) + 1] : 0;
        const auto seen = [&](int j) { return j < g0 || j >= g1; };
        double m = -std::numeric_limits<double>::infinity();
        for (int j = j0; j <= i; ++j) {
          if (!seen(j)) continue;
          const double* kj = k + ((b * T + j) * Hkv + g) * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += qi[d] * kj[d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = j0; j <= i; ++j) sum += seen(j) ? std::exp(s[j] - m) : 0.0;
        if (lse) lse[(b * H + h) * T + i] = m + std::log(sum);
        double* oi = o + ((b * T + i) * H + h) * hd;
        for (int d = 0; d < hd; ++d) oi[d] = 0;
        for (int j = j0; j <= i; ++j) {
          if (!seen(j)) continue;
          const double p = std::exp(s[j] - m) / sum;
          const double* vj = v + ((b * T + j) * Hkv + g) * hd;
          for (int d = 0; d < hd; ++d) oi[d] += p * vj[d];
        }
      }
    }
}

inline void swiglu_forward(double* out, const double* gate, const double* up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
}

// losses (N) = −log_softmax(logits_n)[target_n]; 0 for target < 0.
inline void crossentropy_forward(double* losses, const double* logits, const int* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const double* z = logits + size_t(n) * V;
    if (targets[n] < 0) {
      losses[n] = 0;
      continue;
    }
    const double m = *std::max_element(z, z + V);
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(z[v] - m);
    losses[n] = -(z[targets[n]] - m - std::log(sum));
  }
}

inline void embedding_forward(double* out, const int* tokens, const double* table, int N, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[n * C + c] = table[tokens[n] * C + c];
}

// Central finite difference of loss() with respect to x[i] (x is restored).
template <class Loss>
double finite_diff(Vec& x, size_t i, Loss&& loss, double h = 1e-4) {
  const double x0 = x[i];
  x[i] = x0 + h;
  const double up = loss();
  x[i] = x0 - h;
  const double down = loss();
  x[i] = x0;
  return (up - down) / (2 * h);
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace agoq::ref

// Element-wise, row-wise and matmul ops (see ops.h); the flash attention is in attention.cpp.
#include "model/ops.h"
#include "model/ops_simd.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "opmath/op_math.h"

namespace agoq {
namespace {

// Below this many elements an op runs on the calling thread: waking the team costs more than it saves.
constexpr size_t kParallelElems = size_t(1) << 15;
// Column block of the column-parallel weight-gradient reductions (rmsnorm dw, embedding dtable).
constexpr int kColBlock = 64;

// ---- row reductions (fixed summation order: 8 lanes, then the lanes, then the tail) ---------------------------

float row_dot(const float* a, const float* b, int n) {
  int i = 0;
  float s = 0.0f;
#if AGOQ_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  s = simd::hsum8(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// Σ a·b·w over the row.
float row_dot3(const float* a, const float* b, const float* w, int n) {
  int i = 0;
  float s = 0.0f;
#if AGOQ_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(w + i)), _mm256_loadu_ps(b + i), acc);
  s = simd::hsum8(acc);
#endif
  for (; i < n; ++i) s = std::fma(a[i] * w[i], b[i], s);
  return s;
}

float row_max_of(const float* a, int n) {
  int i = 0;
  float m = -INFINITY;
#if AGOQ_AVX2
  if (n >= 8) {
    __m256 acc = _mm256_loadu_ps(a);
    for (i = 8; i + 8 <= n; i += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(a + i));
    m = simd::hmax8(acc);
  }
#endif
  for (; i < n; ++i) m = std::max(m, a[i]);
  return m;
}

// a[i] = exp(a[i] − shift); returns Σ a[i].
float row_exp_sum(float* a, float shift, int n) {
  int i = 0;
  float s = 0.0f;
#if AGOQ_AVX2
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(a + i), vs));
    _mm256_storeu_ps(a + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  s = simd::hsum8(acc);
#endif
  for (; i < n; ++i) {
    a[i] = op_exp(a[i] - shift);
    s += a[i];
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// matmul

void matmul_forward(float* out, const float* in, const float* w, int N, int in_dim, int out_dim) {
  // out (N, out) = in (N, in) · wᵀ (in, out)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim, 0.0f, out,
              out_dim);
}

void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int N, int in_dim,
                     int out_dim, bool accumulate_din) {
  // din (N, in) = dout (N, out) · w (out, in)
  if (din)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim,
                accumulate_din ? 1.0f : 0.0f, din, in_dim);
  // dw (out, in) += doutᵀ (out, N) · in (N, in)
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, N, 1.0f, dout, out_dim, in, in_dim, 1.0f, dw,
                in_dim);
}

// ---------------------------------------------------------------------------------------------------------------
// rmsnorm

namespace {
// out_c = x_c · rstd · w_c over one row: the norm's output, in forward and when backward rebuilds it.
inline void rmsnorm_row_apply(float* out, const float* x, float rstd, const float* w, int C) {
  for (int c = 0; c < C; ++c) out[c] = rmsnorm_value(x[c], rstd, w[c]);
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelElems)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + size_t(n) * C;
    rstd[n] = rmsnorm_rstd(row_dot(xr, xr, C), C, eps);
    rmsnorm_row_apply(out + size_t(n) * C, xr, rstd[n], w, C);
  }
}

void rmsnorm_apply(float* out, const float* x, const float* rstd, const float* w, int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelElems)
  for (int n = 0; n < N; ++n) rmsnorm_row_apply(out + size_t(n) * C, x + size_t(n) * C, rstd[n], w, C);
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                      int C) {
  const bool parallel = size_t(N) * C > kParallelElems;
  // dx_c += rstd · (dout_c·w_c − x_c·rstd² · mean(dout·w·x))
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + size_t(n) * C;
    const float* doutr = dout + size_t(n) * C;
    float* dxr = dx + size_t(n) * C;
    const float r = rstd[n];
    const float k = rmsnorm_dx_coeff(r, row_dot3(doutr, xr, w, C), C);
    for (int c = 0; c < C; ++c) dxr[c] += rmsnorm_dx_value(doutr[c], w[c], xr[c], r, k);
  }
  // dw_c += Σ_n dout_nc · x_nc · rstd_n, parallel over column blocks, rows summed in order.
  const int n_blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kColBlock, nc = std::min(kColBlock, C - c0);
    float acc[kColBlock] = {};
    for (int n = 0; n < N; ++n) {
      const float* xr = x + size_t(n) * C + c0;
      const float* doutr = dout + size_t(n) * C + c0;
      const float r = rstd[n];
      for (int c = 0; c < nc; ++c) acc[c] += rmsnorm_dw_term(doutr[c], xr[c], r);
    }
    for (int c = 0; c < nc; ++c) dw[c0 + c] += acc[c];
  }
}

// ---------------------------------------------------------------------------------------------------------------
// rope

void rope_init_tables(float* cos, float* sin, int T, int hd, float theta) {
  AGOQ_CHECK(hd % 2 == 0, "rope: head_dim ", hd, " is odd");
  std::vector<double> inv_freqs(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freqs[i] = std::pow(double(theta), -2.0 * i / hd);
  rope_init_tables(cos, sin, T, inv_freqs);
}

void rope_init_tables(float* cos, float* sin, int T, const std::vector<double>& inv_freqs) {
  const size_t half = inv_freqs.size();
  for (int t = 0; t < T; ++t)
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(t) * inv_freqs[i];
      cos[size_t(t) * half + i] = float(std::cos(angle));
      sin[size_t(t) * half + i] = float(std::sin(angle));
    }
}

namespace {
// Rotates every head of every row by +angle (sign = 1) or −angle (sign = −1, the transpose).
void rope_rotate(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd, float sign) {
  AGOQ_CHECK(hd % 2 == 0, "rope: head_dim ", hd, " is odd");
  const int half = hd / 2;
#pragma omp parallel for schedule(static) if (size_t(N) * n_heads * hd > kParallelElems)
  for (int n = 0; n < N; ++n) {
    const float* cr = cos + size_t(n % T) * half;
    const float* sr = sin + size_t(n % T) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* x1 = x + (size_t(n) * n_heads + h) * hd;
      float* x2 = x1 + half;
      for (int i = 0; i < half; ++i) {
        const RopePair r = rope_rotate_pair(x1[i], x2[i], cr[i], sign * sr[i]);
        x1[i] = r.a, x2[i] = r.b;
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  rope_rotate(x, cos, sin, N, T, n_heads, hd, 1.0f);
}

void rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd) {
  rope_rotate(dx, cos, sin, N, T, n_heads, hd, -1.0f);
}

// ---------------------------------------------------------------------------------------------------------------
// swiglu: out = g·σ(g)·u;  dg = dout·u·σ(g)·(1 + g·(1 − σ(g))),  du = dout·g·σ(g).

namespace {
// body(begin, end) over [0, n) in chunks of 4096 elements, the chunks in parallel when n is large.
template <class Body>
void for_each_chunk(size_t n, const Body& body) {
  constexpr size_t kChunk = 4096;
  const size_t n_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (size_t ch = 0; ch < n_chunks; ++ch) body(ch * kChunk, std::min(n, ch * kChunk + kChunk));
}

#if AGOQ_AVX2
inline __m256 sigmoid8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, simd::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}
#endif
}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  for_each_chunk(n, [&](size_t i, size_t end) {
#if AGOQ_AVX2
    for (; i + 8 <= end; i += 8) {
      const __m256 g = _mm256_loadu_ps(gate + i);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < end; ++i) out[i] = swiglu_value(gate[i], up[i]);
  });
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
  for_each_chunk(n, [&](size_t i, size_t end) {
#if AGOQ_AVX2
    for (; i + 8 <= end; i += 8) {
      const __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i), d = _mm256_loadu_ps(dout + i);
      const __m256 sig = sigmoid8(g), silu = _mm256_mul_ps(g, sig);
      // dsilu = σ + g·σ·(1 − σ) = σ + silu − silu·σ
      const __m256 dsilu = _mm256_fnmadd_ps(silu, sig, _mm256_add_ps(sig, silu));
      _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, u), dsilu));
      _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, silu));
    }
#endif
    for (; i < end; ++i) {
      const SwigluGrads d = swiglu_grads(dout[i], gate[i], up[i]);
      dgate[i] = d.dgate, dup[i] = d.dup;
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// cross-entropy: loss = logsumexp(z) − z_t;  dz = scale · (softmax(z) − onehot(t)).

void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                   float dloss_scale) {
  for (int n = 0; n < N; ++n)
    AGOQ_CHECK(targets[n] < V, "crossentropy: target ", targets[n], " of row ", n, " is not below vocab ", V);
  std::vector<float> stats(3 * size_t(N));
  crossentropy_forward_backward(logits_to_dlogits, losses, targets, N, V, dloss_scale, stats.data());
}

// The three phases in a row with nothing between them (ops.h); stats: row_max, then (sum, target logit) per row.
void crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                   float dloss_scale, float* stats) {
  crossentropy_shard_max(logits_to_dlogits, N, V, stats);
  crossentropy_shard_exp(logits_to_dlogits, targets, N, V, 0, stats, stats + N);
  crossentropy_shard_finish(logits_to_dlogits, losses, targets, N, V, 0, stats, stats + N, dloss_scale);
}

void crossentropy_shard_max(const float* logits, int N, int V, float* row_max) {
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelElems)
  for (int n = 0; n < N; ++n) row_max[n] = row_max_of(logits + size_t(n) * V, V);
}

void crossentropy_shard_exp(float* logits, const int* targets, int N, int V, int v_begin, const float* row_max,
                            float* sums) {
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelElems)
  for (int n = 0; n < N; ++n) {
    float* z = logits + size_t(n) * V;
    const int t = targets[n] - v_begin;
    sums[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < V ? z[t] : 0.0f;
    sums[2 * n] = targets[n] < 0 ? 0.0f : row_exp_sum(z, row_max[n], V);  // z = exp(z − max)
  }
}

void crossentropy_shard_finish(float* logits_to_dlogits, float* losses, const int* targets, int N, int V, int v_begin,
                               const float* row_max, const float* sums, float dloss_scale) {
#pragma omp parallel for schedule(static) if (size_t(N) * V > kParallelElems)
  for (int n = 0; n < N; ++n) {
    float* z = logits_to_dlogits + size_t(n) * V;
    if (targets[n] < 0) {
      losses[n] = 0.0f;
      std::fill(z, z + V, 0.0f);
      continue;
    }
    const float sum = sums[2 * n];
    losses[n] = crossentropy_loss(row_max[n], sum, sums[2 * n + 1]);
    const float k = crossentropy_grad_factor(sum, dloss_scale);
    for (int v = 0; v < V; ++v) z[v] *= k;
    const int t = targets[n] - v_begin;
    if (t >= 0 && t < V) z[t] -= dloss_scale;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// embedding

void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int v_begin, int V) {
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelElems)
  for (int n = 0; n < N; ++n) {
    const int t = tokens[n] - v_begin;
    float* o = out + size_t(n) * C;
    if (t >= 0 && t < V) std::copy(table + size_t(t) * C, table + size_t(t) * C + C, o);
    else std::fill(o, o + C, 0.0f);
  }
}

void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int v_begin, int V) {
  // Parallel over column blocks: each thread owns whole columns of dtable and adds the rows in order.
  const int n_blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (size_t(N) * C > kParallelElems)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kColBlock, nc = std::min(kColBlock, C - c0);
    for (int n = 0; n < N; ++n) {
      const int t = tokens[n] - v_begin;
      if (t < 0 || t >= V) continue;
      float* dst = dtable + size_t(t) * C + c0;
      const float* src = dout + size_t(n) * C + c0;
      for (int c = 0; c < nc; ++c) dst[c] += src[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// residual

void residual_add(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelElems)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_add_inplace(float* acc, const float* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelElems)
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace agoq

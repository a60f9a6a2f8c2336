// Flash attention forward and backward on CPU (see attention.h). The tiles are kept keys-major: St (bc × br) holds
// the scaled scores of bc keys (rows) against br queries (columns), so the softmax statistics of a query are
// column-wise and vectorize over the queries. Every matrix product is one small register-blocked GEMM, tile_gemm,
// whose A operand takes arbitrary row/column strides (so transposed tiles cost nothing) and whose B operand is
// row-major and read 8 floats at a time.
#include "model/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/error.h"
#include "core/memory.h"
#include "model/ops.h"

namespace agoq {
namespace {

constexpr int kTile = kAttentionTile;

// ---- tile GEMM: C (M × N) = [C +] alpha · A · B, A(m, k) = A[m·rsa + k·csa], B(k, n) = B[k·ldb + n] -----------

#ifdef AGOQ_OPS_AVX2
// An MR × (8·NV) block of C, accumulated in registers over the whole K.
template <int MR, int NV>
inline void tile_gemm_block(int K, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa, const float* B,
                            ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  __m256 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m256 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(B + k * ldb + 8 * v);
    for (int m = 0; m < MR; ++m) {
      const __m256 a = _mm256_broadcast_ss(A + m * rsa + k * csa);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(a, b[v], acc[m][v]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha);
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) {
      float* c = C + m * ldc + 8 * v;
      _mm256_storeu_ps(c, accumulate ? _mm256_fmadd_ps(va, acc[m][v], _mm256_loadu_ps(c))
                                     : _mm256_mul_ps(va, acc[m][v]));
    }
}

// All M rows of an 8·NV wide column panel: blocks of 4 rows, then the 1-3 left over.
template <int NV>
void tile_gemm_panel(int M, int K, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa, const float* B,
                     ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  int m = 0;
  for (; m + 4 <= M; m += 4)
    tile_gemm_block<4, NV>(K, alpha, A + m * rsa, rsa, csa, B, ldb, C + m * ldc, ldc, accumulate);
  const float* a = A + m * rsa;
  float* c = C + m * ldc;
  switch (M - m) {
    case 3: tile_gemm_block<3, NV>(K, alpha, a, rsa, csa, B, ldb, c, ldc, accumulate); break;
    case 2: tile_gemm_block<2, NV>(K, alpha, a, rsa, csa, B, ldb, c, ldc, accumulate); break;
    case 1: tile_gemm_block<1, NV>(K, alpha, a, rsa, csa, B, ldb, c, ldc, accumulate); break;
    default: break;
  }
}
#endif

void tile_gemm(int M, int N, int K, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa, const float* B,
               ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  int n = 0;
#ifdef AGOQ_OPS_AVX2
  for (; n + 16 <= N; n += 16) tile_gemm_panel<2>(M, K, alpha, A, rsa, csa, B + n, ldb, C + n, ldc, accumulate);
  for (; n + 8 <= N; n += 8) tile_gemm_panel<1>(M, K, alpha, A, rsa, csa, B + n, ldb, C + n, ldc, accumulate);
#endif
  // Columns left over (N % 8, e.g. hd = 6 or a short last tile), and the portable path.
  for (int m = 0; m < M; ++m)
    for (int j = n; j < N; ++j) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s = std::fma(A[m * rsa + k * csa], B[k * ldb + j], s);
      float& c = C[m * ldc + j];
      c = accumulate ? std::fma(alpha, s, c) : alpha * s;
    }
}

// ---- small vector loops over the br queries of a tile --------------------------------------------------------

// s[r] = exp(s[r] − bias[r]); sum[r] += s[r].
void tile_exp_sub_accumulate(float* s, const float* bias, float* sum, int n) {
  int r = 0;
#ifdef AGOQ_OPS_AVX2
  for (; r + 8 <= n; r += 8) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + r), _mm256_loadu_ps(bias + r)));
    _mm256_storeu_ps(s + r, e);
    _mm256_storeu_ps(sum + r, _mm256_add_ps(_mm256_loadu_ps(sum + r), e));
  }
#endif
  for (; r < n; ++r) {
    s[r] = simd::exp1(s[r] - bias[r]);
    sum[r] += s[r];
  }
}

// s[r] = exp(s[r] − bias[r]).
void tile_exp_sub(float* s, const float* bias, int n) {
  int r = 0;
#ifdef AGOQ_OPS_AVX2
  for (; r + 8 <= n; r += 8)
    _mm256_storeu_ps(s + r, simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + r), _mm256_loadu_ps(bias + r))));
#endif
  for (; r < n; ++r) s[r] = simd::exp1(s[r] - bias[r]);
}

// The causal mask of a diagonal tile (query r sees keys c ≤ r): St[c][r] = fill for r < c.
void tile_mask_causal(float* St, int n, float fill) {
  for (int c = 1; c < n; ++c)
    for (int r = 0; r < c; ++r) St[c * n + r] = fill;
}

// dst (cols × rows, leading dimension rows) = scale · src (rows × cols, leading dimension lds)ᵀ.
void tile_transpose(float* dst, const float* src, ptrdiff_t lds, int rows, int cols, float scale) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < cols; ++d) dst[d * rows + r] = src[r * lds + d] * scale;
}

// Per-thread scratch, in floats, rounded to whole cache lines.
size_t round_up_16(size_t n) { return (n + 15) / 16 * 16; }

void check_attention_shape(int B, int T, int H, int Hkv, int hd) {
  AGOQ_CHECK(B > 0 && T > 0 && H > 0 && Hkv > 0 && hd > 0, "attention: non-positive shape B=", B, " T=", T,
             " H=", H, " Hkv=", Hkv, " hd=", hd);
  AGOQ_CHECK(H % Hkv == 0, "attention: n_heads ", H, " is not a multiple of n_kv_heads ", Hkv);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Forward. One task = (b, h, query tile i): online softmax over the key tiles j ≤ i.
//   St (bc × br) = K_j · (scale·Q_i)ᵀ;  m_new = max(m, colmax St);  P = exp(St − m_new);
//   l = l·e^(m − m_new) + colsum P;  O_i = O_i·e^(m − m_new) + Pᵀ · V_j;  at the end o = O_i / l, lse = m + log l.
void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                       int Hkv, int hd) {
  check_attention_shape(B, T, H, Hkv, hd);
  const int group = H / Hkv, n_tiles = (T + kTile - 1) / kTile;
  const float scale = 1.0f / std::sqrt(float(hd));
  const ptrdiff_t ldq = ptrdiff_t(H) * hd, ldk = ptrdiff_t(Hkv) * hd;
  // Scratch per thread: Qt (hd × br), St (bc × br), O (br × hd), m, m_new, l, corr (br).
  const size_t per_thread = round_up_16(2 * size_t(hd) * kTile + size_t(kTile) * kTile + 4 * kTile);
  const int n_threads = omp_get_max_threads();
  Buffer<float> scratch(per_thread * n_threads, MemCategory::workspace, "attention.scratch");
  const int n_tasks = B * H * n_tiles;

#pragma omp parallel num_threads(n_threads)
  {
    float* Qt = scratch.data() + per_thread * omp_get_thread_num();
    float* St = Qt + size_t(hd) * kTile;
    float* O = St + size_t(kTile) * kTile;
    float* m = O + size_t(kTile) * hd;
    float* m_new = m + kTile;
    float* l = m_new + kTile;
    float* corr = l + kTile;
    // Tasks with more key tiles first (the last query tiles), for balance.
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) {
      const int it = n_tiles - 1 - task / (B * H), bh = task % (B * H), b = bh / H, h = bh % H;
      const int i0 = it * kTile, br = std::min(kTile, T - i0);
      const float* qh = q + (size_t(b) * T * H + h) * hd;
      const float* kh = k + (size_t(b) * T * Hkv + h / group) * hd;
      const float* vh = v + (size_t(b) * T * Hkv + h / group) * hd;

      tile_transpose(Qt, qh + i0 * ldq, ldq, br, hd, scale);
      for (int r = 0; r < br; ++r) m[r] = -std::numeric_limits<float>::infinity(), l[r] = 0.0f;
      std::fill(O, O + size_t(br) * hd, 0.0f);

      for (int j0 = 0; j0 <= i0; j0 += kTile) {
        const int bc = std::min(kTile, T - j0);
        tile_gemm(bc, br, hd, 1.0f, kh + j0 * ldk, ldk, 1, Qt, br, St, br, false);
        if (j0 == i0) tile_mask_causal(St, br, -std::numeric_limits<float>::infinity());
        // Column maxima (each query's new running max); the first key of tile 0 is never masked, so m_new is finite.
        std::copy(m, m + br, m_new);
        for (int c = 0; c < bc; ++c)
          for (int r = 0; r < br; ++r) m_new[r] = St[c * br + r] > m_new[r] ? St[c * br + r] : m_new[r];
        for (int r = 0; r < br; ++r) corr[r] = simd::exp1(m[r] - m_new[r]), l[r] *= corr[r];
        for (int c = 0; c < bc; ++c) tile_exp_sub_accumulate(St + c * br, m_new, l, br);
        if (j0 > 0)
          for (int r = 0; r < br; ++r)
            for (int d = 0; d < hd; ++d) O[r * hd + d] *= corr[r];
        tile_gemm(br, hd, bc, 1.0f, St, 1, br, vh + j0 * ldk, ldk, O, hd, true);
        std::copy(m_new, m_new + br, m);
      }
      float* oh = o + (size_t(b) * T * H + h) * hd;
      float* lse_h = lse + (size_t(b) * H + h) * T;
      for (int r = 0; r < br; ++r) {
        const float inv_l = 1.0f / l[r];
        for (int d = 0; d < hd; ++d) oh[(i0 + r) * ldq + d] = O[r * hd + d] * inv_l;
        lse_h[i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

// Backward. One task = (b, kv head g): dk, dv rows of g are zeroed, then for each head h of the group and each
// query tile i, over the key tiles j ≤ i (D_i = rowsum(dO_i ∘ O_i)):
//   Pt = exp(K_j·(scale·Q_i)ᵀ − lse_i);  dPt = V_j · dO_iᵀ;  dSt = Pt ∘ (dPt − D_i);
//   dV_j += Pt · dO_i;  dK_j += scale · dSt · Q_i;  dQ_i += scale · dStᵀ · K_j.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv, int hd) {
  check_attention_shape(B, T, H, Hkv, hd);
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  const ptrdiff_t ldq = ptrdiff_t(H) * hd, ldk = ptrdiff_t(Hkv) * hd;
  // Scratch per thread: Qt, dOt (hd × br), Pt, dSt (bc × br), dQ (br × hd), D, L (br).
  const size_t per_thread = round_up_16(3 * size_t(hd) * kTile + 2 * size_t(kTile) * kTile + 2 * kTile);
  const int n_threads = omp_get_max_threads();
  Buffer<float> scratch(per_thread * n_threads, MemCategory::workspace, "attention.scratch");
  const int n_tasks = B * Hkv;

#pragma omp parallel num_threads(n_threads)
  {
    float* Qt = scratch.data() + per_thread * omp_get_thread_num();
    float* dOt = Qt + size_t(hd) * kTile;
    float* Pt = dOt + size_t(hd) * kTile;
    float* dSt = Pt + size_t(kTile) * kTile;
    float* dQ = dSt + size_t(kTile) * kTile;
    float* D = dQ + size_t(kTile) * hd;
    float* L = D + kTile;
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) {
      const int b = task / Hkv, g = task % Hkv;
      const float* kh = k + (size_t(b) * T * Hkv + g) * hd;
      const float* vh = v + (size_t(b) * T * Hkv + g) * hd;
      float* dkh = dk + (size_t(b) * T * Hkv + g) * hd;
      float* dvh = dv + (size_t(b) * T * Hkv + g) * hd;
      for (int t = 0; t < T; ++t) {
        std::fill(dkh + t * ldk, dkh + t * ldk + hd, 0.0f);
        std::fill(dvh + t * ldk, dvh + t * ldk + hd, 0.0f);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const size_t head = (size_t(b) * T * H + h) * hd;
        const float *qh = q + head, *oh = o + head, *douth = dout + head;
        float* dqh = dq + head;
        const float* lse_h = lse + (size_t(b) * H + h) * T;
        for (int i0 = 0; i0 < T; i0 += kTile) {
          const int br = std::min(kTile, T - i0);
          tile_transpose(Qt, qh + i0 * ldq, ldq, br, hd, scale);
          tile_transpose(dOt, douth + i0 * ldq, ldq, br, hd, 1.0f);
          for (int r = 0; r < br; ++r) {
            float s = 0.0f;
            for (int d = 0; d < hd; ++d) s += douth[(i0 + r) * ldq + d] * oh[(i0 + r) * ldq + d];
            D[r] = s;
            L[r] = lse_h[i0 + r];
          }
          std::fill(dQ, dQ + size_t(br) * hd, 0.0f);
          for (int j0 = 0; j0 <= i0; j0 += kTile) {
            const int bc = std::min(kTile, T - j0);
            tile_gemm(bc, br, hd, 1.0f, kh + j0 * ldk, ldk, 1, Qt, br, Pt, br, false);
            for (int c = 0; c < bc; ++c) tile_exp_sub(Pt + c * br, L, br);
            if (j0 == i0) tile_mask_causal(Pt, br, 0.0f);
            tile_gemm(bc, br, hd, 1.0f, vh + j0 * ldk, ldk, 1, dOt, br, dSt, br, false);
            for (int c = 0; c < bc; ++c)
              for (int r = 0; r < br; ++r) dSt[c * br + r] = Pt[c * br + r] * (dSt[c * br + r] - D[r]);
            tile_gemm(bc, hd, br, 1.0f, Pt, br, 1, douth + i0 * ldq, ldq, dvh + j0 * ldk, ldk, true);
            tile_gemm(bc, hd, br, scale, dSt, br, 1, qh + i0 * ldq, ldq, dkh + j0 * ldk, ldk, true);
            tile_gemm(br, hd, bc, 1.0f, dSt, 1, br, kh + j0 * ldk, ldk, dQ, hd, true);
          }
          for (int r = 0; r < br; ++r)
            for (int d = 0; d < hd; ++d) dqh[(i0 + r) * ldq + d] = dQ[r * hd + d] * scale;
        }
      }
    }
  }
}

}  // namespace agoq

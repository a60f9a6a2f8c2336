// Flash attention forward and backward on CPU (see attention.h). Every matrix product is one small register-blocked
// GEMM, tile_gemm, whose A operand takes arbitrary row/column strides (so a transposed tile costs nothing) and whose
// B operand is row-major and read 8 floats at a time; on a diagonal tile it skips the causally masked part.
//   Forward: query tile outer, key tiles inner, keys-major scores St (bc × br), so each query's running max and
//   sum are column-wise and vectorize over the queries; one transposed Q tile per task.
//   Backward: key tile outer (dK_j, dV_j stay in a scratch tile), query tiles inner, queries-major scores S
//   (br × bc); one transposed K and V tile per key tile, and dq accumulated in place.
// Strided head rows (1 KiB apart for 8 heads of 32) are copied into contiguous tiles before the products: left
// strided, the 64 rows of a tile compete for a handful of L1 sets.
#include "model/attention.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/error.h"
#include "core/memory.h"
#include "model/attention_tiles.h"
#include "model/ops.h"
#include "model/ops_simd.h"

namespace agoq {
using namespace attention_detail;
namespace {

std::atomic<AttentionIsa> g_isa_cap{AttentionIsa::avx512};

}  // namespace

AttentionIsa attention_isa() {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  return has_avx512 && g_isa_cap.load() == AttentionIsa::avx512 ? AttentionIsa::avx512 : AttentionIsa::avx2;
}

void attention_isa_cap(AttentionIsa cap) { g_isa_cap.store(cap); }

namespace {

// ---- tile GEMM: C (M × N) = [C +] alpha · A · B, A(m, k) = A[m·rsa + k·csa], B(k, n) = B[k·ldb + n] -----------

#if AGOQ_AVX2
// C row block: c = alpha·acc (+ c).
template <int NV>
inline void tile_gemm_store(float* c, __m256 alpha, __m256 acc0, __m256 acc1, bool accumulate) {
  _mm256_storeu_ps(c, accumulate ? _mm256_fmadd_ps(alpha, acc0, _mm256_loadu_ps(c)) : _mm256_mul_ps(alpha, acc0));
  if constexpr (NV == 2)
    _mm256_storeu_ps(c + 8,
                     accumulate ? _mm256_fmadd_ps(alpha, acc1, _mm256_loadu_ps(c + 8)) : _mm256_mul_ps(alpha, acc1));
}

// An MR × (8·NV) block of C (MR ≤ 4, NV ≤ 2), accumulated in registers over the whole K. The accumulators are
// named variables, not an array: g++ 12 keeps an array's copy in memory up to date on every iteration.
template <int MR, int NV>
inline void tile_gemm_block(int K, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa, const float* B,
                            ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  static_assert(MR >= 1 && MR <= 4 && NV >= 1 && NV <= 2);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  for (int k = 0; k < K; ++k) {
    const float* a = A + k * csa;
    const __m256 b0 = _mm256_loadu_ps(B + k * ldb);
    const __m256 b1 = NV == 2 ? _mm256_loadu_ps(B + k * ldb + 8) : b0;
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    if constexpr (NV == 2) c01 = _mm256_fmadd_ps(x, b1, c01);
    if constexpr (MR > 1) {
      x = _mm256_broadcast_ss(a + rsa);
      c10 = _mm256_fmadd_ps(x, b0, c10);
      if constexpr (NV == 2) c11 = _mm256_fmadd_ps(x, b1, c11);
    }
    if constexpr (MR > 2) {
      x = _mm256_broadcast_ss(a + 2 * rsa);
      c20 = _mm256_fmadd_ps(x, b0, c20);
      if constexpr (NV == 2) c21 = _mm256_fmadd_ps(x, b1, c21);
    }
    if constexpr (MR > 3) {
      x = _mm256_broadcast_ss(a + 3 * rsa);
      c30 = _mm256_fmadd_ps(x, b0, c30);
      if constexpr (NV == 2) c31 = _mm256_fmadd_ps(x, b1, c31);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha);
  tile_gemm_store<NV>(C, va, c00, c01, accumulate);
  if constexpr (MR > 1) tile_gemm_store<NV>(C + ldc, va, c10, c11, accumulate);
  if constexpr (MR > 2) tile_gemm_store<NV>(C + 2 * ldc, va, c20, c21, accumulate);
  if constexpr (MR > 3) tile_gemm_store<NV>(C + 3 * ldc, va, c30, c31, accumulate);
}

// Which part of a diagonal tile's product is needed; the rest is causally masked and is skipped.
enum class Causal {
  none,
  c_upper,     // C(m, n) only for m ≤ n (keys-major scores: key m, query n)
  c_lower,     // C(m, n) only for m ≥ n (queries-major scores: query m, key n)
  k_to_row,    // A(m, k) = 0 for k > m: sum over k ≤ m only (P·V, dS·K with queries as rows)
  k_from_row,  // A(m, k) = 0 for k < m: sum over k ≥ m only (Pᵀ·dO, dSᵀ·Q with keys as rows)
};

// A column panel's rows (columns n0 … n0 + width): blocks of 4 rows, then the 1-3 left over, each with the range of
// k its rows need; the causal cases leave the masked rows and products out.
struct PanelRows {
  int begin, end;
  PanelRows(Causal causal, int M, int n0, int width)
      : begin(causal == Causal::c_lower ? n0 : 0),  // n0 a multiple of 8: the blocks stay aligned to the diagonal
        end(causal == Causal::c_upper ? std::min(M, n0 + width) : M) {}
};
struct PanelBlock {
  int mr, k0, k1;
  PanelBlock(Causal causal, int m, int end, int K)
      : mr(std::min(4, end - m)),
        k0(causal == Causal::k_from_row ? std::min(K, m) : 0),
        k1(causal == Causal::k_to_row ? std::min(K, m + mr) : K) {}
};

// The rows of one 8·NV wide column panel (columns n0 …).
template <int NV>
void tile_gemm_panel(int n0, int M, int K, Causal causal, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa,
                     const float* B, ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  const PanelRows rows(causal, M, n0, 8 * NV);
  for (int m = rows.begin; m < rows.end; m += 4) {
    const auto [mr, k0, k1] = PanelBlock(causal, m, rows.end, K);
    const float* a = A + m * rsa + k0 * csa;
    const float* b = B + n0 + k0 * ldb;
    float* c = C + m * ldc + n0;
    switch (mr) {
      case 4: tile_gemm_block<4, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      case 3: tile_gemm_block<3, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      case 2: tile_gemm_block<2, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      default: tile_gemm_block<1, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
    }
  }
}
#endif

#if AGOQ_AVX2
// The AVX-512 twin of the panels above: 16 lanes instead of 8, the same fused multiply-add per element in the
// same order of k, so it gives the same bits; taken at run time where the CPU has AVX-512 (attention_isa).
#define AGOQ_TARGET_AVX512 __attribute__((target("avx512f")))

template <int MR, int NV>
AGOQ_TARGET_AVX512 inline void tile_gemm_block16(int K, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa,
                                                 const float* B, ptrdiff_t ldb, float* C, ptrdiff_t ldc,
                                                 bool accumulate) {
  static_assert(MR >= 1 && MR <= 4 && NV >= 1 && NV <= 2);
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  for (int k = 0; k < K; ++k) {
    const float* a = A + k * csa;
    const __m512 b0 = _mm512_loadu_ps(B + k * ldb);
    const __m512 b1 = NV == 2 ? _mm512_loadu_ps(B + k * ldb + 16) : b0;
    __m512 x = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(x, b0, c00);
    if constexpr (NV == 2) c01 = _mm512_fmadd_ps(x, b1, c01);
    if constexpr (MR > 1) {
      x = _mm512_set1_ps(a[rsa]);
      c10 = _mm512_fmadd_ps(x, b0, c10);
      if constexpr (NV == 2) c11 = _mm512_fmadd_ps(x, b1, c11);
    }
    if constexpr (MR > 2) {
      x = _mm512_set1_ps(a[2 * rsa]);
      c20 = _mm512_fmadd_ps(x, b0, c20);
      if constexpr (NV == 2) c21 = _mm512_fmadd_ps(x, b1, c21);
    }
    if constexpr (MR > 3) {
      x = _mm512_set1_ps(a[3 * rsa]);
      c30 = _mm512_fmadd_ps(x, b0, c30);
      if constexpr (NV == 2) c31 = _mm512_fmadd_ps(x, b1, c31);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  auto store = [&](float* c, __m512 acc) AGOQ_TARGET_AVX512 {
    _mm512_storeu_ps(c, accumulate ? _mm512_fmadd_ps(va, acc, _mm512_loadu_ps(c)) : _mm512_mul_ps(va, acc));
  };
  store(C, c00);
  if constexpr (NV == 2) store(C + 16, c01);
  if constexpr (MR > 1) {
    store(C + ldc, c10);
    if constexpr (NV == 2) store(C + ldc + 16, c11);
  }
  if constexpr (MR > 2) {
    store(C + 2 * ldc, c20);
    if constexpr (NV == 2) store(C + 2 * ldc + 16, c21);
  }
  if constexpr (MR > 3) {
    store(C + 3 * ldc, c30);
    if constexpr (NV == 2) store(C + 3 * ldc + 16, c31);
  }
}

template <int NV>
AGOQ_TARGET_AVX512 void tile_gemm_panel16(int n0, int M, int K, Causal causal, float alpha, const float* A,
                                          ptrdiff_t rsa, ptrdiff_t csa, const float* B, ptrdiff_t ldb, float* C,
                                          ptrdiff_t ldc, bool accumulate) {
  const PanelRows rows(causal, M, n0, 16 * NV);
  for (int m = rows.begin; m < rows.end; m += 4) {
    const auto [mr, k0, k1] = PanelBlock(causal, m, rows.end, K);
    const float* a = A + m * rsa + k0 * csa;
    const float* b = B + n0 + k0 * ldb;
    float* c = C + m * ldc + n0;
    switch (mr) {
      case 4: tile_gemm_block16<4, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      case 3: tile_gemm_block16<3, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      case 2: tile_gemm_block16<2, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
      default: tile_gemm_block16<1, NV>(k1 - k0, alpha, a, rsa, csa, b, ldb, c, ldc, accumulate); break;
    }
  }
}

// The columns [0, n) it covered: panels of 32 and 16.
AGOQ_TARGET_AVX512 int tile_gemm_avx512(int M, int N, int K, Causal causal, float alpha, const float* A, ptrdiff_t rsa,
                                        ptrdiff_t csa, const float* B, ptrdiff_t ldb, float* C, ptrdiff_t ldc,
                                        bool accumulate) {
  int n = 0;
  for (; n + 32 <= N; n += 32) tile_gemm_panel16<2>(n, M, K, causal, alpha, A, rsa, csa, B, ldb, C, ldc, accumulate);
  for (; n + 16 <= N; n += 16) tile_gemm_panel16<1>(n, M, K, causal, alpha, A, rsa, csa, B, ldb, C, ldc, accumulate);
  return n;
}
#endif

// C (M × N) = [C +] alpha · A · B with A(m, k) = A[m·rsa + k·csa], B(k, n) = B[k·ldb + n], C(m, n) = C[m·ldc + n].
// `causal` (diagonal tiles) lets it skip the masked part; entries of C it skips are left as they were.
void tile_gemm(int M, int N, int K, Causal causal, float alpha, const float* A, ptrdiff_t rsa, ptrdiff_t csa,
               const float* B, ptrdiff_t ldb, float* C, ptrdiff_t ldc, bool accumulate) {
  int n = 0;
#if AGOQ_AVX2
  if (attention_isa() == AttentionIsa::avx512)
    n = tile_gemm_avx512(M, N, K, causal, alpha, A, rsa, csa, B, ldb, C, ldc, accumulate);
  for (; n + 16 <= N; n += 16) tile_gemm_panel<2>(n, M, K, causal, alpha, A, rsa, csa, B, ldb, C, ldc, accumulate);
  for (; n + 8 <= N; n += 8) tile_gemm_panel<1>(n, M, K, causal, alpha, A, rsa, csa, B, ldb, C, ldc, accumulate);
#endif
  // Columns left over (N % 8: hd = 6, a short last tile) and the portable path: everything, masked part included
  // (the masked A entries are zeros).
  for (int m = 0; m < M; ++m)
    for (int j = n; j < N; ++j) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s = std::fma(A[m * rsa + k * csa], B[k * ldb + j], s);
      float& c = C[m * ldc + j];
      c = accumulate ? std::fma(alpha, s, c) : alpha * s;
    }
}

}  // namespace

// ---- small vector loops over one row of a tile -----------------------------------------------------------------
namespace attention_detail {
namespace {

#if AGOQ_AVX2
// The AVX-512 bodies of the two loops below (the same operations, 16 lanes); they return where they stopped.
AGOQ_TARGET_AVX512 int tile_exp_sub_accumulate16(float* s, const float* bias, float* sum, int n) {
  int r = 0;
  for (; r + 16 <= n; r += 16) {
    const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + r), _mm512_loadu_ps(bias + r)));
    _mm512_storeu_ps(s + r, e);
    _mm512_storeu_ps(sum + r, _mm512_add_ps(_mm512_loadu_ps(sum + r), e));
  }
  return r;
}
AGOQ_TARGET_AVX512 int tile_softmax_grad_row16(float* s, float* dp, float lse, float D, int n) {
  const __m512 vl = _mm512_set1_ps(lse), vd = _mm512_set1_ps(D);
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 p = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + c), vl));
    _mm512_storeu_ps(s + c, p);
    _mm512_storeu_ps(dp + c, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + c), vd)));
  }
  return c;
}
#endif

// Keys-major (forward): s[r] = exp(s[r] − bias[r]); sum[r] += s[r].
void tile_exp_sub_accumulate(float* s, const float* bias, float* sum, int n) {
  int r = 0;
#if AGOQ_AVX2
  if (attention_isa() == AttentionIsa::avx512) r = tile_exp_sub_accumulate16(s, bias, sum, n);
  for (; r + 8 <= n; r += 8) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + r), _mm256_loadu_ps(bias + r)));
    _mm256_storeu_ps(s + r, e);
    _mm256_storeu_ps(sum + r, _mm256_add_ps(_mm256_loadu_ps(sum + r), e));
  }
#endif
  for (; r < n; ++r) {
    s[r] = op_exp(s[r] - bias[r]);
    sum[r] += s[r];
  }
}

// Queries-major (backward): p[c] = exp(s[c] − lse) and ds[c] = p[c]·(dp[c] − D), in place (s → p, dp → ds).
void tile_softmax_grad_row(float* s, float* dp, float lse, float D, int n) {
  int c = 0;
#if AGOQ_AVX2
  if (attention_isa() == AttentionIsa::avx512) c = tile_softmax_grad_row16(s, dp, lse, D, n);
  const __m256 vl = _mm256_set1_ps(lse), vd = _mm256_set1_ps(D);
  for (; c + 8 <= n; c += 8) {
    const __m256 p = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c), vl));
    _mm256_storeu_ps(s + c, p);
    _mm256_storeu_ps(dp + c, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp + c), vd)));
  }
#endif
  for (; c < n; ++c) {
    s[c] = op_exp(s[c] - lse);
    dp[c] = s[c] * (dp[c] - D);
  }
}
}  // namespace

void tile_max_accumulate(float* m, const float* s, int n) {
  int r = 0;
#if AGOQ_AVX2
  for (; r + 8 <= n; r += 8) _mm256_storeu_ps(m + r, _mm256_max_ps(_mm256_loadu_ps(m + r), _mm256_loadu_ps(s + r)));
#endif
  for (; r < n; ++r) m[r] = std::max(m[r], s[r]);
}

float tile_dot(const float* a, const float* b, int n) {
  int i = 0;
  float s = 0.0f;
#if AGOQ_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  s = simd::hsum8(acc);
#endif
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void tile_mask_keys_major(float* t, int ld, int n, float fill) {
  for (int c = 1; c < n; ++c) std::fill(t + c * ld, t + c * ld + c, fill);
}
void tile_mask_queries_major(float* t, int ld, int n, float fill) {
  for (int r = 0; r + 1 < n; ++r) std::fill(t + r * ld + r + 1, t + r * ld + n, fill);
}

void tile_mask_documents_keys_major(float* t, int ld, int n_keys, int n_queries, int j0, const int32_t* doc_start,
                                    float fill) {
  for (int c = 0; c < n_keys; ++c) {
    float* row = t + c * ld;
    int r = 0;
#if AGOQ_AVX2
    const __m256i key = _mm256_set1_epi32(j0 + c);
    const __m256 f = _mm256_set1_ps(fill);
    for (; r + 8 <= n_queries; r += 8) {  // 8 queries: masked where the key precedes the query's document
      const __m256i ds = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(doc_start + r));
      const __m256 masked = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ds, key));
      _mm256_storeu_ps(row + r, _mm256_blendv_ps(_mm256_loadu_ps(row + r), f, masked));
    }
#endif
    for (; r < n_queries; ++r)
      if (j0 + c < doc_start[r]) row[r] = fill;
  }
}
void tile_mask_gaps_keys_major(float* t, int ld, int n_keys, int n_queries, int j0, const int32_t* gaps, float fill) {
  for (int r = 0; r < n_queries; ++r)
    for (int c = std::max(gaps[2 * r] - j0, 0); c < std::min(gaps[2 * r + 1] - j0, n_keys); ++c) t[c * ld + r] = fill;
}
void tile_mask_documents_queries_major(float* t, int ld, int n_queries, int n_keys, int j0, const int32_t* doc_start,
                                       float fill) {
  for (int r = 0; r < n_queries; ++r) {
    float* row = t + r * ld;
    std::fill(row, row + std::clamp(doc_start[r] - j0, 0, n_keys), fill);
  }
}

void tile_transpose(float* dst, ptrdiff_t ldd, const float* src, ptrdiff_t lds, int rows, int cols, float scale) {
  int r = 0;
#if AGOQ_AVX2
  const __m256 vs = _mm256_set1_ps(scale);
  for (; r + 8 <= rows; r += 8) {
    int d = 0;
    for (; d + 8 <= cols; d += 8) {  // one 8 × 8 block through registers
      __m256 x[8], y[8];
      for (int i = 0; i < 8; ++i) x[i] = _mm256_mul_ps(_mm256_loadu_ps(src + (r + i) * lds + d), vs);
      for (int i = 0; i < 8; i += 2) {
        y[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
        y[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        x[i] = _mm256_shuffle_ps(y[i], y[i + 2], 0x44);
        x[i + 1] = _mm256_shuffle_ps(y[i], y[i + 2], 0xEE);
        x[i + 2] = _mm256_shuffle_ps(y[i + 1], y[i + 3], 0x44);
        x[i + 3] = _mm256_shuffle_ps(y[i + 1], y[i + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + (d + i) * ldd + r, _mm256_permute2f128_ps(x[i], x[i + 4], 0x20));
        _mm256_storeu_ps(dst + (d + i + 4) * ldd + r, _mm256_permute2f128_ps(x[i], x[i + 4], 0x31));
      }
    }
    for (; d < cols; ++d)
      for (int i = 0; i < 8; ++i) dst[d * ldd + r + i] = src[(r + i) * lds + d] * scale;
  }
#endif
  for (; r < rows; ++r)
    for (int d = 0; d < cols; ++d) dst[d * ldd + r] = src[r * lds + d] * scale;
}

}  // namespace attention_detail
namespace {

// dst (rows × cols, contiguous) = src (rows × cols, leading dimension lds): packs strided head rows into a tile.
void tile_copy(float* dst, const float* src, ptrdiff_t lds, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    float* d = dst + size_t(r) * cols;
    int c = 0;
#if AGOQ_AVX2
    for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(d + c, _mm256_loadu_ps(s + c));
#endif
    for (; c < cols; ++c) d[c] = s[c];
  }
}

// Asks for rows × cols floats of strided rows to be brought into cache (the next tile's first touch).
void tile_prefetch(const float* src, ptrdiff_t lds, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < cols; d += 16) __builtin_prefetch(src + r * lds + d);
}

// Per-thread scratch: consecutive parts of the given sizes (floats), the whole rounded to cache lines.
// Forward: Qt (hd × br), Kj, Vj (bc × hd), St (bc × br), O (br × hd), m, m_new, l, corr (br).
std::array<size_t, 9> forward_scratch_parts(int hd) {
  const size_t t = kTile, h = size_t(hd);
  return {h * t, t * h, t * h, t * t, t * h, t, t, t, t};
}
// Backward: Kt, Vt (hd × bc), Kj, dK, dV (bc × hd), Qi, dOi (br × hd), S, dS (br × bc), D (br).
std::array<size_t, 10> backward_scratch_parts(int hd) {
  const size_t t = kTile, h = size_t(hd);
  return {h * t, h * t, t * h, t * h, t * h, t * h, t * h, t * t, t * t, t};
}

template <size_t K>
size_t scratch_floats(const std::array<size_t, K>& parts) {
  size_t n = 0;
  for (size_t p : parts) n += p;
  return (n + 15) / 16 * 16;
}

// The parts' start pointers in one thread's scratch.
template <size_t K>
std::array<float*, K> scratch_carve(float* base, const std::array<size_t, K>& parts) {
  std::array<float*, K> out;
  for (size_t i = 0; i < K; ++i) out[i] = base, base += parts[i];
  return out;
}

}  // namespace

size_t attention_detail::head_grad_floats(int B, int T, int H, int Hkv, int hd) {
  return H > Hkv ? 2 * size_t(B) * T * H * hd : 0;
}

void attention_detail::check_attention_shape(int B, int T, int H, int Hkv, int hd) {
  AGOQ_CHECK(B > 0 && T > 0 && H > 0 && Hkv > 0 && hd > 0, "attention: non-positive shape B=", B, " T=", T, " H=", H,
             " Hkv=", Hkv, " hd=", hd);
  AGOQ_CHECK(H % Hkv == 0, "attention: n_heads ", H, " is not a multiple of n_kv_heads ", Hkv);
}

void attention_check_doc_start(const int32_t* doc_start, int B, int T, const int32_t* gaps) {
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < T; ++i) {
      const int32_t s = doc_start[size_t(b) * T + i], prev = i > 0 ? doc_start[size_t(b) * T + i - 1] : 0;
      AGOQ_CHECK(s == i || (i > 0 && s == prev), "attention: document start ", s, " of row ", i, " in sequence ", b,
                 " does not describe contiguous documents");
      const int32_t* g = gaps ? gaps + 2 * (size_t(b) * T + i) : nullptr;
      AGOQ_CHECK(!g || (s <= g[0] && g[0] <= g[1] && g[1] <= i), "attention: the gap [", g ? g[0] : 0, ", ",
                 g ? g[1] : 0, ") of row ", i, " in sequence ", b, " is not inside its document before it");
    }
}

size_t attention_scratch_bytes(int B, int T, int H, int Hkv, int hd, int n_threads, GemmPrecision precision) {
  if (precision == GemmPrecision::bf16) return attention_bf16_scratch_bytes(B, T, H, Hkv, hd, n_threads);
  const size_t fwd = scratch_floats(forward_scratch_parts(hd)), bwd = scratch_floats(backward_scratch_parts(hd));
  return (std::max(fwd, bwd) * size_t(n_threads) + head_grad_floats(B, T, H, Hkv, hd)) * sizeof(float);
}

// ---------------------------------------------------------------------------------------------------------------
// Forward. One task = (b, h, query tile i): online softmax over the key tiles j ≤ i, keys-major (from the tile of
// the first query's document start, with document masking).
//   St (bc × br) = K_j · (scale·Q_i)ᵀ;  m_new = max(m, colmax St);  P = exp(St − m_new);
//   l = l·e^(m − m_new) + colsum P;  O_i = O_i·e^(m − m_new) + Pᵀ · V_j;  at the end o = O_i / l, lse = m + log l.
void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int B, int T, int H,
                       int Hkv, int hd, const int32_t* doc_start, GemmPrecision precision, const int32_t* gaps) {
  check_attention_shape(B, T, H, Hkv, hd);
  if (precision == GemmPrecision::bf16)
    return attention_bf16_forward(o, lse, q, k, v, B, T, H, Hkv, hd, doc_start, gaps);
  const int group = H / Hkv, n_tiles = (T + kTile - 1) / kTile;
  const float scale = 1.0f / std::sqrt(float(hd)), inf = std::numeric_limits<float>::infinity();
  // The running max before any key: finite, so a query whose keys of a tile are all masked (a document starting
  // further on) keeps exp(m − m_new) = 1 and exp(−inf − m_new) = 0 instead of NaN; op_exp(lowest − score) is 0.
  const float no_max = std::numeric_limits<float>::lowest();
  const ptrdiff_t ldq = ptrdiff_t(H) * hd, ldk = ptrdiff_t(Hkv) * hd;
  const auto parts = forward_scratch_parts(hd);
  const size_t per_thread = scratch_floats(parts);
  const int n_threads = omp_get_max_threads();
  Buffer<float> scratch(per_thread * n_threads, MemCategory::workspace, "attention.scratch");
  const int n_tasks = B * H * n_tiles;

#pragma omp parallel num_threads(n_threads)
  {
    // Named pointers, not a structured binding: clang 14 cannot capture bindings into the `omp for` below.
    const auto s = scratch_carve(scratch.data() + per_thread * omp_get_thread_num(), parts);
    float *const Qt = s[0], *const Kj = s[1], *const Vj = s[2], *const St = s[3], *const O = s[4], *const m = s[5],
                 *const m_new = s[6], *const l = s[7], *const corr = s[8];
    // Consecutive tasks share (b, h), so its k, v stay in cache; the longest query tile of a head comes first.
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) {
      const int bh = task / n_tiles, it = n_tiles - 1 - task % n_tiles, b = bh / H, h = bh % H;
      const int i0 = it * kTile, br = std::min(kTile, T - i0);
      const float* qh = q + (size_t(b) * T * H + h) * hd;
      const float* kh = k + (size_t(b) * T * Hkv + h / group) * hd;
      const float* vh = v + (size_t(b) * T * Hkv + h / group) * hd;
      const int32_t* ds = doc_start ? doc_start + size_t(b) * T + i0 : nullptr;  // the tile's document starts
      const int first_key = ds ? ds[0] / kTile * kTile : 0, last_start = ds ? ds[br - 1] : 0;
      const int32_t* gp = gaps ? gaps + 2 * (size_t(b) * T + i0) : nullptr;  // the tile's gaps

      tile_transpose(Qt, br, qh + i0 * ldq, ldq, br, hd, scale);
      std::fill(m, m + br, no_max);
      std::fill(l, l + br, 0.0f);
      std::fill(O, O + size_t(br) * hd, 0.0f);

      for (int j0 = first_key; j0 <= i0; j0 += kTile) {
        const int bc = std::min(kTile, T - j0);
        const bool diag = j0 == i0;  // then bc == br
        // Packed copies: strided rows 1 KiB apart would fight over a few L1 sets.
        tile_copy(Kj, kh + j0 * ldk, ldk, bc, hd);
        tile_copy(Vj, vh + j0 * ldk, ldk, bc, hd);
        tile_gemm(bc, br, hd, diag ? Causal::c_upper : Causal::none, 1.0f, Kj, hd, 1, Qt, br, St, br, false);
        if (diag) tile_mask_keys_major(St, br, br, -inf);
        if (j0 < last_start) tile_mask_documents_keys_major(St, br, bc, br, j0, ds, -inf);
        if (gp) tile_mask_gaps_keys_major(St, br, bc, br, j0, gp, -inf);
        std::copy(m, m + br, m_new);
        for (int c = 0; c < bc; ++c) tile_max_accumulate(m_new, St + c * br, br);
        for (int r = 0; r < br; ++r) corr[r] = op_exp(m[r] - m_new[r]), l[r] *= corr[r];
        for (int c = 0; c < bc; ++c) tile_exp_sub_accumulate(St + c * br, m_new, l, br);
        if (j0 > first_key)
          for (int r = 0; r < br; ++r)
            for (int d = 0; d < hd; ++d) O[r * hd + d] *= corr[r];
        tile_gemm(br, hd, bc, diag ? Causal::k_to_row : Causal::none, 1.0f, St, 1, br, Vj, hd, O, hd, true);
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

// Backward. One task = (b, head h), queries-major tiles. The head's dq rows are zeroed; then for each key tile j and
// each query tile i ≥ j (D_i = rowsum(dO_i ∘ O_i)):
//   S = Q_i · (scale·K_j)ᵀ;  P = exp(S − lse_i);  dP = dO_i · V_jᵀ;  dS = P ∘ (dP − D_i);
//   dV_j += Pᵀ · dO_i;  dK_j += dSᵀ · Q_i;  dq_i += scale · dS · K_j;
// and dk_j = scale · dK_j, dv_j = dV_j are written once: into dk, dv for MHA; for grouped-query heads into the
// head's rows of a scratch, summed over the group's heads in order afterwards (tasks are heads rather than kv heads,
// so 9 heads of 3 kv heads keep 2 threads busy; and the sum is the same for any thread count).
HeadGradRows attention_detail::head_grad_rows(const AttnGrad& a, int b, int h) {
  if (!a.dk_heads) {
    const size_t kv_head = (size_t(b) * a.T * a.Hkv + h / (a.H / a.Hkv)) * a.hd;
    return {a.dk + kv_head, a.dv + kv_head, a.ldk};
  }
  const size_t own = (size_t(b) * a.H + h) * a.T * a.hd;
  return {a.dk_heads + own, a.dv_heads + own, a.hd};
}

int attention_detail::key_tile_query_end(const AttnGrad& a, int b, int j0, int bc) {
  if (a.doc_start)
    for (int i0 = j0; i0 < a.T; i0 += kTile)
      if (a.doc_start[size_t(b) * a.T + i0] >= j0 + bc) return i0;
  return a.T;
}

void attention_detail::backward_sum_heads(const AttnGrad& a, int B) {
  const int group = a.H / a.Hkv, hd = a.hd, T = a.T;
#pragma omp parallel for schedule(static)
  for (long row = 0; row < long(B) * T * a.Hkv; ++row) {
    const int g = int(row % a.Hkv), i = int(row / a.Hkv % T), b = int(row / a.Hkv / T);
    float *dk = a.dk + size_t(row) * hd, *dv = a.dv + size_t(row) * hd;
    auto own = [&](int h) { return ((size_t(b) * a.H + h) * T + i) * hd; };
    std::copy_n(a.dk_heads + own(g * group), hd, dk);
    std::copy_n(a.dv_heads + own(g * group), hd, dv);
    for (int h = g * group + 1; h < (g + 1) * group; ++h)
      for (int d = 0; d < hd; ++d) dk[d] += a.dk_heads[own(h) + d], dv[d] += a.dv_heads[own(h) + d];
  }
}

namespace {

// One thread's tiles (backward_scratch_parts).
struct AttnGradTiles {
  float *Kt, *Vt, *Kj, *dK, *dV, *Qi, *dOi, *S, *dS, *D;
};

// Query tile i0 of head h (batch b) against the key tile j0 of bc keys in t.Kt, t.Vt, t.Kj: adds into t.dK, t.dV
// and the tile's dq rows.
void backward_query_tile(const AttnGrad& a, const AttnGradTiles& t, int b, int h, int i0, int j0, int bc) {
  const int T = a.T, hd = a.hd;
  const ptrdiff_t ldq = a.ldq;
  const size_t head = (size_t(b) * T * a.H + h) * hd;
  const float *qh = a.q + head, *oh = a.o + head, *douth = a.dout + head;
  const float* lse_h = a.lse + (size_t(b) * a.H + h) * T;
  const int br = std::min(kTile, T - i0);
  const bool diag = i0 == j0;                                                    // then br == bc
  const int32_t* ds = a.doc_start ? a.doc_start + size_t(b) * T + i0 : nullptr;  // the query tile's document starts
  const Causal c_mask = diag ? Causal::c_lower : Causal::none;
  if (i0 + kTile < T) {  // the next query tile: the first touch of its rows is a cache miss
    const int nr = std::min(kTile, T - i0 - kTile);
    tile_prefetch(qh + (i0 + kTile) * ldq, ldq, nr, hd);
    tile_prefetch(douth + (i0 + kTile) * ldq, ldq, nr, hd);
    tile_prefetch(oh + (i0 + kTile) * ldq, ldq, nr, hd);
  }
  tile_copy(t.Qi, qh + i0 * ldq, ldq, br, hd);
  tile_copy(t.dOi, douth + i0 * ldq, ldq, br, hd);
  for (int r = 0; r < br; ++r) t.D[r] = tile_dot(t.dOi + r * hd, oh + (i0 + r) * ldq, hd);
  tile_gemm(br, bc, hd, c_mask, 1.0f, t.Qi, hd, 1, t.Kt, bc, t.S, bc, false);
  tile_gemm(br, bc, hd, c_mask, 1.0f, t.dOi, hd, 1, t.Vt, bc, t.dS, bc, false);
  for (int r = 0; r < br; ++r) tile_softmax_grad_row(t.S + r * bc, t.dS + r * bc, lse_h[i0 + r], t.D[r], bc);
  if (diag) tile_mask_queries_major(t.S, bc, br, 0.0f), tile_mask_queries_major(t.dS, bc, br, 0.0f);
  if (ds && j0 < ds[br - 1])
    tile_mask_documents_queries_major(t.S, bc, br, bc, j0, ds, 0.0f),
        tile_mask_documents_queries_major(t.dS, bc, br, bc, j0, ds, 0.0f);
  const Causal k_from = diag ? Causal::k_from_row : Causal::none;
  tile_gemm(bc, hd, br, k_from, 1.0f, t.S, 1, bc, t.dOi, hd, t.dV, hd, true);
  tile_gemm(bc, hd, br, k_from, 1.0f, t.dS, 1, bc, t.Qi, hd, t.dK, hd, true);
  tile_gemm(br, hd, bc, diag ? Causal::k_to_row : Causal::none, a.scale, t.dS, bc, 1, t.Kj, hd, a.dq + head + i0 * ldq,
            ldq, true);
}

// Task (b, head h): zero the head's dq rows, then key tile by key tile.
void backward_task(const AttnGrad& a, const AttnGradTiles& t, int b, int h) {
  const int T = a.T, hd = a.hd, g = h / (a.H / a.Hkv);
  const ptrdiff_t ldk = a.ldk;
  const size_t kv_head = (size_t(b) * T * a.Hkv + g) * hd;
  const float *kh = a.k + kv_head, *vh = a.v + kv_head;
  const HeadGradRows out = head_grad_rows(a, b, h);
  for (int i = 0; i < T; ++i) {
    float* row = a.dq + ((size_t(b) * T + i) * a.H + h) * hd;
    std::fill(row, row + hd, 0.0f);
  }
  for (int j0 = 0; j0 < T; j0 += kTile) {
    const int bc = std::min(kTile, T - j0);
    tile_transpose(t.Kt, bc, kh + j0 * ldk, ldk, bc, hd, a.scale);
    tile_transpose(t.Vt, bc, vh + j0 * ldk, ldk, bc, hd, 1.0f);
    tile_copy(t.Kj, kh + j0 * ldk, ldk, bc, hd);
    std::fill(t.dK, t.dK + size_t(bc) * hd, 0.0f);
    std::fill(t.dV, t.dV + size_t(bc) * hd, 0.0f);
    // Query tiles from the diagonal on, up to the first whose documents all start after this key tile.
    const int i_end = key_tile_query_end(a, b, j0, bc);
    for (int i0 = j0; i0 < i_end; i0 += kTile) backward_query_tile(a, t, b, h, i0, j0, bc);
    for (int c = 0; c < bc; ++c)
      for (int d = 0; d < hd; ++d) {
        out.dk[(j0 + c) * out.ld + d] = t.dK[c * hd + d] * a.scale;
        out.dv[(j0 + c) * out.ld + d] = t.dV[c * hd + d];
      }
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* o, const float* lse, int B, int T, int H, int Hkv, int hd,
                        const int32_t* doc_start, GemmPrecision precision) {
  check_attention_shape(B, T, H, Hkv, hd);
  Buffer<float> heads(head_grad_floats(B, T, H, Hkv, hd), MemCategory::workspace, "attention.head_grads");
  const size_t per_head = heads.size() / 2;
  const AttnGrad a{dq,
                   dk,
                   dv,
                   per_head ? heads.data() : nullptr,
                   per_head ? heads.data() + per_head : nullptr,
                   dout,
                   q,
                   k,
                   v,
                   o,
                   lse,
                   doc_start,
                   T,
                   H,
                   Hkv,
                   hd,
                   1.0f / std::sqrt(float(hd)),
                   ptrdiff_t(H) * hd,
                   ptrdiff_t(Hkv) * hd};
  if (precision == GemmPrecision::bf16) {
    attention_bf16_backward(a, B);
    if (per_head) backward_sum_heads(a, B);
    return;
  }
  const auto parts = backward_scratch_parts(hd);
  const size_t per_thread = scratch_floats(parts);
  const int n_threads = omp_get_max_threads();
  Buffer<float> scratch(per_thread * n_threads, MemCategory::workspace, "attention.scratch");
  const int n_tasks = B * H;

#pragma omp parallel num_threads(n_threads)
  {
    const auto [Kt, Vt, Kj, dK, dV, Qi, dOi, S, dS, D] =
        scratch_carve(scratch.data() + per_thread * omp_get_thread_num(), parts);
    const AttnGradTiles t{Kt, Vt, Kj, dK, dV, Qi, dOi, S, dS, D};
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < n_tasks; ++task) backward_task(a, t, task / H, task % H);
  }
  if (per_head) backward_sum_heads(a, B);
}

}  // namespace agoq

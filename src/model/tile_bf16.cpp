// The bf16 tile products (model/tile_bf16.h): AMX-BF16, AVX512-BF16 and the scalar twin, and the packing into
// their operands. The binary stays AVX2: the AVX-512 and AMX functions carry target attributes and run only where
// tile_bf16_isa says the CPU has them.
#include "model/tile_bf16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/ops_simd.h"
#include "opmath/op_math.h"
#include "quant/half.h"

#if AGOQ_AVX2 && defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AGOQ_TILE_BF16_SIMD 1
#else
#define AGOQ_TILE_BF16_SIMD 0
#endif

namespace agoq {
namespace {

std::atomic<TileBf16Isa> g_cap{TileBf16Isa::amx};
thread_local bool t_amx_configured = false;

#if AGOQ_TILE_BF16_SIMD
bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}
constexpr int kEax = 0, kEdx = 3;

// Linux hands a process the AMX tile state only when it asks (arch_prctl, kernel 5.16+).
bool amx_usable() {
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  const bool cpu = cpuid_bit(7, 0, kEdx, 22) && cpuid_bit(7, 0, kEdx, 24);  // AMX-BF16, AMX-TILE
  return cpu && syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}
bool avx512_bf16_usable() { return __builtin_cpu_supports("avx512f") && cpuid_bit(7, 1, kEax, 5); }

TileBf16Isa isa_available() {
  static const TileBf16Isa isa = amx_usable()           ? TileBf16Isa::amx
                                 : avx512_bf16_usable() ? TileBf16Isa::avx512_bf16
                                                        : TileBf16Isa::scalar;
  return isa;
}

// ---- AMX: 2 x 2 blocks of 16 x 16 fp32 tiles (tiles 0-3), two A tiles (4, 5) and two B tiles (6, 7) -------------
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

#define AGOQ_AMX __attribute__((target("amx-tile,amx-bf16")))

constexpr AmxConfig amx_config() {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  return cfg;
}
// In static memory: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, so the stores of a configuration
// on the stack past those would be dropped as dead.
constexpr AmxConfig kAmxConfig = amx_config();

AGOQ_AMX void amx_configure() { _tile_loadconfig(&kAmxConfig); }
AGOQ_AMX void amx_release() { _tile_release(); }

AGOQ_AMX void gemm_amx(int M, int N, int K, const uint16_t* A, int lda, const uint32_t* Bp, int ldb, float* C, int ldc,
                       bool accumulate) {
  const size_t sa = size_t(lda) * 2, sb = size_t(ldb) * 4, sc = size_t(ldc) * 4;
  for (int m = 0; m < M; m += 32)
    for (int n = 0; n < N; n += 32) {
      float* c = C + size_t(m) * ldc + n;
      if (accumulate) {
        _tile_loadd(0, c, sc);
        _tile_loadd(1, c + 16, sc);
        _tile_loadd(2, c + 16 * size_t(ldc), sc);
        _tile_loadd(3, c + 16 * size_t(ldc) + 16, sc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int k = 0; k < K; k += 32) {
        _tile_loadd(4, A + size_t(m) * lda + k, sa);
        _tile_loadd(5, A + size_t(m + 16) * lda + k, sa);
        _tile_loadd(6, Bp + size_t(k / 2) * ldb + n, sb);
        _tile_loadd(7, Bp + size_t(k / 2) * ldb + n + 16, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, sc);
      _tile_stored(1, c + 16, sc);
      _tile_stored(2, c + 16 * size_t(ldc), sc);
      _tile_stored(3, c + 16 * size_t(ldc) + 16, sc);
    }
}

// ---- AVX512-BF16: 4 rows x 32 columns of C in registers; a lane adds one pair of k a step (vdpbf16ps) ----------
#define AGOQ_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))

inline uint32_t pair_at(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

AGOQ_AVX512_BF16 void gemm_avx512_bf16(int M, int N, int K, const uint16_t* A, int lda, const uint32_t* Bp, int ldb,
                                       float* C, int ldc, bool accumulate) {
  for (int m = 0; m < M; m += 4)
    for (int n = 0; n < N; n += 32) {
      float* c = C + size_t(m) * ldc + n;
      auto load = [&](int r, int h) AGOQ_AVX512_BF16 {
        return accumulate ? _mm512_loadu_ps(c + size_t(r) * ldc + 16 * h) : _mm512_setzero_ps();
      };
      __m512 c00 = load(0, 0), c01 = load(0, 1), c10 = load(1, 0), c11 = load(1, 1), c20 = load(2, 0), c21 = load(2, 1),
             c30 = load(3, 0), c31 = load(3, 1);
      const uint16_t* a = A + size_t(m) * lda;
      for (int k = 0; k < K; k += 2) {
        const uint32_t* b = Bp + size_t(k / 2) * ldb + n;
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
        __m512bh x = (__m512bh)_mm512_set1_epi32(int(pair_at(a + k)));
        c00 = _mm512_dpbf16_ps(c00, x, b0), c01 = _mm512_dpbf16_ps(c01, x, b1);
        x = (__m512bh)_mm512_set1_epi32(int(pair_at(a + lda + k)));
        c10 = _mm512_dpbf16_ps(c10, x, b0), c11 = _mm512_dpbf16_ps(c11, x, b1);
        x = (__m512bh)_mm512_set1_epi32(int(pair_at(a + 2 * size_t(lda) + k)));
        c20 = _mm512_dpbf16_ps(c20, x, b0), c21 = _mm512_dpbf16_ps(c21, x, b1);
        x = (__m512bh)_mm512_set1_epi32(int(pair_at(a + 3 * size_t(lda) + k)));
        c30 = _mm512_dpbf16_ps(c30, x, b0), c31 = _mm512_dpbf16_ps(c31, x, b1);
      }
      const __m512 out[8] = {c00, c01, c10, c11, c20, c21, c30, c31};
      for (int i = 0; i < 8; ++i) _mm512_storeu_ps(c + size_t(i / 2) * ldc + 16 * (i % 2), out[i]);
    }
}

// bf16 RNE of 16 floats as 32-bit lanes (f32_to_bf16 lane-wise, NaN kept quiet).
AGOQ_AVX512_BF16 inline __m512i rne16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, qnan);
}

// The vector bodies of the packing below; each returns the columns it did (a multiple of 16).
AGOQ_AVX512_BF16 int pack_row16(uint16_t* d, const float* s, int cols) {
  int c = 0;
  for (; c + 16 <= cols; c += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c), _mm512_cvtepi32_epi16(rne16(_mm512_loadu_ps(s + c))));
  return c;
}
AGOQ_AVX512_BF16 int pack_row_pair16(uint32_t* d, const float* lo, const float* hi, int cols) {
  int c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512i l = rne16(_mm512_loadu_ps(lo + c)), h = rne16(hi ? _mm512_loadu_ps(hi + c) : _mm512_setzero_ps());
    _mm512_storeu_si512(d + c, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
  }
  return c;
}
// Source rows [0, rows rounded down to 16) of tile_bf16_pack_col_pairs: 16 rows' pairs (2k', 2k'+1) a store, each
// gathered from its row. Returns the rows it did.
AGOQ_AVX512_BF16 int pack_col_pairs16(uint32_t* dst, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                                      int cols) {
  const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32(int(lds)));
  int n = 0;
  for (; n + 16 <= rows; n += 16) {
    const float* s = src + n * lds;
    for (int k = 0; k + 1 < cols; k += 2) {
      const __m512i lo = rne16(_mm512_i32gather_ps(at, s + k, 4)), hi = rne16(_mm512_i32gather_ps(at, s + k + 1, 4));
      _mm512_storeu_si512(dst + size_t(k / 2) * dst_cols + n, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    if (cols % 2) {
      const __m512i lo = rne16(_mm512_i32gather_ps(at, s + cols - 1, 4));
      _mm512_storeu_si512(dst + size_t(cols / 2) * dst_cols + n, lo);
    }
  }
  return n;
}

// Columns [0, cols rounded down to 16) of tile_bf16_pack_exp_pairs' row pair (s0, s1; s1 null past the last row).
AGOQ_AVX512_BF16 int pack_exp_pair16(uint32_t* d, const float* s0, const float* s1, const float* bias, float* sum,
                                     int cols) {
  int c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 b = _mm512_loadu_ps(bias + c);
    const __m512 e0 = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(s0 + c), b));
    __m512 acc = _mm512_add_ps(_mm512_loadu_ps(sum + c), e0);
    __m512i w = rne16(e0);
    if (s1) {
      const __m512 e1 = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(s1 + c), b));
      acc = _mm512_add_ps(acc, e1);
      w = _mm512_or_si512(w, _mm512_slli_epi32(rne16(e1), 16));
    }
    _mm512_storeu_ps(sum + c, acc);
    _mm512_storeu_si512(d + c, w);
  }
  return c;
}

// Columns [0, cols rounded down to 16) of tile_bf16_pack_softmax_grad's rows r (s0, dp0) and r + 1 (s1, dp1; null
// past the last row).
struct GradRowPair {
  const float *s0, *dp0, *s1, *dp1;
  float lse0, D0, lse1, D1;
};
AGOQ_AVX512_BF16 int pack_softmax_grad16(uint32_t* p_pair, uint32_t* ds_pair, uint16_t* ds0, uint16_t* ds1,
                                         const GradRowPair& g, int cols) {
  const __m512 l0 = _mm512_set1_ps(g.lse0), d0 = _mm512_set1_ps(g.D0), l1 = _mm512_set1_ps(g.lse1),
               d1 = _mm512_set1_ps(g.D1);
  int c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 p0 = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(g.s0 + c), l0));
    const __m512 q0 = _mm512_mul_ps(p0, _mm512_sub_ps(_mm512_loadu_ps(g.dp0 + c), d0));
    __m512i pw = rne16(p0), qw = rne16(q0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds0 + c), _mm512_cvtepi32_epi16(qw));
    if (g.s1) {
      const __m512 p1 = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(g.s1 + c), l1));
      const __m512 q1 = _mm512_mul_ps(p1, _mm512_sub_ps(_mm512_loadu_ps(g.dp1 + c), d1));
      const __m512i q1w = rne16(q1);
      pw = _mm512_or_si512(pw, _mm512_slli_epi32(rne16(p1), 16));
      qw = _mm512_or_si512(qw, _mm512_slli_epi32(q1w, 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds1 + c), _mm512_cvtepi32_epi16(q1w));
    }
    _mm512_storeu_si512(p_pair + c, pw);
    _mm512_storeu_si512(ds_pair + c, qw);
  }
  return c;
}
#endif

bool simd_packing() {
#if AGOQ_TILE_BF16_SIMD
  return tile_bf16_isa() != TileBf16Isa::scalar;
#else
  return false;
#endif
}

// The scalar twin, in vdpbf16ps's order: per pair of k, the odd product is added first, then the even one (each
// product of two bf16 values is exact in fp32, so a fused multiply-add is the instruction's one rounding).
void gemm_scalar(int M, int N, int K, const uint16_t* A, int lda, const uint32_t* Bp, int ldb, float* C, int ldc,
                 bool accumulate) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float& c = C[size_t(m) * ldc + n];
      float s = accumulate ? c : 0.0f;
      for (int k = 0; k < K; k += 2) {
        const uint32_t b = Bp[size_t(k / 2) * ldb + n];
        const uint16_t* a = A + size_t(m) * lda + k;
        s = std::fma(bf16_to_f32(a[1]), bf16_to_f32(uint16_t(b >> 16)), s);
        s = std::fma(bf16_to_f32(a[0]), bf16_to_f32(uint16_t(b & 0xFFFFu)), s);
      }
      c = s;
    }
}

uint32_t pair_of(float lo, float hi) { return uint32_t(f32_to_bf16(lo)) | uint32_t(f32_to_bf16(hi)) << 16; }

// The word rows k of a B operand made of pairs of a source's rows (2k, 2k + 1; the second past the source's `rows`
// is none): fill(d, r, two) writes row k's words from source row r (and r + 1 when two) and returns the columns it
// wrote; the rest of each word row, and the rows past the source, are zeroed.
template <class Fill>
void for_each_row_pair(uint32_t* dst, int dst_rows, int dst_cols, int rows, Fill&& fill) {
  for (int k = 0; k < dst_rows / 2; ++k) {
    uint32_t* d = dst + size_t(k) * dst_cols;
    const int c = 2 * k < rows ? fill(d, 2 * k, 2 * k + 1 < rows) : 0;
    std::fill(d + c, d + dst_cols, 0u);
  }
}

}  // namespace

TileBf16Isa tile_bf16_isa() {
#if AGOQ_TILE_BF16_SIMD
  return std::min(isa_available(), g_cap.load());
#else
  return TileBf16Isa::scalar;
#endif
}

void tile_bf16_isa_cap(TileBf16Isa cap) { g_cap.store(cap); }

const char* tile_bf16_isa_name(TileBf16Isa isa) {
  switch (isa) {
    case TileBf16Isa::amx: return "AMX-BF16";
    case TileBf16Isa::avx512_bf16: return "AVX512-BF16";
    default: return "scalar";
  }
}

TileBf16Thread::TileBf16Thread() : amx_(tile_bf16_isa() == TileBf16Isa::amx) {
#if AGOQ_TILE_BF16_SIMD
  if (amx_) {
    amx_configure();
    t_amx_configured = true;
  }
#endif
}

TileBf16Thread::~TileBf16Thread() {
#if AGOQ_TILE_BF16_SIMD
  if (amx_) {
    amx_release();
    t_amx_configured = false;
  }
#endif
}

void tile_bf16_gemm(int M, int N, int K, const uint16_t* A, int lda, const uint32_t* Bp, int ldb, float* C, int ldc,
                    bool accumulate) {
  AGOQ_CHECK(M % 32 == 0 && N % 32 == 0 && K % 32 == 0 && lda % 2 == 0, "tile_bf16_gemm: shape ", M, "x", N, "x", K,
             " lda ", lda, " is not made of 32-wide tiles");
#if AGOQ_TILE_BF16_SIMD
  switch (tile_bf16_isa()) {
    case TileBf16Isa::amx:
      AGOQ_CHECK(t_amx_configured, "tile_bf16_gemm: AMX without a TileBf16Thread on this thread");
      return gemm_amx(M, N, K, A, lda, Bp, ldb, C, ldc, accumulate);
    case TileBf16Isa::avx512_bf16: return gemm_avx512_bf16(M, N, K, A, lda, Bp, ldb, C, ldc, accumulate);
    default: break;
  }
#endif
  gemm_scalar(M, N, K, A, lda, Bp, ldb, C, ldc, accumulate);
}

void tile_bf16_pack_rows(uint16_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                         int cols) {
  const bool simd = simd_packing();
  for (int r = 0; r < dst_rows; ++r) {
    uint16_t* d = dst + size_t(r) * dst_cols;
    int c = 0;
    if (r < rows) {
      const float* s = src + r * lds;
#if AGOQ_TILE_BF16_SIMD
      if (simd) c = pack_row16(d, s, cols);
#endif
      for (; c < cols; ++c) d[c] = f32_to_bf16(s[c]);
    }
    std::fill(d + c, d + dst_cols, uint16_t(0));
  }
  (void)simd;
}

void tile_bf16_pack_transposed(uint16_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                               int cols) {
  constexpr int kBlock = 16;  // rows of src at a time: each dst row is written 16 values at a stretch
  for (int c = 0; c < dst_rows; ++c) std::fill(dst + size_t(c) * dst_cols + rows, dst + size_t(c + 1) * dst_cols, 0);
  for (int c = cols; c < dst_rows; ++c) std::fill(dst + size_t(c) * dst_cols, dst + size_t(c) * dst_cols + rows, 0);
  for (int r0 = 0; r0 < rows; r0 += kBlock) {
    const int nr = std::min(kBlock, rows - r0);
    for (int c = 0; c < cols; ++c)
      for (int r = r0; r < r0 + nr; ++r) dst[size_t(c) * dst_cols + r] = f32_to_bf16(src[r * lds + c]);
  }
}

void tile_bf16_pack_row_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                              int cols) {
  const bool simd = simd_packing();
  for_each_row_pair(dst, dst_rows, dst_cols, rows, [&](uint32_t* d, int r, bool two) {
    const float *lo = src + r * lds, *hi = two ? lo + lds : nullptr;
    int c = 0;
#if AGOQ_TILE_BF16_SIMD
    if (simd) c = pack_row_pair16(d, lo, hi, cols);
#endif
    for (; c < cols; ++c) d[c] = pair_of(lo[c], hi ? hi[c] : 0.0f);
    return cols;
  });
}

void tile_bf16_pack_col_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* src, ptrdiff_t lds, int rows,
                              int cols) {
  std::fill(dst, dst + size_t(dst_rows / 2) * dst_cols, 0u);
  int n = 0;
#if AGOQ_TILE_BF16_SIMD
  if (simd_packing() && lds < (ptrdiff_t(1) << 27)) n = pack_col_pairs16(dst, dst_cols, src, lds, rows, cols);
#endif
  for (; n < rows; ++n) {
    const float* s = src + n * lds;
    for (int k = 0; k + 1 < cols; k += 2) dst[size_t(k / 2) * dst_cols + n] = pair_of(s[k], s[k + 1]);
    if (cols % 2) dst[size_t(cols / 2) * dst_cols + n] = pair_of(s[cols - 1], 0.0f);
  }
}

void tile_bf16_pack_exp_pairs(uint32_t* dst, int dst_rows, int dst_cols, const float* s, ptrdiff_t lds, int rows,
                              int cols, const float* bias, float* sum) {
  const bool simd = simd_packing();
  for_each_row_pair(dst, dst_rows, dst_cols, rows, [&](uint32_t* d, int r, bool two) {
    const float *s0 = s + r * lds, *s1 = two ? s0 + lds : nullptr;
    int c = 0;
#if AGOQ_TILE_BF16_SIMD
    if (simd) c = pack_exp_pair16(d, s0, s1, bias, sum, cols);
#endif
    for (; c < cols; ++c) {
      const float e0 = op_exp(s0[c] - bias[c]);
      sum[c] += e0;
      float e1 = 0.0f;
      if (s1) e1 = op_exp(s1[c] - bias[c]), sum[c] += e1;
      d[c] = uint32_t(f32_to_bf16(e0)) | (s1 ? uint32_t(f32_to_bf16(e1)) << 16 : 0u);
    }
    return cols;
  });
}

void tile_bf16_pack_softmax_grad(uint32_t* p_pairs, uint32_t* ds_pairs, uint16_t* ds_rows, int dst_rows, int dst_cols,
                                 const float* s, const float* dp, ptrdiff_t lds, int rows, int cols, const float* lse,
                                 const float* D) {
  const bool simd = simd_packing();
  std::fill(ds_rows + size_t(rows) * dst_cols, ds_rows + size_t(dst_rows) * dst_cols, uint16_t(0));
  for (int k = 0; k < dst_rows / 2; ++k) {
    uint32_t *pp = p_pairs + size_t(k) * dst_cols, *qp = ds_pairs + size_t(k) * dst_cols;
    int c = 0;
    if (2 * k < rows) {
      const int r = 2 * k;
      const bool two = r + 1 < rows;
      const GradRowPair g{
          s + r * lds, dp + r * lds, two ? s + (r + 1) * lds : nullptr, two ? dp + (r + 1) * lds : nullptr,
          lse[r],      D[r],         two ? lse[r + 1] : 0.0f,           two ? D[r + 1] : 0.0f};
      uint16_t *q0 = ds_rows + size_t(r) * dst_cols, *q1 = q0 + dst_cols;
#if AGOQ_TILE_BF16_SIMD
      if (simd) c = pack_softmax_grad16(pp, qp, q0, q1, g, cols);
#endif
      for (int j = c; j < cols; ++j) {
        const float p0 = op_exp(g.s0[j] - g.lse0), ds0 = p0 * (g.dp0[j] - g.D0);
        uint32_t pw = f32_to_bf16(p0), qw = f32_to_bf16(ds0);
        q0[j] = uint16_t(qw);
        if (two) {
          const float p1 = op_exp(g.s1[j] - g.lse1), ds1 = p1 * (g.dp1[j] - g.D1);
          pw |= uint32_t(f32_to_bf16(p1)) << 16, qw |= uint32_t(f32_to_bf16(ds1)) << 16;
          q1[j] = f32_to_bf16(ds1);
        }
        pp[j] = pw, qp[j] = qw;
      }
      c = cols;
      std::fill(q0 + cols, q0 + dst_cols, uint16_t(0));
      if (two) std::fill(q1 + cols, q1 + dst_cols, uint16_t(0));
    }
    std::fill(pp + c, pp + dst_cols, 0u);
    std::fill(qp + c, qp + dst_cols, 0u);
  }
  (void)simd;
}

}  // namespace agoq

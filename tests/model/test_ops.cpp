// What the op table (tests/common/op_cases.h, run on every backend by tests/model/test_op_table.cpp) cannot say,
// because it is not an op called through a ModelBackend: op_exp against std::exp; the kernel twins one backend
// picks between by the CPU's instruction set (attention's AVX-512 and AVX2 kernels, the bf16 tile kernels on AMX,
// AVX512-BF16 and the scalar twin), which give the same bits or agree within a bound only when run side by side on
// one machine, with the raw functions' ISA caps; the bf16 tile kernels' products and packing layouts; and
// residual_add_inplace, a helper of the CPU's model code outside the backend interface; and the refusal of a bad
// cross-entropy target, which only the ops.h overload that makes its own stats checks. Every op's value, gradient,
// overwrite / accumulate rule, document masks, scratch bytes, bad inputs and determinism across runs and thread
// counts are the table's cases and its harness's.
//
// Error measure, unless said otherwise: normwise relative, max_i |got_i − want_i| / max_i |want_i|.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/attention.h"
#include "model/ops.h"
#include "model/ops_simd.h"
#include "model/tile_bf16.h"
#include "opmath/op_math.h"
#include "quant/half.h"
#include "tests/common/bits_equal.h"
#include "tests/common/op_cases_attention.h"
#include "tests/common/op_check.h"

namespace agoq {
namespace {

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && bits_equal(a.data(), b.data(), a.size() * sizeof(float));
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsExp, MatchesStdExpAndScalarMatchesVector) {
  std::vector<float> x;
  for (float v = -90.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  x.push_back(-INFINITY);
  double worst = 0;
  for (float v : x) {
    const double want = std::exp(double(v)), got = op_exp(v);
    if (v >= kExpLo) worst = std::max(worst, std::abs(got - want) / want);
    else EXPECT_EQ(got, 0.0) << v;
  }
  EXPECT_LT(worst, 3e-7);
#if AGOQ_AVX2
  for (size_t i = 0; i + 8 <= x.size(); i += 8) {
    float out[8];
    _mm256_storeu_ps(out, simd::exp8(_mm256_loadu_ps(x.data() + i)));
    for (int l = 0; l < 8; ++l) ASSERT_EQ(out[l], op_exp(x[i + l])) << x[i + l];
  }
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// The attention's raw functions, for the kernel twins below.
using op_cases_detail::AttnShape;

struct AttnData {
  AttnShape s;
  std::vector<float> q, k, v, o, lse;
  std::vector<int32_t> doc_start;  // empty: no document masking
  GemmPrecision precision = GemmPrecision::fp32;
  const int32_t* docs() const { return doc_start.empty() ? nullptr : doc_start.data(); }
  explicit AttnData(AttnShape s_, uint64_t seed, float scale = 1.0f) : s(s_) {
    const size_t nq = size_t(s.B) * s.T * s.H * s.hd, nk = size_t(s.B) * s.T * s.Hkv * s.hd;
    q = randn(nq, seed, scale), k = randn(nk, seed + 1, scale), v = randn(nk, seed + 2);
    o.assign(nq, NAN), lse.assign(size_t(s.B) * s.H * s.T, NAN);
  }
  void forward() {
    attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Hkv, s.hd, docs(),
                      precision);
  }
  // Gradients for dout, each filled with NaN first (they must be overwritten).
  void backward(const std::vector<float>& dout, std::vector<float>& dq, std::vector<float>& dk,
                std::vector<float>& dv) const {
    dq.assign(q.size(), NAN), dk.assign(k.size(), NAN), dv.assign(v.size(), NAN);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), o.data(), lse.data(),
                       s.B, s.T, s.H, s.Hkv, s.hd, docs(), precision);
  }
};

// Every shape without and with document masking (packed examples; the reference sees the same starts).
void for_each_attention_case(const std::function<void(AttnData&, const char*)>& check, uint64_t seed) {
  for (AttnShape s : op_cases_detail::attention_shapes())
    for (bool docs : {false, true}) {
      AttnData a(s, seed, 1.5f);  // scale 1.5: peaky enough softmaxes to exercise the running max
      if (docs) a.doc_start = doc_starts_random(s.B, s.T, seed + 7, s.T < 10 ? 3 : 20);
      check(a, docs ? "documents" : "causal");
    }
}

TEST(OpsAttention, Avx512AndAvx2GiveTheSameBits) {
  if (attention_isa() != AttentionIsa::avx512) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 kernels run";
  for_each_attention_case(
      [](AttnData& a, const char* mask) {
    const auto dout = randn(a.o.size(), 62);
    std::vector<float> dq[2], dk[2], dv[2], o[2];
    for (AttentionIsa isa : {AttentionIsa::avx512, AttentionIsa::avx2}) {
      const int i = int(isa);
      attention_isa_cap(isa);
      a.forward();
      o[i] = a.o;
      a.backward(dout, dq[i], dk[i], dv[i]);
    }
    attention_isa_cap(AttentionIsa::avx512);
    EXPECT_TRUE(bit_equal(o[0], o[1]) && bit_equal(dq[0], dq[1]) && bit_equal(dk[0], dk[1]) && bit_equal(dv[0], dv[1]))
        << a.s.name() << ' ' << mask;
      },
      63);
}

// ---------------------------------------------------------------------------------------------------------------
std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

// The tile kernels this CPU has, best first (the scalar twin always).
std::vector<TileBf16Isa> tile_bf16_isas() {
  std::vector<TileBf16Isa> isas;
  for (TileBf16Isa isa : {TileBf16Isa::amx, TileBf16Isa::avx512_bf16, TileBf16Isa::scalar})
    if (isa <= tile_bf16_isa()) isas.push_back(isa);
  return isas;
}

TEST(OpsTileBf16, ProductsMatchFloat64OfTheBf16Inputs) {
  const int M = 64, N = 96, K = 128, lda = K + 32;  // a wider A, as attention's head-wide packs are
  const auto a32 = randn(size_t(M) * lda, 90), b32 = randn(size_t(K) * N, 91), c0 = randn(size_t(M) * N, 92);
  std::vector<uint16_t> A(size_t(M) * lda);
  std::vector<uint32_t> Bp(size_t(K / 2) * N);
  tile_bf16_pack_rows(A.data(), M, lda, a32.data(), lda, M, lda);
  tile_bf16_pack_row_pairs(Bp.data(), K, N, b32.data(), N, K, N);
  const auto ar = bf16_rounded(a32), br = bf16_rounded(b32);
  for (bool accumulate : {false, true}) {
    Vec want(size_t(M) * N), scale(size_t(M) * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = accumulate ? c0[size_t(m) * N + n] : 0, mag = std::abs(s);
        for (int k = 0; k < K; ++k) {
          const double p = double(ar[size_t(m) * lda + k]) * br[size_t(k) * N + n];
          s += p, mag += std::abs(p);
        }
        want[size_t(m) * N + n] = s, scale[size_t(m) * N + n] = mag;
      }
    for (TileBf16Isa isa : tile_bf16_isas()) {
      tile_bf16_isa_cap(isa);
      std::vector<float> C = c0;
      {
        const TileBf16Thread tiles;
        tile_bf16_gemm(M, N, K, A.data(), lda, Bp.data(), N, C.data(), N, accumulate);
      }
      double worst = 0;  // each element within K + 1 fp32 roundings of the sum of its terms' magnitudes
      for (size_t i = 0; i < C.size(); ++i) worst = std::max(worst, std::abs(C[i] - want[i]) / scale[i]);
      EXPECT_LT(worst, (K + 1) * 0x1p-24) << tile_bf16_isa_name(isa) << " accumulate " << accumulate;
    }
    tile_bf16_isa_cap(TileBf16Isa::amx);
  }
}

TEST(OpsTileBf16, PackingIsRoundingPlacedAndPadded) {
  const int rows = 37, cols = 21, R = 64, C = 32;       // a short tile padded to 64 x 32
  const auto x = randn(size_t(rows) * (cols + 3), 93);  // leading dimension cols + 3
  const ptrdiff_t lds = cols + 3;
  auto bf = [&](int r, int c) { return f32_to_bf16(x[r * lds + c]); };
  for (TileBf16Isa isa : tile_bf16_isas()) {
    tile_bf16_isa_cap(isa);
    std::vector<uint16_t> rows16(size_t(R) * C, 7), trans16(size_t(C) * R, 7);
    std::vector<uint32_t> row_pairs(size_t(R / 2) * C, 7), col_pairs(size_t(C / 2) * R, 7);
    tile_bf16_pack_rows(rows16.data(), R, C, x.data(), lds, rows, cols);
    tile_bf16_pack_transposed(trans16.data(), C, R, x.data(), lds, rows, cols);
    tile_bf16_pack_row_pairs(row_pairs.data(), R, C, x.data(), lds, rows, cols);
    tile_bf16_pack_col_pairs(col_pairs.data(), C, R, x.data(), lds, rows, cols);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const uint16_t want = r < rows && c < cols ? bf(r, c) : 0;
        ASSERT_EQ(rows16[size_t(r) * C + c], want) << tile_bf16_isa_name(isa) << " rows " << r << ',' << c;
        ASSERT_EQ(trans16[size_t(c) * R + r], want) << tile_bf16_isa_name(isa) << " transposed " << r << ',' << c;
        const uint32_t pair = row_pairs[size_t(r / 2) * C + c];
        ASSERT_EQ(uint16_t(r % 2 ? pair >> 16 : pair & 0xFFFF), want) << "row pairs " << r << ',' << c;
        const uint32_t cpair = col_pairs[size_t(c / 2) * R + r];
        ASSERT_EQ(uint16_t(c % 2 ? cpair >> 16 : cpair & 0xFFFF), want) << "col pairs " << r << ',' << c;
      }
  }
  tile_bf16_isa_cap(TileBf16Isa::amx);
}

// The fused softmax packs give, bit for bit on every kernel, op_exp's values rounded to bf16 and placed as pairs of
// rows (and rows), the running sums added row after row, masked (−inf) scores as zeros, zeros past the source.
TEST(OpsTileBf16, SoftmaxPacksAreOpExpRoundedAndPlaced) {
  const int rows = 37, cols = 45, R = 64, C = 64;
  const ptrdiff_t lds = 50;
  auto s = randn(size_t(rows) * lds, 94, 2.0f);
  const auto dp = randn(size_t(rows) * lds, 95), bias = randn(C, 96), lse = randn(R, 97), D = randn(R, 98);
  for (int r = 0; r < rows; r += 5) s[r * lds + r % cols] = -INFINITY;  // masked
  for (TileBf16Isa isa : tile_bf16_isas()) {
    tile_bf16_isa_cap(isa);
    std::vector<uint32_t> e(size_t(R / 2) * C, 7), p(size_t(R / 2) * C, 7), q(size_t(R / 2) * C, 7);
    std::vector<uint16_t> qr(size_t(R) * C, 7);
    std::vector<float> sum(C, 0.5f), want_sum(C, 0.5f);
    tile_bf16_pack_exp_pairs(e.data(), R, C, s.data(), lds, rows, cols, bias.data(), sum.data());
    tile_bf16_pack_softmax_grad(p.data(), q.data(), qr.data(), R, C, s.data(), dp.data(), lds, rows, cols, lse.data(),
                                D.data());
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const bool in = r < rows && c < cols;
        const float x = in ? s[r * lds + c] : 0.0f, ex = in ? op_exp(x - bias[c]) : 0.0f;
        const float pv = in ? op_exp(x - lse[r]) : 0.0f, qv = in ? pv * (dp[r * lds + c] - D[r]) : 0.0f;
        if (in) want_sum[c] += ex;
        auto half = [&](const std::vector<uint32_t>& v) {
          const uint32_t w = v[size_t(r / 2) * C + c];
          return uint16_t(r % 2 ? w >> 16 : w & 0xFFFF);
        };
        const std::string at = std::string(tile_bf16_isa_name(isa)) + " " + std::to_string(r) + "," + std::to_string(c);
        ASSERT_EQ(half(e), f32_to_bf16(ex)) << "exp pairs " << at;
        ASSERT_EQ(half(p), f32_to_bf16(pv)) << "p pairs " << at;
        ASSERT_EQ(half(q), f32_to_bf16(qv)) << "ds pairs " << at;
        ASSERT_EQ(qr[size_t(r) * C + c], f32_to_bf16(qv)) << "ds rows " << at;
      }
    EXPECT_TRUE(bit_equal(sum, want_sum)) << tile_bf16_isa_name(isa);
  }
  tile_bf16_isa_cap(TileBf16Isa::amx);
}

// AMX, AVX512-BF16 and the scalar twin multiply the same bf16 values; only the order of their fp32 additions differs
// (a product of K ≤ 64 terms: 64 · 2^-24). But a P or dS that differs in its last fp32 bit can round to the next
// bf16 value (2^-8 relative) before the next product: rare, so normwise far below that; bounds 1e-4 forward, 1e-3
// for the gradients, where both happen (a wrong kernel is off by O(1)).
TEST(OpsAttentionBf16, KernelsAgree) {
  const auto isas = tile_bf16_isas();
  if (isas.size() < 2) GTEST_SKIP() << "this CPU has no AVX512-BF16 or AMX-BF16: only the scalar kernel runs";
  for_each_attention_case(
      [&](AttnData& a, const char* mask) {
    a.precision = GemmPrecision::bf16;
    const auto dout = randn(a.o.size(), 150);
    std::vector<float> o[3], dq[3], dk[3], dv[3];
    for (size_t i = 0; i < isas.size(); ++i) {
      tile_bf16_isa_cap(isas[i]);
      a.forward();
      o[i] = a.o;
      a.backward(dout, dq[i], dk[i], dv[i]);
    }
    tile_bf16_isa_cap(TileBf16Isa::amx);
    for (size_t i = 1; i < isas.size(); ++i) {
      const std::string what = std::string(tile_bf16_isa_name(isas[0])) + " vs " + tile_bf16_isa_name(isas[i]);
      EXPECT_LT(rel_err(o[i], to_double(o[0])), 1e-4) << what << ' ' << a.s.name() << ' ' << mask;
      EXPECT_LT(rel_err(dq[i], to_double(dq[0])), 1e-3) << what << " dq " << a.s.name() << ' ' << mask;
      EXPECT_LT(rel_err(dk[i], to_double(dk[0])), 1e-3) << what << " dk " << a.s.name() << ' ' << mask;
      EXPECT_LT(rel_err(dv[i], to_double(dv[0])), 1e-3) << what << " dv " << a.s.name() << ' ' << mask;
    }
      },
      151);
}

// ---------------------------------------------------------------------------------------------------------------
// A target at V: the overload that makes its own stats (ops.h) refuses it. The backend's op, whose stats the caller
// gives, does not check targets, so this is not a case of the op table.
TEST(OpsCrossEntropy, BadTargetIsRefused) {
  const int N = 64, V = 4099;
  auto logits = randn(size_t(N) * V, 81, 2.0f);
  std::vector<int> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 977) % V;
  std::vector<float> losses(N);
  targets[3] = V;
  EXPECT_THROW(crossentropy_forward_backward(logits.data(), losses.data(), targets.data(), N, V, 1.0f), Error);
}

// ---------------------------------------------------------------------------------------------------------------
// The in-place add gives the bits of residual_add (the table's residual_add case: those of a + b).
TEST(OpsResidual, InplaceEqualsAdd) {
  for (size_t n : {size_t(5), size_t(1 << 17) + 3}) {
    const auto a = randn(n, 100), b = randn(n, 101);
    std::vector<float> out(n, NAN), acc = a;
    residual_add(out.data(), a.data(), b.data(), n);
    residual_add_inplace(acc.data(), b.data(), n);
    EXPECT_TRUE(bit_equal(out, acc));
  }
}

}  // namespace
}  // namespace agoq

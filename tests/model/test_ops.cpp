// Op tests: every forward against a float64 reference (tests/common/op_reference.h), every backward against
// central finite differences of that reference's loss Σ forward(x)·R (R random), plus the structural properties
// (overwrite vs accumulate, RoPE's transpose identity, tile-sized attention scratch, determinism).
//
// Error measure, unless said otherwise: normwise relative, max_i |got_i − want_i| / max_i |want_i|.
//   forwards: ≤ 2e-6 (element-wise ops), ≤ 1e-5 (reductions over ≤ 700 terms: matmul, attention);
//   backwards vs finite differences (h = 1e-4 in float64, truncation ≈ 1e-8): ≤ 1e-4.
#include <gtest/gtest.h>

#include <omp.h>
#include <functional>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/ops.h"
#include "model/ops_simd.h"
#include "model/tile_bf16.h"
#include "opmath/op_math.h"
#include "quant/half.h"
#include "tests/common/bits_equal.h"
#include "tests/common/op_check.h"
#include "tests/common/op_reference.h"

namespace agoq {
namespace {

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && bits_equal(a.data(), b.data(), a.size() * sizeof(float));
}

// Runs f with the OpenMP thread count set to n, restoring it afterwards.
template <class F>
void with_threads(int n, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

constexpr double kFwdTol = 2e-6, kSumTol = 1e-5, kGradTol = 1e-4;

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
struct MatmulShape {
  int N, in_dim, out_dim;
};

TEST(OpsMatmul, ForwardMatchesReference) {
  for (MatmulShape s : {MatmulShape{7, 13, 5}, MatmulShape{1, 1, 1}, MatmulShape{130, 256, 688}}) {
    const auto in = randn(size_t(s.N) * s.in_dim, 1), w = randn(size_t(s.out_dim) * s.in_dim, 2);
    std::vector<float> out(size_t(s.N) * s.out_dim, NAN);
    matmul_forward(out.data(), in.data(), w.data(), s.N, s.in_dim, s.out_dim);
    Vec want(out.size()), din = to_double(in), dw = to_double(w);
    ref::matmul_forward(want.data(), din.data(), dw.data(), s.N, s.in_dim, s.out_dim);
    EXPECT_LT(rel_err(out, want), kSumTol) << s.N << "x" << s.in_dim << "x" << s.out_dim;
  }
}

TEST(OpsMatmul, BackwardMatchesFiniteDifferences) {
  for (MatmulShape s : {MatmulShape{7, 13, 5}, MatmulShape{33, 64, 24}}) {
    const auto in = randn(size_t(s.N) * s.in_dim, 3), w = randn(size_t(s.out_dim) * s.in_dim, 4);
    const auto R = randn(size_t(s.N) * s.out_dim, 5);
    const auto dw0 = randn(w.size(), 6);  // dw accumulates onto this
    std::vector<float> din(in.size(), NAN), dw = dw0;
    matmul_backward(din.data(), dw.data(), R.data(), in.data(), w.data(), s.N, s.in_dim, s.out_dim);
    std::vector<float> dw_added(dw.size());
    for (size_t i = 0; i < dw.size(); ++i) dw_added[i] = dw[i] - dw0[i];

    Vec x = to_double(in), wd = to_double(w), Rd = to_double(R), out(R.size());
    auto loss = [&] {
      ref::matmul_forward(out.data(), x.data(), wd.data(), s.N, s.in_dim, s.out_dim);
      return ref::dot(out, Rd);
    };
    EXPECT_LT(fd_err(din.data(), x, loss), kGradTol) << "din";
    EXPECT_LT(fd_err(dw_added.data(), wd, loss), kGradTol) << "dw";

    // accumulate_din adds onto din; din == nullptr and dw == nullptr are skipped.
    std::vector<float> din2 = din;
    matmul_backward(din2.data(), nullptr, R.data(), in.data(), w.data(), s.N, s.in_dim, s.out_dim, true);
    for (size_t i = 0; i < din.size(); ++i) ASSERT_NEAR(din2[i], 2 * din[i], 1e-5f * (1 + std::abs(din[i])));
    std::vector<float> dw3 = dw;
    matmul_backward(nullptr, dw3.data(), R.data(), in.data(), w.data(), s.N, s.in_dim, s.out_dim);
    for (size_t i = 0; i < dw.size(); ++i)
      ASSERT_NEAR(dw3[i] - dw[i], dw_added[i], 1e-4f * (1 + std::abs(dw_added[i])));
  }
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsRmsnorm, ForwardMatchesReference) {
  for (auto [N, C] : {std::pair{7, 13}, std::pair{67, 256}, std::pair{1, 1}}) {
    const auto x = randn(size_t(N) * C, 10, 3.0f), w = randn(C, 11);
    std::vector<float> out(x.size(), NAN), rstd(N, NAN);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    Vec want(out.size()), want_rstd(N), xd = to_double(x), wd = to_double(w);
    ref::rmsnorm_forward(want.data(), want_rstd.data(), xd.data(), wd.data(), N, C, 1e-5);
    EXPECT_LT(rel_err(out, want), kFwdTol) << N << "x" << C;
    EXPECT_LT(rel_err(rstd, want_rstd), kFwdTol) << N << "x" << C;
  }
}

TEST(OpsRmsnorm, BackwardAccumulatesAndMatchesFiniteDifferences) {
  for (const auto& nc : {std::pair{7, 13}, std::pair{67, 256}}) {
    const int N = nc.first, C = nc.second;
    const auto x = randn(size_t(N) * C, 12), w = randn(C, 13), R = randn(x.size(), 14);
    const auto dx0 = randn(x.size(), 15), dw0 = randn(C, 16);  // both grads accumulate onto these
    std::vector<float> out(x.size()), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    std::vector<float> dx = dx0, dw = dw0;
    rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
    for (int c = 0; c < C; ++c) dw[c] -= dw0[c];

    Vec xd = to_double(x), wd = to_double(w), Rd = to_double(R), o(x.size());
    auto loss = [&] {
      ref::rmsnorm_forward(o.data(), nullptr, xd.data(), wd.data(), N, C, 1e-5);
      return ref::dot(o, Rd);
    };
    EXPECT_LT(fd_err(dx.data(), xd, loss), kGradTol) << "dx " << N << "x" << C;
    EXPECT_LT(fd_err(dw.data(), wd, loss), kGradTol) << "dw " << N << "x" << C;
  }
}

// ---------------------------------------------------------------------------------------------------------------
struct RopeShape {
  int B, T, n_heads, hd;
};

TEST(OpsRope, ForwardMatchesHuggingFaceFormula) {
  for (RopeShape s : {RopeShape{2, 5, 4, 6}, RopeShape{1, 67, 2, 64}, RopeShape{2, 256, 8, 32}}) {
    const int N = s.B * s.T;
    std::vector<float> cos(size_t(s.T) * s.hd / 2), sin(cos.size());
    rope_init_tables(cos.data(), sin.data(), s.T, s.hd, 10000.0f);
    auto x = randn(size_t(N) * s.n_heads * s.hd, 20);
    Vec want = to_double(x);
    rope_forward(x.data(), cos.data(), sin.data(), N, s.T, s.n_heads, s.hd);
    ref::rope_forward(want.data(), N, s.T, s.n_heads, s.hd, 10000.0);
    EXPECT_LT(rel_err(x, want), kFwdTol) << "T=" << s.T << " hd=" << s.hd;
  }
}

TEST(OpsRope, BackwardIsTheExactTranspose) {
  for (RopeShape s : {RopeShape{2, 5, 4, 6}, RopeShape{1, 67, 2, 64}}) {
    const int N = s.B * s.T;
    std::vector<float> cos(size_t(s.T) * s.hd / 2), sin(cos.size());
    rope_init_tables(cos.data(), sin.data(), s.T, s.hd, 500000.0f);
    const auto x = randn(size_t(N) * s.n_heads * s.hd, 21), y = randn(x.size(), 22);
    auto rx = x, ry = y;
    rope_forward(rx.data(), cos.data(), sin.data(), N, s.T, s.n_heads, s.hd);
    rope_backward(ry.data(), cos.data(), sin.data(), N, s.T, s.n_heads, s.hd);
    // <rope(x), y> == <x, ropeᵀ(y)>
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      lhs += double(rx[i]) * y[i];
      rhs += double(x[i]) * ry[i];
      scale += std::abs(double(x[i]) * y[i]);
    }
    EXPECT_LT(std::abs(lhs - rhs) / scale, 1e-6);
    // A rotation's transpose is its inverse.
    rope_backward(rx.data(), cos.data(), sin.data(), N, s.T, s.n_heads, s.hd);
    EXPECT_LT(rel_err(rx, to_double(x)), kFwdTol);
    // And it is the gradient: finite differences of Σ rope(x)·R.
    Vec xd = to_double(x), Rd = to_double(y);
    auto loss = [&] {
      Vec t = xd;
      ref::rope_forward(t.data(), N, s.T, s.n_heads, s.hd, 500000.0);
      return ref::dot(t, Rd);
    };
    EXPECT_LT(fd_err(ry.data(), xd, loss, 40), kGradTol);
  }
}

// ---------------------------------------------------------------------------------------------------------------
struct AttnShape {
  int B, T, H, Hkv, hd;
};
std::ostream& operator<<(std::ostream& os, AttnShape s) {
  return os << "B=" << s.B << " T=" << s.T << " H=" << s.H << " Hkv=" << s.Hkv << " hd=" << s.hd;
}

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

const AttnShape kAttnShapes[] = {
    {2, 5, 4, 2, 6},     // odd sizes, GQA
    {1, 67, 4, 1, 8},    // T not a multiple of the tile, one kv head for 4 heads
    {2, 130, 2, 2, 32},  // MHA, three tiles, the last of 2 rows
    {1, 64, 3, 3, 16},   // exactly one tile
    {1, 200, 4, 2, 13},  // GQA, hd not a multiple of 8
    {2, 100, 4, 1, 24},  // last tile of 36 rows: 16- and 8-wide panels and a 4-row block on the diagonal
};

// Every shape without and with document masking (packed examples; the reference sees the same starts).
void for_each_attention_case(const std::function<void(AttnData&, const char*)>& check, uint64_t seed) {
  for (AttnShape s : kAttnShapes)
    for (bool docs : {false, true}) {
      AttnData a(s, seed, 1.5f);  // scale 1.5: peaky enough softmaxes to exercise the running max
      if (docs) a.doc_start = doc_starts_random(s.B, s.T, seed + 7, s.T < 10 ? 3 : 20);
      check(a, docs ? "documents" : "causal");
    }
}

TEST(OpsAttention, ForwardMatchesReference) {
  for_each_attention_case(
      [](AttnData& a, const char* mask) {
    const AttnShape s = a.s;
    a.forward();
    Vec q = to_double(a.q), k = to_double(a.k), v = to_double(a.v), o(a.o.size()), lse(a.lse.size());
    ref::attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Hkv, s.hd, a.docs());
    EXPECT_LT(rel_err(a.o, o), kSumTol) << s << ' ' << mask;
    EXPECT_LT(rel_err(a.lse, lse), kSumTol) << s << ' ' << mask;
      },
      30);
}

TEST(OpsAttention, DocumentMaskingEqualsEachDocumentAlone) {
  // Two documents packed in one sequence give, row for row, what each gives as a sequence of its own.
  const AttnShape s{1, 150, 4, 2, 16}, first{1, 70, 4, 2, 16}, second{1, 80, 4, 2, 16};
  AttnData packed(s, 35, 1.5f);
  packed.doc_start.assign(150, 0);
  for (int i = 70; i < 150; ++i) packed.doc_start[i] = 70;
  packed.forward();
  for (const auto& [part, at] : {std::pair{first, 0}, std::pair{second, 70}}) {
    AttnData alone(part, 36);
    const size_t q0 = size_t(at) * s.H * s.hd, nq = alone.q.size(), k0 = size_t(at) * s.Hkv * s.hd;
    std::copy_n(packed.q.begin() + q0, nq, alone.q.begin());
    std::copy_n(packed.k.begin() + k0, alone.k.size(), alone.k.begin());
    std::copy_n(packed.v.begin() + k0, alone.v.size(), alone.v.begin());
    alone.forward();
    const std::vector<float> rows(packed.o.begin() + q0, packed.o.begin() + q0 + nq);
    EXPECT_LT(rel_err(rows, to_double(alone.o)), 1e-6) << "document at " << at;
  }
}

TEST(OpsAttention, BackwardMatchesFiniteDifferences) {
  for_each_attention_case(
      [](AttnData& a, const char* mask) {
    const AttnShape s = a.s;
    a.forward();
    const auto R = randn(a.o.size(), 43);
    std::vector<float> dq, dk, dv;
    a.backward(R, dq, dk, dv);
    Vec q = to_double(a.q), k = to_double(a.k), v = to_double(a.v), Rd = to_double(R), o(a.o.size());
    auto loss = [&] {
      ref::attention_forward(o.data(), nullptr, q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Hkv, s.hd, a.docs());
      return ref::dot(o, Rd);
    };
    const size_t count = s.T <= 8 ? 1000 : 25;  // all elements of the small case
    EXPECT_LT(fd_err(dq.data(), q, loss, count, 1), kGradTol) << "dq " << s << ' ' << mask;
    EXPECT_LT(fd_err(dk.data(), k, loss, count, 2), kGradTol) << "dk " << s << ' ' << mask;
    EXPECT_LT(fd_err(dv.data(), v, loss, count, 3), kGradTol) << "dv " << s << ' ' << mask;
    // The last key's gradient only comes from the last query; sample it explicitly (GQA sums over heads).
    const size_t last = (size_t(s.B) * s.T - 1) * s.Hkv * s.hd;
    Vec want_last, got_last;
    for (size_t i = last; i < k.size(); ++i) {
      want_last.push_back(ref::finite_diff(k, i, loss));
      got_last.push_back(dk[i]);
    }
    EXPECT_LT(rel_err(std::vector<float>(got_last.begin(), got_last.end()), want_last), 1e-3) << "dk last " << s;
      },
      40);
}

// The scratch is tracked and is what attention_scratch_bytes says: tiles independent of T, and for grouped-query
// heads each head's dk, dv (linear in T); never a T × T buffer.
TEST(OpsAttention, ScratchIsTileSizedAndCounted) {
  auto& tracker = MemoryTracker::global();
  const int ws = int(MemCategory::workspace), threads = omp_get_max_threads();
  for (const int Hkv : {2, 1})
    for (const int T : {512, 1024}) {
      AttnData a({1, T, 2, Hkv, 32}, 50);
      const auto dout = randn(a.o.size(), 51);
      std::vector<float> dq, dk, dv;
      const size_t base = tracker.current().bytes[ws];
      tracker.reset_peaks();
      a.forward();
      a.backward(dout, dq, dk, dv);
      const size_t peak = tracker.peak_per_category().bytes[ws] - base;
      EXPECT_EQ(peak, attention_scratch_bytes(1, T, 2, Hkv, 32, threads)) << "T " << T << " Hkv " << Hkv;
      const size_t head_grads = Hkv == 1 ? 2 * size_t(T) * 2 * 32 * sizeof(float) : 0;
      EXPECT_GT(peak, head_grads);
      EXPECT_LT(peak - head_grads, size_t(512) * 512 * 4);  // the tiles: far below one T × T matrix
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
        << a.s << ' ' << mask;
      },
      63);
}

TEST(OpsAttention, BackwardIsDeterministicAcrossRunsAndThreadCounts) {
  AttnData a({2, 150, 4, 2, 32}, 60);
  const auto dout = randn(a.o.size(), 61);
  std::vector<float> dq1, dk1, dv1, dq2, dk2, dv2, dq3, dk3, dv3;
  a.forward();
  const auto o1 = a.o;
  a.backward(dout, dq1, dk1, dv1);
  a.backward(dout, dq2, dk2, dv2);
  EXPECT_TRUE(bit_equal(dq1, dq2) && bit_equal(dk1, dk2) && bit_equal(dv1, dv2));
  with_threads(1, [&] {
    a.forward();
    a.backward(dout, dq3, dk3, dv3);
  });
  EXPECT_TRUE(bit_equal(o1, a.o));
  EXPECT_TRUE(bit_equal(dq1, dq3) && bit_equal(dk1, dk3) && bit_equal(dv1, dv3));
}

TEST(OpsAttention, RejectsBadHeadGrouping) {
  float dummy[64] = {};
  EXPECT_THROW(attention_forward(dummy, dummy, dummy, dummy, dummy, 1, 1, 3, 2, 8), Error);
}

// ---------------------------------------------------------------------------------------------------------------
// bf16 attention (precision bf16): against the float64 attention of the same bf16-rounded q, k, v (and dout). What
// the reference does not round is P (and dS in the backward), rounded to bf16 where a product reads it: one rounding
// of at most 2^-9 relative per element. Bounds: forward o 2^-7 (the 2^-9 with margin 4 for the normwise measure);
// lse, which no rounded P reaches, kSumTol; gradients 2^-6 (dout, P and dS rounded, each 2^-9, margin 4 again).
constexpr double kBf16AttnTol = 0x1p-7, kBf16AttnGradTol = 0x1p-6;

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

// Runs a's forward in bf16; q, k, v get its inputs rounded to bf16, in float64 (the reference's inputs).
void bf16_forward(AttnData& a, Vec& q, Vec& k, Vec& v) {
  a.precision = GemmPrecision::bf16;
  a.forward();
  q = to_double(bf16_rounded(a.q)), k = to_double(bf16_rounded(a.k)), v = to_double(bf16_rounded(a.v));
}

TEST(OpsAttentionBf16, ForwardMatchesFloat64OfTheBf16Inputs) {
  for_each_attention_case(
      [](AttnData& a, const char* mask) {
    const AttnShape s = a.s;
    Vec q, k, v, o(a.o.size()), lse(a.lse.size());
    bf16_forward(a, q, k, v);
    ref::attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Hkv, s.hd, a.docs());
    EXPECT_LT(rel_err(a.o, o), kBf16AttnTol) << s << ' ' << mask;
    EXPECT_LT(rel_err(a.lse, lse), kSumTol) << s << ' ' << mask;
      },
      130);
}

TEST(OpsAttentionBf16, BackwardMatchesFiniteDifferencesOfTheBf16Inputs) {
  for_each_attention_case(
      [](AttnData& a, const char* mask) {
    const AttnShape s = a.s;
    Vec q, k, v;
    bf16_forward(a, q, k, v);
    const auto R = randn(a.o.size(), 143);
    std::vector<float> dq, dk, dv;
    a.backward(R, dq, dk, dv);
    Vec Rd = to_double(bf16_rounded(R)), o(a.o.size());
    auto loss = [&] {
      ref::attention_forward(o.data(), nullptr, q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Hkv, s.hd, a.docs());
      return ref::dot(o, Rd);
    };
    const size_t count = s.T <= 8 ? 1000 : 25;
    EXPECT_LT(fd_err(dq.data(), q, loss, count, 1), kBf16AttnGradTol) << "dq " << s << ' ' << mask;
    EXPECT_LT(fd_err(dk.data(), k, loss, count, 2), kBf16AttnGradTol) << "dk " << s << ' ' << mask;
    EXPECT_LT(fd_err(dv.data(), v, loss, count, 3), kBf16AttnGradTol) << "dv " << s << ' ' << mask;
      },
      140);
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
      EXPECT_LT(rel_err(o[i], to_double(o[0])), 1e-4) << what << ' ' << a.s << ' ' << mask;
      EXPECT_LT(rel_err(dq[i], to_double(dq[0])), 1e-3) << what << " dq " << a.s << ' ' << mask;
      EXPECT_LT(rel_err(dk[i], to_double(dk[0])), 1e-3) << what << " dk " << a.s << ' ' << mask;
      EXPECT_LT(rel_err(dv[i], to_double(dv[0])), 1e-3) << what << " dv " << a.s << ' ' << mask;
    }
      },
      151);
}

TEST(OpsAttentionBf16, ScratchIsCountedAndDeterministic) {
  auto& tracker = MemoryTracker::global();
  const int ws = int(MemCategory::workspace), threads = omp_get_max_threads();
  for (const int Hkv : {2, 1}) {
    AttnData a({2, 300, 2, Hkv, 48}, 160);
    a.precision = GemmPrecision::bf16;
    const auto dout = randn(a.o.size(), 161);
    std::vector<float> dq, dk, dv, dq1, dk1, dv1;
    const size_t base = tracker.current().bytes[ws];
    tracker.reset_peaks();
    a.forward();
    a.backward(dout, dq, dk, dv);
    const size_t peak = tracker.peak_per_category().bytes[ws] - base;
    EXPECT_EQ(peak, attention_scratch_bytes(2, 300, 2, Hkv, 48, threads, GemmPrecision::bf16)) << "Hkv " << Hkv;
    const auto o = a.o;
    with_threads(1, [&] {
      a.forward();
      a.backward(dout, dq1, dk1, dv1);
    });
    EXPECT_TRUE(bit_equal(o, a.o) && bit_equal(dq, dq1) && bit_equal(dk, dk1) && bit_equal(dv, dv1)) << Hkv;
  }
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsSwiglu, ForwardAndBackward) {
  for (size_t n : {size_t(13), size_t(100003)}) {
    const auto gate = randn(n, 70, 4.0f), up = randn(n, 71), R = randn(n, 72);
    std::vector<float> out(n, NAN), dgate(n, NAN), dup(n, NAN);
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), n);
    Vec g = to_double(gate), u = to_double(up), Rd = to_double(R), want(n);
    ref::swiglu_forward(want.data(), g.data(), u.data(), n);
    EXPECT_LT(rel_err(out, want), kFwdTol) << n;
    // Element-wise op: loss Σ out·R has ∂/∂gate_i = R_i·∂out_i/∂gate_i, so each element is checked on its own.
    auto loss = [&] {
      Vec o(n);
      ref::swiglu_forward(o.data(), g.data(), u.data(), n);
      return ref::dot(o, Rd);
    };
    if (n < 1000) {
      EXPECT_LT(fd_err(dgate.data(), g, loss), kGradTol);
      EXPECT_LT(fd_err(dup.data(), u, loss), kGradTol);
    } else {  // the large case: per-element derivative of one element at a time, without re-running all of n
      double worst = 0;
      for (size_t i : pick(n, 200, 3)) {
        auto f = [&](double gi) { return gi / (1 + std::exp(-gi)) * u[i] * Rd[i]; };
        const double want_g = (f(g[i] + 1e-4) - f(g[i] - 1e-4)) / 2e-4;
        const double want_u = g[i] / (1 + std::exp(-g[i])) * Rd[i];
        worst = std::max(worst, std::abs(dgate[i] - want_g) / (1 + std::abs(want_g)));
        worst = std::max(worst, std::abs(dup[i] - want_u) / (1 + std::abs(want_u)));
      }
      EXPECT_LT(worst, kGradTol);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsCrossEntropy, LossAndGradientMatchReference) {
  const int N = 9, V = 37;
  auto logits = randn(size_t(N) * V, 80, 3.0f);
  logits[5 * V + 2] = 1000.0f;  // a huge logit must not overflow
  std::vector<int> targets = {0, 36, 5, -1, 17, 2, 8, -100, 30};
  const float scale = 0.25f;
  auto grad = logits;
  std::vector<float> losses(N, NAN);
  crossentropy_forward_backward(grad.data(), losses.data(), targets.data(), N, V, scale);

  Vec z = to_double(logits), want(N);
  ref::crossentropy_forward(want.data(), z.data(), targets.data(), N, V);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(losses[n], want[n], 2e-6 * (1 + std::abs(want[n]))) << n;
  EXPECT_EQ(losses[3], 0.0f);
  for (int v = 0; v < V; ++v) ASSERT_EQ(grad[3 * V + v], 0.0f);  // ignored rows: zero gradient
  for (int v = 0; v < V; ++v) ASSERT_EQ(grad[7 * V + v], 0.0f);
  // Gradient = d(scale · Σ loss)/dlogits.
  auto loss = [&] {
    Vec l(N);
    ref::crossentropy_forward(l.data(), z.data(), targets.data(), N, V);
    double s = 0;
    for (double x : l) s += scale * x;
    return s;
  };
  EXPECT_LT(fd_err(grad.data(), z, loss, 1000), kGradTol);
  // Each kept row's gradient sums to 0.
  for (int n = 0; n < N; ++n) {
    double s = 0;
    for (int v = 0; v < V; ++v) s += grad[n * V + v];
    EXPECT_NEAR(s, 0.0, 1e-6) << n;
  }
}

TEST(OpsCrossEntropy, LargeVocabularyAndBadTarget) {
  const int N = 64, V = 4099;
  auto logits = randn(size_t(N) * V, 81, 2.0f);
  std::vector<int> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 977) % V;
  auto grad = logits;
  std::vector<float> losses(N);
  crossentropy_forward_backward(grad.data(), losses.data(), targets.data(), N, V, 1.0f);
  Vec z = to_double(logits), want(N);
  ref::crossentropy_forward(want.data(), z.data(), targets.data(), N, V);
  EXPECT_LT(rel_err(losses, want), kFwdTol);
  for (int n = 0; n < N; ++n) {  // softmax entries against the reference
    const double lse = want[n] + z[size_t(n) * V + targets[n]];
    for (int v = 0; v < V; v += 97) {
      const double p = std::exp(z[size_t(n) * V + v] - lse) - (v == targets[n]);
      ASSERT_NEAR(grad[size_t(n) * V + v], p, 1e-6 + 2e-6 * std::abs(p));
    }
  }
  targets[3] = V;
  EXPECT_THROW(crossentropy_forward_backward(grad.data(), losses.data(), targets.data(), N, V, 1.0f), Error);
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsEmbedding, ForwardAndAccumulatingBackward) {
  for (const auto& ncv : {std::tuple{7, 13, 5}, std::tuple{300, 200, 11}}) {
    const auto [N0, C0, V] = ncv;
    const int N = N0, C = C0;  // the lambdas below use these: clang 14 cannot capture structured bindings
    std::vector<int> tokens(N);
    Rng rng(90);
    for (int& t : tokens) t = int(rng.below(V));  // repeats guaranteed
    const auto table = randn(size_t(V) * C, 91), R = randn(size_t(N) * C, 92), dt0 = randn(table.size(), 93);
    std::vector<float> out(size_t(N) * C, NAN), dtable = dt0;
    embedding_forward(out.data(), tokens.data(), table.data(), N, C);
    embedding_backward(dtable.data(), R.data(), tokens.data(), N, C);
    Vec td = to_double(table), Rd = to_double(R), want(out.size());
    ref::embedding_forward(want.data(), tokens.data(), td.data(), N, C);
    EXPECT_EQ(rel_err(out, want), 0.0);
    for (size_t i = 0; i < dtable.size(); ++i) dtable[i] -= dt0[i];
    auto loss = [&] {
      Vec o(size_t(N) * C);
      ref::embedding_forward(o.data(), tokens.data(), td.data(), N, C);
      return ref::dot(o, Rd);
    };
    EXPECT_LT(fd_err(dtable.data(), td, loss, 80), kGradTol);
  }
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsResidual, AddAndInplace) {
  for (size_t n : {size_t(5), size_t(1 << 17) + 3}) {
    const auto a = randn(n, 100), b = randn(n, 101);
    std::vector<float> out(n, NAN), acc = a;
    residual_add(out.data(), a.data(), b.data(), n);
    residual_add_inplace(acc.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
    EXPECT_TRUE(bit_equal(out, acc));
  }
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OpsDeterminism, BackwardsAreBitIdenticalAcrossRunsAndThreadCounts) {
  const int N = 512, C = 256, V = 50;
  const auto x = randn(size_t(N) * C, 110), w = randn(C, 111), dout = randn(x.size(), 112);
  std::vector<int> tokens(N);
  for (int n = 0; n < N; ++n) tokens[n] = (n * 7) % V;
  std::vector<float> rstd(N), out(x.size());
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  auto run = [&] {
    std::vector<float> dx(x.size(), 0.5f), dw(C, 0.25f), dtable(size_t(V) * C, 0.0f), dg(x.size()), du(x.size());
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    embedding_backward(dtable.data(), dout.data(), tokens.data(), N, C);
    swiglu_backward(dg.data(), du.data(), dout.data(), x.data(), out.data(), x.size());
    std::vector<float> all;
    for (auto* v : {&dx, &dw, &dtable, &dg, &du}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto first = run(), second = run();
  std::vector<float> one_thread;
  with_threads(1, [&] { one_thread = run(); });
  EXPECT_TRUE(bit_equal(first, second));
  EXPECT_TRUE(bit_equal(first, one_thread));
}

}  // namespace
}  // namespace agoq

// AdamW with 8-bit states against a float64 reference with the same quantization semantics, the AVX2 kernel
// against the scalar one, the error bounds of the mappings, and the memory the states take.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "optim/adamw.h"
#include "quant/simd.h"

namespace agoq {
namespace {

LlamaConfig tiny_cfg() {
  LlamaConfig c;
  c.vocab_size = 11, c.dim = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.ffn_dim = 12, c.max_seq_len = 4;
  return c;
}

double power(double r, int root) { return std::copysign(std::pow(std::fabs(r), root), r); }
double root_of(double x, int root) { return std::copysign(std::pow(std::fabs(x), 1.0 / root), x); }

// One step of one block in float64: decode with the block's scales, AdamW, the new roots, their scale and the
// unrounded codes (x = root * Q / scale) that the kernel must round.
struct RefBlock {
  std::vector<double> p, m_x, v_x;  // new weights, unrounded codes
  double m_scale = 0, v_scale = 0;
};
RefBlock ref_block(const AdamQ8Format& f, const AdamWConfig& c, double lr, long t, const int8_t* mc, const uint8_t* vc,
                   float ms, float vs, const float* g, const float* p, const std::vector<bool>& decay, size_t n) {
  RefBlock r;
  std::vector<double> rm(n), rv(n);
  const double bc1 = 1 - std::pow(double(c.beta1), double(t)), bc2 = 1 - std::pow(double(c.beta2), double(t));
  for (size_t j = 0; j < n; ++j) {
    const double m0 = power(double(mc[j]) * ms / 127.0, f.m_root), v0 = power(double(vc[j]) * vs / 255.0, f.v_root);
    const double m = c.beta1 * m0 + (1 - c.beta1) * double(g[j]);
    const double v = c.beta2 * v0 + (1 - c.beta2) * double(g[j]) * g[j];
    const double pd = decay[j] ? p[j] * (1 - lr * c.weight_decay) : p[j];
    r.p.push_back(pd - lr / bc1 * m / (std::sqrt(v / bc2) + c.eps));
    rm[j] = root_of(m, f.m_root), rv[j] = root_of(v, f.v_root);
    r.m_scale = std::max(r.m_scale, std::fabs(rm[j])), r.v_scale = std::max(r.v_scale, rv[j]);
  }
  for (size_t j = 0; j < n; ++j) {
    r.m_x.push_back(r.m_scale > 0 ? rm[j] * 127 / r.m_scale : 0);
    r.v_x.push_back(r.v_scale > 0 ? rv[j] * 255 / r.v_scale : 0);
  }
  return r;
}

// Nearest rounding of x must give `code`; within 1e-3 of a rounding boundary either neighbour is right (fp32 vs
// float64 arithmetic).
::testing::AssertionResult code_matches(double x, int code, int lo, int hi) {
  const double want = std::clamp(std::nearbyint(x), double(lo), double(hi));
  if (code == want) return ::testing::AssertionSuccess();
  const double frac = std::fabs(x - std::floor(x) - 0.5);
  if (frac < 1e-3 && std::fabs(code - x) <= 0.501) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "code " << code << " for x = " << x;
}

// Steps AdamW with q8 states over a ParamSet shard and checks every step against the reference started from the
// kernel's own state of the step before (so the check does not depend on earlier rounding).
void expect_q8_matches_reference(const AdamQ8Format& f, size_t begin, size_t end) {
  SCOPED_TRACE("block " + std::to_string(f.block) + " m root " + std::to_string(f.m_root) + " v root " +
               std::to_string(f.v_root) + " shard " + std::to_string(begin));
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test"), grads(cfg, MemCategory::gradients, "test");
  Rng rng(3);
  for (size_t i = 0; i < params.size(); ++i) params.data()[i] = rng.normal();
  const std::vector<float> init(params.data(), params.data() + params.size());
  AdamWConfig ac;
  ac.weight_decay = 0.3f, ac.state = OptimState::q8, ac.q8 = f;
  AdamW adam(params, ac, begin, end);
  end = std::min(end, params.size());
  std::vector<bool> decay(params.size());
  for (const ParamTensor& t : params.named())
    for (size_t k = 0; k < t.numel(); ++k) decay[size_t(t.data - params.data()) + k] = t.decay;
  AdamQ8State& st = adam.q8_state();
  const size_t B = size_t(f.block);
  for (long t = 1; t <= 6; ++t) {
    // Gradients over four decades, so v's blocks hold small and large values.
    for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] = rng.normal() * std::pow(10.f, -float(i % 5));
    const std::vector<float> p0(params.data(), params.data() + params.size());
    const std::vector<int8_t> mc(st.m_codes(), st.m_codes() + st.size());
    const std::vector<uint8_t> vc(st.v_codes(), st.v_codes() + st.size());
    const std::vector<float> ms(st.m_scales(), st.m_scales() + st.blocks());
    const std::vector<float> vs(st.v_scales(), st.v_scales() + st.blocks());
    const float lr = 1e-2f * float(t);
    adam.step(params.data(), grads.data(), lr, t);
    for (size_t b = 0; b < st.blocks(); ++b) {
      const size_t s = b * B, n = std::min(B, st.size() - s), at = begin + s;
      const std::vector<bool> dec(decay.begin() + long(at), decay.begin() + long(at + n));
      const RefBlock r = ref_block(f, ac, lr, t, mc.data() + s, vc.data() + s, ms[b], vs[b], grads.data() + at,
                                   p0.data() + at, dec, n);
      ASSERT_NEAR(st.m_scales()[b], r.m_scale, 1e-5 * r.m_scale) << "block " << b;
      ASSERT_NEAR(st.v_scales()[b], r.v_scale, 1e-5 * r.v_scale) << "block " << b;
      for (size_t j = 0; j < n; ++j) {
        ASSERT_NEAR(params.data()[at + j], r.p[j], 1e-6 * (1 + std::fabs(r.p[j])))
            << "step " << t << " value " << at + j;
        ASSERT_TRUE(code_matches(r.m_x[j], st.m_codes()[s + j], -127, 127)) << "m, step " << t << " value " << at + j;
        ASSERT_TRUE(code_matches(r.v_x[j], st.v_codes()[s + j], 0, 255)) << "v, step " << t << " value " << at + j;
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (i < begin || i >= end) {
      ASSERT_EQ(params.data()[i], init[i]) << "outside the shard: " << i;
    }
}

TEST(AdamQ8, MatchesFloat64ReferenceForEveryMapping) {
  for (int block : {32, 256})
    for (int mr : {1, 2})
      for (int vr : {1, 2, 4}) expect_q8_matches_reference({.block = block, .m_root = mr, .v_root = vr}, 0, size_t(-1));
}

TEST(AdamQ8, ShardMatchesReferenceAndLeavesTheRestAlone) {
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test"), grads(cfg, MemCategory::gradients, "test");
  for (size_t i = 0; i < params.size(); ++i) params.data()[i] = 1.0f + float(i), grads.data()[i] = 0.5f;
  AdamWConfig ac;
  ac.state = OptimState::q8, ac.q8.block = 64;
  AdamW adam(params, ac, 64, 301);
  adam.step(params.data(), grads.data(), 1e-2f, 1);
  for (size_t i = 0; i < params.size(); ++i)
    if (i < 64 || i >= 301) ASSERT_EQ(params.data()[i], 1.0f + float(i)) << i;
    else ASSERT_NE(params.data()[i], 1.0f + float(i)) << i;
  expect_q8_matches_reference({.block = 64}, 64, 301);
  expect_q8_matches_reference({}, 128, 301);  // the default format
}

// The AVX2 kernel and the portable one give the same bits (weights, codes, scales), tails and decay runs included.
TEST(AdamQ8, Avx2AndScalarKernelsAgreeBitForBit) {
  if (!AGOQ_AVX2) GTEST_SKIP() << "built without AVX2";
  const LlamaConfig cfg = tiny_cfg();
  for (int vr : {1, 2, 4})
    for (int mr : {1, 2}) {
      ParamSet p[2] = {ParamSet(cfg, MemCategory::weights, "test"), ParamSet(cfg, MemCategory::weights, "test")};
      ParamSet grads(cfg, MemCategory::gradients, "test");
      Rng rng(11);
      for (size_t i = 0; i < grads.size(); ++i) p[0].data()[i] = p[1].data()[i] = rng.normal();
      AdamWConfig ac;
      ac.state = OptimState::q8, ac.q8 = {.block = 128, .m_root = mr, .v_root = vr};
      AdamW a(p[0], ac, 5), b(p[1], ac, 5);  // 5: blocks start off the 32-value grid of the vectors
      for (long t = 1; t <= 4; ++t) {
        for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] = rng.normal() * (i % 3 ? 1.f : 1e-3f);
        quant_set_simd(true);
        a.step(p[0].data(), grads.data(), 1e-2f, t);
        quant_set_simd(false);
        b.step(p[1].data(), grads.data(), 1e-2f, t);
        quant_set_simd(true);
      }
      AdamQ8State &x = a.q8_state(), &y = b.q8_state();
      for (size_t i = 0; i < p[0].size(); ++i) ASSERT_EQ(p[0].data()[i], p[1].data()[i]) << i;
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x.m_codes()[i], y.m_codes()[i]) << i;
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x.v_codes()[i], y.v_codes()[i]) << i;
      for (size_t i = 0; i < x.blocks(); ++i) ASSERT_EQ(x.m_scales()[i], y.m_scales()[i]) << i;
      for (size_t i = 0; i < x.blocks(); ++i) ASSERT_EQ(x.v_scales()[i], y.v_scales()[i]) << i;
    }
}

// Loading fp32 moments and decoding them again is within half a code step of each root (the mapping's bound).
TEST(AdamQ8, Fp32RoundTripWithinHalfAStep) {
  const size_t n = 1000;
  std::vector<float> m(n), v(n), m2(n), v2(n);
  Rng rng(2);
  for (size_t i = 0; i < n; ++i)
    m[i] = rng.normal() * 1e-3f, v[i] = m[i] * m[i] * (1 + rng.uniform()) * float(i % 7 + 1);
  for (int vr : {1, 2, 4}) {
    AdamQ8State s(n, {.block = 64, .m_root = 1, .v_root = vr});
    s.load_fp32(m.data(), v.data());
    s.store_fp32(m2.data(), v2.data());
    for (size_t b = 0; b < s.blocks(); ++b)
      for (size_t j = b * 64; j < std::min(n, b * 64 + 64); ++j) {
        ASSERT_LE(std::fabs(m2[j] - m[j]), s.m_scales()[b] / 254 * 1.0001) << j;
        ASSERT_LE(std::fabs(root_of(v2[j], vr) - root_of(v[j], vr)), s.v_scales()[b] / 510 * 1.0001) << j;
      }
  }
}

// Stochastic rounding is unbiased: over uniform bytes the mean code is the unrounded value.
TEST(AdamQ8, StochasticRoundingIsUnbiased) {
  AdamQ8Tile tile;
  tile.m_max = 1, tile.v_max = 1;
  for (size_t j = 0; j < 256; ++j) tile.m[j] = -0.4f + 0.7f * float(j) / 256, tile.v[j] = float(j) / 300;
  std::vector<double> sum_m(256), sum_v(256);
  int8_t mc[256];
  uint8_t vc[256], random[512];
  float ms, vs;
  for (int r = 0; r < 256; ++r) {
    for (int j = 0; j < 512; ++j) random[j] = uint8_t((r + 37 * j) % 256);  // every byte once per element
    adam_q8_encode({.rounding = QuantRounding::stochastic}, tile, 256, mc, vc, &ms, &vs, random);
    for (int j = 0; j < 256; ++j) sum_m[j] += mc[j], sum_v[j] += vc[j];
  }
  for (int j = 0; j < 256; ++j) {
    EXPECT_NEAR(sum_m[j] / 256, tile.m[j] * 127, 1.0 / 256) << j;
    EXPECT_NEAR(sum_v[j] / 256, tile.v[j] * 255, 1.0 / 256) << j;
  }
}

// The states are 2 bytes per value and 8 per block, tracked as optimizer memory; a step allocates nothing.
TEST(AdamQ8, StateBytesAndNoFullSizeCopy) {
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test"), grads(cfg, MemCategory::gradients, "test");
  MemoryTracker& tr = MemoryTracker::global();
  const size_t before = tr.current().bytes[int(MemCategory::optimizer)];
  AdamWConfig ac;
  ac.state = OptimState::q8;
  AdamW adam(params, ac);
  const size_t n = params.size();
  EXPECT_EQ(tr.current().bytes[int(MemCategory::optimizer)] - before, adam_q8_bytes(n, 128));
  EXPECT_EQ(adam_q8_bytes(n, 128), 2 * n + 8 * ((n + 127) / 128));
  tr.reset_peaks();
  const size_t total = tr.current().total();
  adam.step(params.data(), grads.data(), 1e-3f, 1);
  EXPECT_EQ(tr.peak_total(), total);
}

TEST(AdamQ8, BadFormatsAreOneClearError) {
  EXPECT_THROW(AdamQ8State(10, {.block = 100}), Error);
  EXPECT_THROW(AdamQ8State(10, {.m_root = 3}), Error);
  EXPECT_THROW(AdamQ8State(10, {.v_root = 8}), Error);
  EXPECT_THROW(optim_state_parse("int8"), Error);
  EXPECT_EQ(optim_state_parse("q8"), OptimState::q8);
}

}  // namespace
}  // namespace agoq

// AdamW, the gradient norm and the learning-rate schedule against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/bits_equal.h"
#include "core/error.h"
#include "core/rng.h"
#include "optim/adamw.h"

namespace agoq {
namespace {

LlamaConfig tiny_cfg() {
  LlamaConfig c;
  c.vocab_size = 11, c.dim = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.ffn_dim = 12, c.max_seq_len = 4;
  return c;
}

// One parameter's AdamW update in float64, the textbook way (bias-corrected moments, decoupled decay).
struct AdamRef {
  double m = 0, v = 0;
  double step(double p, double g, double lr, long t, const AdamWConfig& c, bool decay) {
    m = c.beta1 * m + (1 - c.beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    const double mhat = m / (1 - std::pow(double(c.beta1), double(t)));
    const double vhat = v / (1 - std::pow(double(c.beta2), double(t)));
    if (decay) p *= 1 - lr * c.weight_decay;
    return p - lr * mhat / (std::sqrt(vhat) + c.eps);
  }
};

// Steps a shard [begin, end) of a ParamSet's layout and checks it against the reference, element by element;
// outside the shard nothing may change.
void expect_adamw_matches(size_t begin, size_t end) {
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test"), grads(cfg, MemCategory::gradients, "test");
  Rng rng(3);
  for (size_t i = 0; i < params.size(); ++i) params.data()[i] = rng.normal();
  AdamWConfig ac;
  ac.weight_decay = 0.3f;
  AdamW adam(params, ac, begin, end);
  std::vector<double> ref(params.data(), params.data() + params.size());
  std::vector<AdamRef> state(params.size());
  std::vector<bool> decay(params.size());
  for (const ParamTensor& t : params.named())
    for (size_t k = 0; k < t.numel(); ++k) decay[size_t(t.data - params.data()) + k] = t.decay;
  for (long t = 1; t <= 5; ++t) {
    for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] = rng.normal();
    const float lr = 1e-2f * float(t);
    adam.step(params.data(), grads.data(), lr, t);
    for (size_t i = begin; i < std::min(end, params.size()); ++i)
      ref[i] = state[i].step(ref[i], grads.data()[i], lr, t, ac, decay[i]);
  }
  for (size_t i = 0; i < params.size(); ++i)
    ASSERT_NEAR(params.data()[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "element " << i;
}

TEST(AdamW, MatchesFloat64Reference) { expect_adamw_matches(0, size_t(-1)); }

TEST(AdamW, ShardUpdatesOnlyItsRange) { expect_adamw_matches(37, 301); }

// A shard stepped piece by piece (pieces in any order, q8 pieces on blocks) gives the weights and moments of whole
// steps bit for bit: fp32 and 8-bit moments, nearest and stochastic rounding.
TEST(AdamW, PiecesGiveTheBitsOfWholeSteps) {
  const LlamaConfig cfg = tiny_cfg();
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    ParamSet whole_p(cfg, MemCategory::weights, "test"), piece_p(cfg, MemCategory::weights, "test");
    ParamSet grads(cfg, MemCategory::gradients, "test");
    Rng rng(11);
    for (size_t i = 0; i < whole_p.size(); ++i) whole_p.data()[i] = piece_p.data()[i] = rng.normal();
    AdamWConfig ac;
    ac.state = variant == 0 ? OptimState::fp32 : OptimState::q8;
    ac.q8.block = 64, ac.q8.seed = 5;
    if (variant == 2) ac.q8.rounding = QuantRounding::stochastic;
    const size_t begin = 64, end = whole_p.size() - 3;  // a shard ending in a short block
    AdamW whole(whole_p, ac, begin, end), pieces(piece_p, ac, begin, end);
    for (long t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] = rng.normal();
      whole.step(whole_p.data(), grads.data(), 1e-2f, t);
      for (size_t from = begin + (end - begin - 1) / 192 * 192;; from -= 192) {  // last piece first
        pieces.step(piece_p.data(), grads.data(), 1e-2f, t, from, std::min(end, from + 192));
        if (from == begin) break;
      }
    }
    ASSERT_TRUE(bits_equal(whole_p.data(), piece_p.data(), whole_p.size() * sizeof(float)));
    if (whole.q8()) {
      const AdamQ8State &a = whole.q8_state(), &b = pieces.q8_state();
      EXPECT_TRUE(bits_equal(a.m_codes(), b.m_codes(), a.size()) && bits_equal(a.v_codes(), b.v_codes(), a.size()));
      EXPECT_TRUE(bits_equal(a.m_scales(), b.m_scales(), a.blocks() * sizeof(float)) &&
                  bits_equal(a.v_scales(), b.v_scales(), a.blocks() * sizeof(float)));
    } else {
      EXPECT_TRUE(bits_equal(whole.m().data(), pieces.m().data(), whole.m().bytes()) &&
                  bits_equal(whole.v().data(), pieces.v().data(), whole.v().bytes()));
    }
  }
  // A q8 piece that does not start a block is refused.
  ParamSet p(cfg, MemCategory::weights, "test");
  AdamWConfig ac;
  ac.state = OptimState::q8, ac.q8.block = 64;
  AdamW adam(p, ac);
  EXPECT_THROW(adam.step(p.data(), p.data(), 1e-2f, 1, 10, 64), Error);
}

TEST(AdamW, NormsAreNotDecayedMatricesAre) {
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test");
  for (const ParamTensor& t : params.named()) EXPECT_EQ(t.decay, t.shape.size() == 2) << t.name;
}

TEST(GradNorm, SumOfSquaresIsExactAndScaleScales) {
  std::vector<float> g(200003);
  Rng rng(5);
  double want = 0;
  for (float& x : g) x = rng.normal(), want += double(x) * x;
  EXPECT_NEAR(grad_sum_squares(g.data(), g.size()), want, 1e-9 * want);
  grad_scale(g.data(), g.size(), 0.5f);
  EXPECT_NEAR(grad_sum_squares(g.data(), g.size()), want / 4, 1e-9 * want);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  EXPECT_FLOAT_EQ(lr_schedule(1, 1.0f, 0.1f, 10, 100), 0.1f);
  EXPECT_FLOAT_EQ(lr_schedule(10, 1.0f, 0.1f, 10, 100), 1.0f);
  EXPECT_NEAR(lr_schedule(55, 1.0f, 0.1f, 10, 100), 0.55f, 1e-6);  // half way down the cosine
  EXPECT_FLOAT_EQ(lr_schedule(100, 1.0f, 0.1f, 10, 100), 0.1f);
  EXPECT_FLOAT_EQ(lr_schedule(200, 1.0f, 0.1f, 10, 100), 0.1f);
  for (long s = 11; s < 100; ++s)
    EXPECT_LE(lr_schedule(s + 1, 1.0f, 0.1f, 10, 100), lr_schedule(s, 1.0f, 0.1f, 10, 100));
}

}  // namespace
}  // namespace agoq

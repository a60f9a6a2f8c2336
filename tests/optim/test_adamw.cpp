// AdamW, the gradient norm and the learning-rate schedule against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

TEST(AdamW, NormsAreNotDecayedMatricesAre) {
  const LlamaConfig cfg = tiny_cfg();
  ParamSet params(cfg, MemCategory::weights, "test");
  for (const ParamTensor& t : params.named())
    EXPECT_EQ(t.decay, t.shape.size() == 2) << t.name;
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
  for (long s = 11; s < 100; ++s) EXPECT_LE(lr_schedule(s + 1, 1.0f, 0.1f, 10, 100), lr_schedule(s, 1.0f, 0.1f, 10, 100));
}

}  // namespace
}  // namespace agoq

// The AGoQ activation store on the whole model: policies, gradient error against the fp32 store (bounded and
// monotone in bits), unbiasedness of stochastic rounding, and tile-fused encodes equal to whole-tensor encodes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/act_store_cpu.h"
#include "model/llama.h"
#include "model_test_util.h"
#include "quant/stats.h"
#include "tests/common/bits_equal.h"

namespace agoq {
namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.vocab_size = 67, c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 96;
  c.max_seq_len = 32;
  return c;
}
constexpr int kB = 4, kT = 32;

struct Fixture {
  LlamaConfig cfg = small_config();
  std::vector<int32_t> in, tgt;
  std::vector<float> weights;
  Fixture() {
    LlamaModel m(cfg, kB, kT, ActPolicy::parse("fp32", cfg.n_layers));
    m.init_weights(21);
    Rng rng(22);
    for (const ParamTensor& t : m.params().named())
      for (size_t i = 0; i < t.numel(); ++i)
        t.data[i] = t.shape.size() == 1 ? 1.0f + 0.2f * rng.normal() : 5.0f * t.data[i];
    weights.assign(m.params().data(), m.params().data() + m.params().size());
    for (int i = 0; i < kB * kT; ++i) in.push_back(int32_t(rng.below(cfg.vocab_size)));
    for (int i = 0; i < kB * kT; ++i) tgt.push_back(int32_t(rng.below(cfg.vocab_size)));
  }
  // Loss and gradients under a policy, with the store's stochastic-rounding seed.
  std::vector<float> grads(const std::string& policy, uint64_t seed = 1, float* loss = nullptr) const {
    LlamaModel m(cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
    std::copy(weights.begin(), weights.end(), m.params().data());
    m.grads().zero();
    const float l = m.forward_backward(in.data(), tgt.data(), kB, kT, {.act_seed = seed});
    if (loss) *loss = l;
    return std::vector<float>(m.grads().data(), m.grads().data() + m.grads().size());
  }
};

TEST(ActPolicy, NamedPoliciesFollowTheMethod) {
  const ActPolicy a = ActPolicy::parse("agoq", 3);
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(a.at(l, ActSlot::q).format.kind, QuantKind::bf16);
    EXPECT_EQ(a.at(l, ActSlot::attn_out).format.kind, QuantKind::bf16);
    EXPECT_EQ(a.at(l, ActSlot::attn_lse).format.kind, QuantKind::fp32);
    EXPECT_EQ(a.at(l, ActSlot::gate).format, quant_format_int(4, 128, true, QuantRounding::stochastic));
    EXPECT_EQ(a.at(l, ActSlot::attn_norm_in).format.bits, 4);
    EXPECT_FALSE(a.at(l, ActSlot::swiglu_out).stored);
    EXPECT_FALSE(a.at(l, ActSlot::mlp_norm_out).stored);
  }
  const ActPolicy u = ActPolicy::parse("uniform4", 2);
  EXPECT_EQ(u.at(1, ActSlot::k).format.bits, 4);
  EXPECT_EQ(ActPolicy::parse("baseline-bf16", 2).at(0, ActSlot::swiglu_out).format.kind, QuantKind::bf16);
}

TEST(ActPolicy, SpecsOverrideByClassSlotAndLayer) {
  const ActPolicy p =
      ActPolicy::parse("attn=fp32,mlp=8,norm=3,layers[0..1]=2,layers[3].q=int4.g64.asym.rn,swiglu=4", 4);
  EXPECT_EQ(p.at(2, ActSlot::q).format.kind, QuantKind::fp32);
  EXPECT_EQ(p.at(2, ActSlot::gate).format.bits, 8);
  EXPECT_EQ(p.at(2, ActSlot::mlp_norm_in).format.bits, 3);
  EXPECT_EQ(p.at(0, ActSlot::gate).format.bits, 2);
  EXPECT_EQ(p.at(1, ActSlot::attn_norm_in).format.bits, 2);
  EXPECT_EQ(p.at(1, ActSlot::v).format.kind, QuantKind::fp32);  // a layer range leaves attention alone
  EXPECT_EQ(p.at(3, ActSlot::q).format, quant_format_int(4, 64, false, QuantRounding::nearest));
  EXPECT_TRUE(p.at(2, ActSlot::swiglu_out).stored);
  EXPECT_FALSE(p.at(0, ActSlot::attn_norm_out).stored);
}

TEST(ActPolicy, BadSpecsNameTheBadPart) {
  auto message = [](const std::string& spec) {
    try {
      ActPolicy::parse(spec, 4);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("attn=fp7").find("attn=fp7"), std::string::npos);
  EXPECT_NE(message("mlp=4,bogus=4").find("bogus"), std::string::npos);
  EXPECT_NE(message("layers[2..9]=8").find("layers[2..9]"), std::string::npos);
  EXPECT_NE(message("q=recompute").find("cannot be recomputed"), std::string::npos);
  EXPECT_NE(message("agoq4").find("unknown activation policy"), std::string::npos);
  EXPECT_NE(message("mlp=4,gate").find("'gate' is not key=value"), std::string::npos);
}

// The forward pass computes in fp32 whatever the store keeps, so every policy gives the same loss.
TEST(ActQuant, ForwardLossIsIndependentOfThePolicy) {
  Fixture f;
  float l32, lq, l4;
  f.grads("fp32", 1, &l32);
  f.grads("agoq", 1, &lq);
  f.grads("uniform4", 1, &l4);
  EXPECT_EQ(l32, lq);
  EXPECT_EQ(l32, l4);
}

// Gradient error vs the fp32 store when every stored slot uses b bits. Bound: a group of range R stored in b bits
// has step Δ = R / (2^b - 1) and per-element error below Δ (stochastic rounding); for these roughly Gaussian
// activations R is about 6 standard deviations, so the relative error of a stored tensor is below 6 / (2^b - 1).
// A weight gradient is a sum of products of such tensors along two or three saved factors, so its relative error
// stays below 3 x 6 / (2^b - 1). And more bits must always be closer: error(2) > error(3) > error(4) > error(8).
TEST(ActQuant, GradientErrorIsBoundedAndMonotoneInBits) {
  Fixture f;
  const auto ref = f.grads("fp32");
  double prev = 1e30;
  for (int bits : {2, 3, 4, 8}) {
    const std::string b = std::to_string(bits);
    const auto g = f.grads("attn=" + b + ",norm=" + b + ",mlp=" + b, 7);
    const double err = rel_l2(g, ref), bound = 18.0 / ((1 << bits) - 1);
    std::printf("bits %d: gradient relative error %.4f (bound %.4f)\n", bits, err, bound);
    EXPECT_LT(err, bound) << bits << " bits";
    EXPECT_LT(err, prev) << bits << " bits";
    prev = err;
  }
  const double err8 = rel_l2(f.grads("attn=8,norm=8,mlp=8", 7), ref);
  const double err2 = rel_l2(f.grads("attn=2,norm=2,mlp=2", 7), ref);
  EXPECT_LT(err8 * 20, err2);
}

// Stochastic rounding is unbiased, so averaging the gradient over K independent seeds shrinks its error roughly
// like 1/sqrt(K) (down to the small second-order bias of products of two quantized factors); nearest rounding
// gives the same error at every seed.
TEST(ActQuant, StochasticRoundingGradientIsUnbiased) {
  Fixture f;
  const auto ref = f.grads("fp32");
  const int K = 32;
  std::vector<float> mean(ref.size(), 0.0f);
  double single = 0;
  for (int s = 0; s < K; ++s) {
    const auto g = f.grads("uniform4", 100 + s);
    if (s == 0) single = rel_l2(g, ref);
    for (size_t i = 0; i < g.size(); ++i) mean[i] += g[i] / K;
  }
  const double averaged = rel_l2(mean, ref);
  std::printf("uniform4: one seed %.4f, mean of %d seeds %.4f\n", single, K, averaged);
  EXPECT_LT(averaged, single / 3.0);
}

// The store encodes tile by tile while the tile is in cache; the result must be byte-identical to encoding the
// whole fp32 tensor at once with the same key.
TEST(ActQuant, TileFusedEncodesEqualWholeTensorEncodes) {
  Fixture f;
  LlamaModel a(f.cfg, kB, kT, ActPolicy::parse("fp32", f.cfg.n_layers));
  LlamaModel q(f.cfg, kB, kT, ActPolicy::parse("attn=bf16,norm=3,mlp=4,norm_out=8,swiglu=int2.g32.asym.sr", 2));
  std::copy(f.weights.begin(), f.weights.end(), a.params().data());
  std::copy(f.weights.begin(), f.weights.end(), q.params().data());
  a.forward_loss(f.in.data(), f.tgt.data(), kB, kT);
  q.forward_loss(f.in.data(), f.tgt.data(), kB, kT, {.act_seed = 99});
  int compared = 0;
  for (int l = 0; l < f.cfg.n_layers; ++l)
    for (ActSlot s : {ActSlot::attn_norm_in, ActSlot::attn_norm_out, ActSlot::q, ActSlot::k, ActSlot::attn_out,
                      ActSlot::mlp_norm_in, ActSlot::mlp_norm_out, ActSlot::gate, ActSlot::up, ActSlot::swiglu_out}) {
      const QuantizedTensor& stored = dynamic_cast<CpuActStore&>(q.store()).tensor(l, s);
      QuantizedTensor whole(stored.format(), stored.rows(), stored.cols(), MemCategory::workspace);
      quant_encode(whole, a.store().fp32_data(l, s), q.store().slot_seed(l, s));
      ASSERT_EQ(whole.bytes(), stored.bytes());
      EXPECT_TRUE(bits_equal(whole.view().codes, stored.view().codes, whole.bytes()))
          << "layer " << l << " slot " << act_slot_name(s);
      ++compared;
    }
  EXPECT_EQ(compared, 20);
}

// Calibration (for the bit allocator): the store sums, per slot over layers, the range energy of what it saved,
// with the slot's group and symmetry; equal to the energy of the whole fp32 tensors of the reference model.
TEST(ActQuant, CalibrationSumsTheSavedRangeEnergy) {
  Fixture f;
  LlamaModel a(f.cfg, kB, kT, ActPolicy::parse("fp32", f.cfg.n_layers));
  LlamaModel q(f.cfg, kB, kT, ActPolicy::parse("agoq", f.cfg.n_layers));
  std::copy(f.weights.begin(), f.weights.end(), a.params().data());
  std::copy(f.weights.begin(), f.weights.end(), q.params().data());
  a.forward_loss(f.in.data(), f.tgt.data(), kB, kT);
  q.forward_loss(f.in.data(), f.tgt.data(), kB, kT);
  for (double c : q.store().sensitivity()) EXPECT_EQ(c, 0.0);  // off by default
  q.store().set_calibration(true);
  q.forward_loss(f.in.data(), f.tgt.data(), kB, kT);
  const auto& got = q.store().sensitivity();
  for (ActSlot s : {ActSlot::attn_norm_in, ActSlot::gate, ActSlot::up, ActSlot::q, ActSlot::v}) {
    const QuantFormat& fm = q.store().format(0, s);
    const bool qz = fm.kind == QuantKind::int_group;
    double want = 0;
    for (int l = 0; l < f.cfg.n_layers; ++l)
      want += quant_range_energy(a.store().fp32_data(l, s), size_t(kB) * kT, size_t(a.store().cols(s)),
                                 qz ? fm.group : 128, qz ? fm.symmetric : true);
    EXPECT_NEAR(got[int(s)], want, 1e-9 * want) << act_slot_name(s);
    EXPECT_GT(want, 0.0);
  }
  EXPECT_EQ(got[int(ActSlot::swiglu_out)], 0.0);  // recomputed under agoq: nothing saved, nothing measured
}

}  // namespace
}  // namespace agoq

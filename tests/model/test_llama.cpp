// Whole-model checks: loss at init, finite-difference gradients, store formats, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/llama.h"
#include "model_test_util.h"

namespace agoq {
namespace {

LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 61, c.dim = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 40;
  c.max_seq_len = 16;
  return c;
}

struct Batch {
  std::vector<int32_t> in, tgt;
};
Batch random_batch(const LlamaConfig& c, int B, int T, uint64_t seed) {
  Rng rng(seed);
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (int i = 0; i < B * T; ++i)
    b.in[i] = int32_t(rng.below(c.vocab_size)), b.tgt[i] = int32_t(rng.below(c.vocab_size));
  return b;
}

// Larger-than-default weights so attention and the MLP are far from linear and the gradients are not tiny.
void init_for_gradcheck(LlamaModel& m, uint64_t seed) {
  m.init_weights(seed);
  Rng rng(seed + 1);
  for (const ParamTensor& t : m.params().named())
    for (size_t i = 0; i < t.numel(); ++i)
      t.data[i] = t.shape.size() == 1 ? 1.0f + 0.3f * rng.normal() : t.data[i] * 12.0f;
}

TEST(Llama, LossAtInitIsLnVocab) {
  LlamaConfig c = tiny_config();
  c.vocab_size = 512;
  LlamaModel m(c, 2, 16, ActPolicy::parse("fp32", c.n_layers));
  m.init_weights(1);
  Batch b = random_batch(c, 2, 16, 2);
  const float loss = m.forward_loss(b.in.data(), b.tgt.data(), 2, 16);
  EXPECT_NEAR(loss, std::log(512.0), 0.05);
}

// Central differences of the fp32 loss against the analytic gradient, for the largest-gradient elements of every
// tensor. With h = 1e-2 the rounding error is about 1e-7 * loss / h = 5e-5 and the truncation error O(h^2), so
// |fd - g| <= 3% of |g| + 2e-4 leaves room for both; a wrong gradient misses by far more.
TEST(Llama, GradientsMatchFiniteDifferences) {
  const LlamaConfig c = tiny_config();
  const int B = 2, T = 7;
  LlamaModel m(c, B, T, ActPolicy::parse("fp32", c.n_layers));
  init_for_gradcheck(m, 3);
  Batch b = random_batch(c, B, T, 4);
  b.tgt[3] = -1;  // an ignored target
  m.grads().zero();
  m.forward_backward(b.in.data(), b.tgt.data(), B, T);
  const float h = 1e-2f;
  int checked = 0;
  for (const ParamTensor& t : m.params().named()) {
    const float* g = m.grads().data() + (t.data - m.params().data());
    std::vector<size_t> idx(t.numel());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(),
                      [&](size_t a, size_t b2) { return std::fabs(g[a]) > std::fabs(g[b2]); });
    for (int k = 0; k < 3; ++k) {
      const size_t i = idx[k];
      const float saved = t.data[i];
      t.data[i] = saved + h;
      const double lp = m.forward_loss(b.in.data(), b.tgt.data(), B, T);
      t.data[i] = saved - h;
      const double lm = m.forward_loss(b.in.data(), b.tgt.data(), B, T);
      t.data[i] = saved;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[i], fd, 0.03 * std::fabs(fd) + 2e-4) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

std::vector<float> grads_with(const std::string& policy, float* loss_out) {
  const LlamaConfig c = tiny_config();
  LlamaModel m(c, 2, 16, ActPolicy::parse(policy, c.n_layers));
  init_for_gradcheck(m, 5);
  Batch b = random_batch(c, 2, 16, 6);
  m.grads().zero();
  *loss_out = m.forward_backward(b.in.data(), b.tgt.data(), 2, 16);
  return std::vector<float>(m.grads().data(), m.grads().data() + m.grads().size());
}

// bf16 keeps 8 mantissa bits (relative rounding error <= 2^-9 per saved value), so the gradient moves by a small
// multiple of that; the loss is computed in fp32 either way and must be identical.
TEST(Llama, Bf16StoreChangesGradientsOnlyByRounding) {
  float loss32, loss16;
  const auto g32 = grads_with("fp32", &loss32);
  const auto g16 = grads_with("baseline-bf16", &loss16);
  EXPECT_EQ(loss32, loss16);
  const double err = rel_l2(g16, g32);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 2e-2);
}

TEST(Llama, ForwardBackwardIsDeterministic) {
  float l1, l2;
  const auto a = grads_with("fp32", &l1);
  const auto b = grads_with("fp32", &l2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(a, b);
}

TEST(Llama, GradScaleAndAccumulationAddUp) {
  // Two calls with scale 0.5 on the same batch equal one call with scale 1.
  const LlamaConfig c = tiny_config();
  LlamaModel m(c, 2, 8, ActPolicy::parse("fp32", c.n_layers));
  init_for_gradcheck(m, 7);
  Batch b = random_batch(c, 2, 8, 8);
  m.grads().zero();
  m.forward_backward(b.in.data(), b.tgt.data(), 2, 8);
  std::vector<float> once(m.grads().data(), m.grads().data() + m.grads().size());
  m.grads().zero();
  m.forward_backward(b.in.data(), b.tgt.data(), 2, 8, {.grad_scale = 0.5f});
  m.forward_backward(b.in.data(), b.tgt.data(), 2, 8, {.grad_scale = 0.5f});
  std::vector<float> twice(m.grads().data(), m.grads().data() + m.grads().size());
  EXPECT_LT(rel_l2(twice, once), 1e-6);
}

TEST(Llama, RejectsOutOfRangeTokens) {
  const LlamaConfig c = tiny_config();
  LlamaModel m(c, 1, 4, ActPolicy::parse("fp32", c.n_layers));
  std::vector<int32_t> in = {1, 2, 61, 3}, tgt = {1, 2, 3, 4};
  EXPECT_THROW(m.forward_loss(in.data(), tgt.data(), 1, 4), Error);
}

// Scoring and sampling run a forward-only model: it gives the training model's loss bit for bit, holds no gradient
// buffer, stores only the forward's fp32 statistics (rstd, the log-sum-exp) and the workspace its list says, and
// refuses a backward pass.
TEST(Llama, ForwardOnlyScoresAsTrainingAndKeepsNothing) {
  const LlamaConfig c = tiny_config();
  const int B = 2, T = 16;
  const ActPolicy policy = ActPolicy::forward_only(c.n_layers);
  const Batch b = random_batch(c, B, T, 9);
  LlamaModel train(c, B, T, ActPolicy::parse("fp32", c.n_layers));
  train.init_weights(4);
  const float want = train.forward_loss(b.in.data(), b.tgt.data(), B, T);
  const MemSnapshot before = MemoryTracker::global().current();
  LlamaModel m(c, B, T, policy);
  const MemSnapshot held = MemoryTracker::global().current();
  m.init_weights(4);
  const float got = m.forward_loss(b.in.data(), b.tgt.data(), B, T);
  EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << got << " vs " << want;
  auto grew = [&](MemCategory cat) { return held.bytes[int(cat)] - before.bytes[int(cat)]; };
  const ModelStage whole = model_stage_whole(c);
  EXPECT_EQ(grew(MemCategory::gradients), 0u);
  EXPECT_EQ(grew(MemCategory::activations),
            act_store_bytes(policy, c, size_t(B) * T, true) + act_store_bytes(policy, c, size_t(B) * T, false));
  EXPECT_EQ(act_store_bytes(policy, c, size_t(B) * T, false), size_t(2 * c.n_layers * B * T) * sizeof(float));
  EXPECT_EQ(grew(MemCategory::workspace), llama_workspace_bytes(c, B, T, policy, whole));
  EXPECT_LT(llama_workspace_bytes(c, B, T, policy, whole),
            llama_workspace_bytes(c, B, T, ActPolicy::parse("fp32", c.n_layers), whole));
  EXPECT_THROW(m.stage_backward_begin(B, T, {}), Error);
  EXPECT_THROW(m.stage_head(b.tgt.data(), B, T, {}, true), Error);
}

// Scoring runs the last layer's o_proj and MLP and the head on the target rows only (moved to the front of the
// residual stream): each target row's log-probability equals the loss of a forward pass over every row that counts
// that row alone, on rows spread over two sequences (not at the front), for a forward-only and a training model.
TEST(Llama, TargetLogprobsEqualTheFullForwardsLoss) {
  const LlamaConfig c = tiny_config();
  const int B = 2, T = 12;
  Batch b = random_batch(c, B, T, 21);
  std::vector<int32_t> tgt(b.tgt.size(), -1);
  for (int i : {3, 4, 9, 14, 20, 23}) tgt[size_t(i)] = b.tgt[size_t(i)];
  for (const ActPolicy& policy : {ActPolicy::forward_only(c.n_layers), ActPolicy::parse("fp32", c.n_layers)}) {
    LlamaModel m(c, B, T, policy);
    m.init_weights(8);
    std::vector<float> lp(tgt.size(), 0.0f);
    std::vector<uint8_t> greedy(tgt.size(), 0);
    m.forward_target_logprobs(b.in.data(), tgt.data(), B, T, {}, lp.data(), greedy.data());
    for (size_t i = 0; i < tgt.size(); ++i) {
      if (tgt[i] < 0) continue;
      std::vector<int32_t> one(tgt.size(), -1);
      one[i] = tgt[i];
      const float want = -m.forward_loss(b.in.data(), one.data(), B, T);
      EXPECT_NEAR(lp[i], want, 1e-5 * std::abs(want)) << policy.name << " row " << i;
    }
  }
}

// Scoring's shared contexts: a context of 9 tokens and three continuations in one pass (the context but its last
// token once, then each continuation from that token on, skipping the others) give each continuation token the
// log-probability and greedy flag it has when its request runs as a document of its own. A training model refuses
// the gaps.
TEST(Llama, SharedContextScoresAsEachRequestAlone) {
  LlamaConfig c = tiny_config();
  c.max_seq_len = 64;
  Rng rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(size_t(n), 0);
    for (int32_t& x : t) x = int32_t(rng.below(c.vocab_size));
    return t;
  };
  const std::vector<int32_t> ctx = tokens(9);
  const std::vector<std::vector<int32_t>> conts = {tokens(4), tokens(1), tokens(6)};
  // Alone: each request (ctx + cont)[:-1] its own document. Shared: ctx[:-1], then [ctx.back()] + cont[:-1] each.
  std::vector<int32_t> in_alone, tgt_alone, doc_alone, in_shared(ctx.begin(), ctx.end() - 1), doc_shared, gaps;
  std::vector<int32_t> tgt_shared(ctx.size() - 1, -1);
  for (size_t r = 0; r + 1 < ctx.size(); ++r) gaps.insert(gaps.end(), {0, 0});
  for (const auto& cont : conts) {
    const int32_t start = int32_t(in_alone.size()), branch = int32_t(in_shared.size());
    in_alone.insert(in_alone.end(), ctx.begin(), ctx.end());
    in_alone.insert(in_alone.end(), cont.begin(), cont.end() - 1);
    tgt_alone.insert(tgt_alone.end(), ctx.size() - 1, -1);
    tgt_alone.insert(tgt_alone.end(), cont.begin(), cont.end());
    doc_alone.resize(in_alone.size(), start);
    in_shared.push_back(ctx.back());
    in_shared.insert(in_shared.end(), cont.begin(), cont.end() - 1);
    tgt_shared.insert(tgt_shared.end(), cont.begin(), cont.end());
    gaps.resize(2 * in_shared.size(), 0);
    for (size_t r = size_t(branch); r < in_shared.size(); ++r)
      gaps[2 * r] = int32_t(ctx.size() - 1), gaps[2 * r + 1] = branch;
  }
  doc_shared.assign(in_shared.size(), 0);
  auto score = [&](LlamaModel& m, std::vector<int32_t>& in, std::vector<int32_t>& tgt, std::vector<int32_t>& doc,
                   const int32_t* g) {
    MicroBatchRun run;
    run.doc_start = doc.data(), run.gaps = g;
    std::vector<float> lp(in.size(), 0.0f), picked;
    std::vector<uint8_t> greedy(in.size(), 0), picked_greedy;
    m.forward_target_logprobs(in.data(), tgt.data(), 1, int(in.size()), run, lp.data(), greedy.data());
    for (size_t i = 0; i < in.size(); ++i)
      if (tgt[i] >= 0) picked.push_back(lp[i]), picked_greedy.push_back(greedy[i]);
    return std::pair{picked, picked_greedy};
  };
  LlamaModel m(c, 1, c.max_seq_len, ActPolicy::forward_only(c.n_layers));
  m.init_weights(6);
  ASSERT_TRUE(m.shares_contexts());
  const auto [want, want_greedy] = score(m, in_alone, tgt_alone, doc_alone, nullptr);
  const auto [got, got_greedy] = score(m, in_shared, tgt_shared, doc_shared, gaps.data());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << i;
  EXPECT_EQ(got_greedy, want_greedy);

  LlamaModel train(c, 1, c.max_seq_len, ActPolicy::parse("fp32", c.n_layers));
  train.init_weights(6);
  EXPECT_FALSE(train.shares_contexts());
  EXPECT_THROW(score(train, in_shared, tgt_shared, doc_shared, gaps.data()), Error);
}

}  // namespace
}  // namespace agoq

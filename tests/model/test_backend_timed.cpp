// `agoq train --profile`'s backend (model/backend_timed.h): it only forwards, so the model computes the same bits
// through it, and every op class the model runs gets time (the head's matmuls counted as the head's).
#include <gtest/gtest.h>

#include <vector>

#include "../common/bits_equal.h"
#include "core/rng.h"
#include "model/backend_timed.h"
#include "model/llama.h"

namespace agoq {
namespace {

TEST(TimedBackend, SameBitsAndEveryClassTimed) {
  LlamaConfig cfg;
  cfg.vocab_size = 512, cfg.dim = 64, cfg.n_layers = 2, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.ffn_dim = 128;
  cfg.max_seq_len = 32;
  const int B = 2, T = 32;
  const ActPolicy pol = ActPolicy::parse("agoq", cfg.n_layers);
  TimedBackend timed(model_backend_cpu());
  LlamaModel plain(cfg, B, T, pol), through(timed, cfg, B, T, pol);
  timed.head_weights_are(through.params().lm_head, size_t(cfg.vocab_size) * cfg.dim);
  plain.init_weights(5), through.init_weights(5);
  Rng rng(2);
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i)
    in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  timed.take();
  const float a = plain.forward_backward(in.data(), tgt.data(), B, T, {.act_seed = 3});
  const float b = through.forward_backward(in.data(), tgt.data(), B, T, {.act_seed = 3});
  const OpSeconds s = timed.take();
  EXPECT_EQ(a, b);
  EXPECT_TRUE(bits_equal(plain.grads().data(), through.grads().data(), plain.grads().size() * sizeof(float)));
  for (int c = 0; c < kOpClassCount; ++c) EXPECT_GT(s.s[c], 0.0) << op_class_name(OpClass(c));
  EXPECT_EQ(timed.take().total(), 0.0);  // take starts a fresh count
}

}  // namespace
}  // namespace agoq

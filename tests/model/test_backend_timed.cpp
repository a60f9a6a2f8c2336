// `agoq train --profile`'s and `bench ops`'s backend (model/backend_timed.h): it only forwards, so the model
// computes the same bits through it, and every op class the model runs gets time (the head's matmuls counted as the
// head's); its calls are rated by the op table's cost column, whose GEMM and attention FLOPs over a pass are the
// model's own, counted here from its shapes; a device's queue is waited for around each call, so a call's time is
// its run's.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "../common/bits_equal.h"
#include "../common/device_like_backend.h"
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

TEST(TimedBackend, CallsAreRatedByTheOpTable) {
  LlamaConfig cfg;
  cfg.vocab_size = 512, cfg.dim = 64, cfg.n_layers = 2, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.ffn_dim = 96;
  cfg.max_seq_len = 32;
  const int B = 2, T = 32, N = B * T, C = cfg.dim, L = cfg.n_layers, hd = cfg.head_dim();
  TimedBackend timed(model_backend_cpu());
  LlamaModel model(timed, cfg, B, T, ActPolicy::parse("fp32", cfg.n_layers));
  model.init_weights(5);
  std::vector<int32_t> in(N), tgt(N);
  for (int i = 0; i < N; ++i) in[i] = i % cfg.vocab_size, tgt[i] = (7 * i) % cfg.vocab_size;
  model.forward_backward(in.data(), tgt.data(), B, T);
  std::map<ModelOp, OpCalls> by_op;
  bool head_shape = false;  // the lm_head's GEMM keyed by its rows, dim and vocabulary
  for (const auto& [key, c] : timed.take_calls()) {
    OpCalls& o = by_op[key.first];
    o.calls += c.calls, o.seconds += c.seconds, o.flops += c.flops, o.bytes += c.bytes;
    EXPECT_GT(c.bytes, 0.0) << model_op_name(key.first) << " " << key.second;
    std::string tail = "x";  // built by appends: g++ 12 warns (-Wrestrict) on "x" + std::to_string
    tail += std::to_string(C) + "x" + std::to_string(cfg.vocab_size);
    if (key.first == ModelOp::matmul_forward && key.second.size() > tail.size() &&
        key.second.compare(key.second.size() - tail.size(), tail.size(), tail) == 0)
      head_shape = true;
  }
  EXPECT_TRUE(head_shape);
  // Each layer's matmul weights (q, k, v, o, gate, up, down) and the lm_head, every token through each once
  // forward; backward twice that (the input's gradient and the weight's).
  const double weights =
      double(L) * (2.0 * C * C + 2.0 * C * cfg.kv_dim() + 3.0 * C * cfg.ffn_dim) + double(C) * cfg.vocab_size;
  EXPECT_DOUBLE_EQ(by_op[ModelOp::matmul_forward].flops, 2.0 * N * weights);
  EXPECT_DOUBLE_EQ(by_op[ModelOp::matmul_backward].flops, 4.0 * N * weights);
  EXPECT_DOUBLE_EQ(by_op[ModelOp::attention_forward].flops, L * 2.0 * B * cfg.n_heads * T * T * hd);
  EXPECT_DOUBLE_EQ(by_op[ModelOp::attention_backward].flops, 2.5 * by_op[ModelOp::attention_forward].flops);
  EXPECT_EQ(by_op[ModelOp::rmsnorm_forward].flops, 0.0);  // memory-bound: bytes only
  EXPECT_TRUE(timed.take_calls().empty());                // take_calls starts a fresh count
}

TEST(TimedBackend, WaitsForTheDeviceAroundEveryCall) {
  LlamaConfig cfg;
  cfg.vocab_size = 128, cfg.dim = 32, cfg.n_layers = 1, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.ffn_dim = 48;
  cfg.max_seq_len = 16;
  const int B = 2, T = 16;
  DeviceLikeBackend device;
  TimedBackend timed(device);
  LlamaModel model(timed, cfg, B, T, ActPolicy::parse("agoq", cfg.n_layers));
  model.init_weights(5);
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = i % cfg.vocab_size, tgt[i] = (3 * i) % cfg.vocab_size;
  timed.take_calls();
  device.synchronizes = 0;
  model.forward_backward(in.data(), tgt.data(), B, T);
  long calls = 0;
  for (const auto& [key, c] : timed.take_calls()) calls += c.calls;
  ASSERT_GT(calls, 0);
  // Before and after each op, and each store call and zeroing (timed, not rated).
  EXPECT_GE(device.synchronizes, size_t(2 * calls));
  EXPECT_EQ(device.synchronizes % 2, 0u);
}

}  // namespace
}  // namespace agoq

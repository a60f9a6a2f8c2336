// The model's device paths, on the CPU: a backend with the CPU's ops that presents its memory as a device's
// (MemDevice::cuda's tracker, host_memory() false). The model then takes every path a GPU backend takes -- token
// ids and targets copied in, per-row losses and logits copied out, weights made on the host and uploaded,
// parameters and gradients as views of backend buffers, activation stores from the backend -- and, computing with
// the same ops in the same order, must give the CPU model's bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/llama.h"
#include "tests/common/device_like_backend.h"

namespace agoq {
namespace {

constexpr int kB = 2, kT = 16;

LlamaConfig small_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 80, c.dim = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 48;
  c.max_seq_len = kT, c.tie_embeddings = tied;
  return c;
}

std::vector<float> flat(ModelBackend& be, LlamaModel& m, float* p) {
  std::vector<float> h(model_stage_param_count(m.config(), m.stage()));
  be.download(h.data(), p, h.size() * sizeof(float));
  return h;
}

TEST(ModelBackend, DevicePathsGiveTheCpuModelsBits) {
  for (bool tied : {false, true})
    for (const char* policy : {"fp32", "agoq"}) {
      const LlamaConfig cfg = small_config(tied);
      Rng rng(9);
      std::vector<int32_t> in(kB * kT), tgt(kB * kT);
      for (int i = 0; i < kB * kT; ++i) in[i] = int32_t(rng.below(80)), tgt[i] = int32_t(rng.below(80));
      tgt[5] = -1;
      DeviceLikeBackend dev;
      const MemSnapshot before = MemoryTracker::of(MemDevice::cuda).current();
      LlamaModel c(cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
      LlamaModel d(dev, cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
      const MemSnapshot after = MemoryTracker::of(MemDevice::cuda).current();
      c.init_weights(5), d.init_weights(5);
      const float lc = c.forward_backward(in.data(), tgt.data(), kB, kT, {.act_seed = 3});
      const size_t uploads = dev.uploads;
      const float ld = d.forward_backward(in.data(), tgt.data(), kB, kT, {.act_seed = 3});
      const std::string what = std::string(policy) + (tied ? ", tied" : "");
      EXPECT_EQ(ld, lc) << what;
      EXPECT_GT(dev.uploads, uploads) << what;  // the ids went to the "device"
      EXPECT_EQ(flat(dev, d, d.params_flat()),
                std::vector<float>(c.params().data(), c.params().data() + c.params().size()))
          << what;
      EXPECT_EQ(flat(dev, d, d.grads_flat()), std::vector<float>(c.grads().data(), c.grads().data() + c.grads().size()))
          << what;
      EXPECT_EQ(d.forward_loss(in.data(), tgt.data(), kB, kT), c.forward_loss(in.data(), tgt.data(), kB, kT)) << what;
      std::vector<float> zc(cfg.vocab_size), zd(cfg.vocab_size);
      c.forward_last_logits(in.data(), kT, zc.data());
      d.forward_last_logits(in.data(), kT, zd.data());
      EXPECT_EQ(zd, zc) << what;
      // Every buffer of the model is the backend's (the store is the one store_make gave, here the CPU's): its
      // weights, gradients, and the workspace the memory model counts plus the two copies of the token ids.
      auto grew = [&](MemCategory k) { return after.bytes[size_t(k)] - before.bytes[size_t(k)]; };
      const size_t params = model_stage_param_count(cfg, d.stage()) * sizeof(float);
      EXPECT_EQ(grew(MemCategory::weights), params);
      EXPECT_EQ(grew(MemCategory::gradients), params);
      EXPECT_EQ(grew(MemCategory::workspace),
                llama_workspace_bytes(cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers), d.stage()) +
                    2 * size_t(kB) * kT * sizeof(int32_t));
    }
}

TEST(ModelBackend, ADeviceRefusesWhatOnlyTheHostDoes) {
  DeviceLikeBackend dev;
  const LlamaConfig cfg = small_config(false);
  const ActPolicy policy = ActPolicy::parse("fp32", cfg.n_layers);
  const ModelStage whole = model_stage_whole(cfg);
  const ModelStage shard = model_stage_shard(cfg, whole, 2, 0, false);
  auto refused = [&](const ModelStage& stage, const std::vector<ParamSegment>& storage) {
    try {
      LlamaModel m(cfg, kB, kT, policy, stage, 1, storage, nullptr, dev);
    } catch (const Error& e) {
      return std::string(e.what()).find("runs unsharded") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(shard, {}));
  const size_t n = model_stage_param_count(cfg, whole);
  std::vector<float> storage(n);
  EXPECT_TRUE(refused(whole, {{0, 100, nullptr}, {100, n, storage.data() + 100}}));  // a sparse embedding
  // A store's dense storage: the store holds the gradients.
  LlamaModel ok(cfg, kB, kT, policy, whole, 1, GradStoreView({{0, n, storage.data()}}), nullptr, dev);
  EXPECT_EQ(ok.grads_flat(), nullptr);
  LlamaModel m(dev, cfg, kB, kT, ActPolicy::parse("agoq", cfg.n_layers));
  m.store().set_calibration(true);  // the CPU store: calibration works wherever its memory is
  EXPECT_GT(m.store().stored_bytes(false), 0u);
}

}  // namespace
}  // namespace agoq

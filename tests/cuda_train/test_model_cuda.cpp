// The whole model on the GPU (cuda_train/backend_cuda.h) against the same model on the CPU: the same weights
// (init_weights makes them on the host for both), the same tokens, the same stochastic-rounding seed. The bounds, per
// gradient tensor as max |gpu − cpu| over max |cpu|:
//   * fp32 GEMMs, the fp32 store: 1e-4, the op tests' backward bound (each op agrees to ~1e-6; a few layers of
//     them compound it);
//   * fp32 GEMMs, the bf16 and agoq stores: the stored tensors are the same bf16 values or codes except where an
//     input differs by rounding and lands on the other side of a rounding boundary; each such flip moves one value
//     by one step, so the bound is on the whole gradient's relative L2 error, 1e-2, a quarter of agoq's own error
//     against fp32 on the CPU (0.04, tests/model/test_act_quant.cpp);
//   * bf16 GEMMs: each GEMM input rounded to 8 significant bits (relative error ≤ 2⁻⁹ = 0.2%), products summed in
//     fp32; through the layers the gradients' relative L2 error stays within 3e-2, the loss within 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "cuda_train/backend_cuda.h"
#include "cuda_train/grad_store_cuda.h"
#include "model/gemm_bf16.h"
#include "model/llama.h"
#include "tests/common/store_backward.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

constexpr int kB = 2, kT = 16;

LlamaConfig small_config(bool tied = false) {
  LlamaConfig c;
  c.vocab_size = 96, c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 96;
  c.max_seq_len = 32, c.tie_embeddings = tied;
  return c;
}

struct Batch {
  std::vector<int32_t> in, tgt;
  explicit Batch(int vocab, uint64_t seed = 5) {
    Rng rng(seed);
    for (int i = 0; i < kB * kT; ++i) in.push_back(int32_t(rng.below(vocab)));
    for (int i = 0; i < kB * kT; ++i) tgt.push_back(int32_t(rng.below(vocab)));
    tgt[3] = -1;  // an ignored target
  }
};

struct Result {
  float loss = 0;
  std::vector<float> grads;  // the flat layout
};

std::vector<float> flat_download(LlamaModel& m, float* flat) {
  std::vector<float> h(model_stage_param_count(m.config(), m.stage()));
  m.backend().download(h.data(), flat, h.size() * sizeof(float));
  return h;
}

Result run(ModelBackend& be, const LlamaConfig& cfg, const std::string& policy, const Batch& b) {
  LlamaModel m(be, cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
  m.init_weights(11);
  Result r;
  r.loss = m.forward_backward(b.in.data(), b.tgt.data(), kB, kT, {.act_seed = 77});
  r.grads = flat_download(m, m.grads_flat());
  return r;
}

// max |a − b| / max |b| of each tensor of the layout; the worst one.
double worst_tensor_error(const LlamaConfig& cfg, const std::vector<float>& a, const std::vector<float>& b,
                          std::string* which) {
  ParamSet layout(cfg, MemCategory::workspace, "test");
  double worst = 0;
  for (const ParamTensor& t : layout.named()) {
    const size_t off = size_t(t.data - layout.data());
    double diff = 0, scale = 0;
    for (size_t i = off; i < off + t.numel(); ++i)
      diff = std::max(diff, double(std::fabs(a[i] - b[i]))), scale = std::max(scale, double(std::fabs(b[i])));
    const double e = scale > 0 ? diff / scale : diff;
    if (e > worst) worst = e, *which = t.name;
  }
  return worst;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

TEST(ModelCuda, Fp32GemmsGiveTheCpuLossAndEveryGradient) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  for (bool tied : {false, true}) {
    const LlamaConfig cfg = small_config(tied);
    const Batch b(cfg.vocab_size);
    const Result c = run(model_backend_cpu(), cfg, "fp32", b), g = run(gpu, cfg, "fp32", b);
    EXPECT_NEAR(g.loss, c.loss, 1e-5 * std::fabs(c.loss)) << (tied ? "tied" : "");
    std::string which;
    EXPECT_LE(worst_tensor_error(cfg, g.grads, c.grads, &which), 1e-4) << which;
    for (const char* policy : {"baseline-bf16", "agoq"}) {  // stored values may round the other way: L2
      const Result cq = run(model_backend_cpu(), cfg, policy, b), gq = run(gpu, cfg, policy, b);
      EXPECT_NEAR(gq.loss, cq.loss, 1e-4 * std::fabs(cq.loss)) << policy;
      EXPECT_LE(rel_l2(gq.grads, cq.grads), 1e-2) << policy;
    }
  }
}

TEST(ModelCuda, Bf16GemmsStayWithinBf16Rounding) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::bf16);
  const LlamaConfig cfg = small_config();
  const Batch b(cfg.vocab_size);
  for (const char* policy : {"baseline-bf16", "agoq"}) {
    const Result c = run(model_backend_cpu(), cfg, policy, b), g = run(gpu, cfg, policy, b);
    EXPECT_NEAR(g.loss, c.loss, 1e-2 * std::fabs(c.loss)) << policy;
    EXPECT_LE(rel_l2(g.grads, c.grads), 3e-2) << policy;
  }
}

// The GPU's bf16 GEMMs against the CPU's (oneDNN, model_backend_cpu_bf16): both round the same fp32 inputs to
// nearest-even bf16 and accumulate in fp32. The CPU's attention multiplies bf16 tiles too (its probabilities
// rounded to bf16, 2^-9 relative), the GPU's fp32 ones: the bounds are the bf16 attention's (tests/common/
// op_cases_attention.h's attention_tol: 2^-7 forward, 2^-6 on gradients), the loss a sum of logs of the forward's
// outputs.
TEST(ModelCuda, Bf16GemmsEqualTheCpusBf16Gemms) {
  AGOQ_REQUIRE_GPU();
  std::string isa;
  if (!gemm_bf16_supported(&isa)) GTEST_SKIP() << "this CPU has no native bf16 products (" << isa << ")";
  CudaBackend gpu(GemmPrecision::bf16);
  const std::unique_ptr<ModelBackend> cpu = model_backend_cpu_bf16();
  const LlamaConfig cfg = small_config();
  const Batch b(cfg.vocab_size);
  const Result c = run(*cpu, cfg, "fp32", b), g = run(gpu, cfg, "fp32", b);
  EXPECT_NEAR(g.loss, c.loss, 0x1p-7 * std::fabs(c.loss));
  EXPECT_LE(rel_l2(g.grads, c.grads), 0x1p-6);
}

TEST(ModelCuda, ForwardLossAndLastLogitsEqualTheCpu) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  const LlamaConfig cfg = small_config(true);
  const Batch b(cfg.vocab_size);
  const ActPolicy policy = ActPolicy::parse("fp32", cfg.n_layers);
  LlamaModel c(cfg, kB, kT, policy), g(gpu, cfg, kB, kT, policy);
  c.init_weights(3), g.init_weights(3);
  const float loss = c.forward_loss(b.in.data(), b.tgt.data(), kB, kT);
  EXPECT_NEAR(g.forward_loss(b.in.data(), b.tgt.data(), kB, kT), loss, 1e-5 * std::fabs(loss));
  std::vector<float> lc(cfg.vocab_size), lg(cfg.vocab_size);
  c.forward_last_logits(b.in.data(), kT, lc.data());
  g.forward_last_logits(b.in.data(), kT, lg.data());
  float scale = 0;
  for (float x : lc) scale = std::max(scale, std::fabs(x));
  for (int v = 0; v < cfg.vocab_size; ++v) EXPECT_NEAR(lg[v], lc[v], 1e-5 * scale) << "logit " << v;
  // The weights were made on the host for both: the same bits.
  EXPECT_EQ(flat_download(g, g.params_flat()),
            std::vector<float>(c.params().data(), c.params().data() + c.params().size()));
}

// The store holds the CPU's bytes per policy, and every device byte of the model is counted, by category.
TEST(ModelCuda, DeviceBytesAreTheCpuModelsBytes) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  const LlamaConfig cfg = small_config();
  for (const char* policy : {"fp32", "baseline-bf16", "agoq"}) {
    const MemSnapshot before = MemoryTracker::of(MemDevice::cuda).current();
    LlamaModel g(gpu, cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
    LlamaModel c(cfg, kB, kT, ActPolicy::parse(policy, cfg.n_layers));
    const MemSnapshot after = MemoryTracker::of(MemDevice::cuda).current();
    for (bool attention : {false, true})
      EXPECT_EQ(g.store().stored_bytes(attention), c.store().stored_bytes(attention)) << policy;
    const size_t params = model_stage_param_count(cfg, g.stage()) * sizeof(float);
    auto grew = [&](MemCategory k) { return after.bytes[size_t(k)] - before.bytes[size_t(k)]; };
    EXPECT_EQ(grew(MemCategory::weights), params);
    EXPECT_EQ(grew(MemCategory::gradients), params);
    EXPECT_EQ(grew(MemCategory::activations), c.store().stored_bytes(false) + c.store().stored_bytes(true));
  }
}

// The 8-bit store on the device: two micro-batches folded into INT8 blocks against the same two accumulated in fp32,
// unit by unit. Stochastic rounding moves a value by less than one step of its block, max |block| / 127: the first
// fold's step is at most max |g1| / 127, the second's (max |g1 + g2| + the first error) / 127, so the bound below is
// (max |g1| + max |g1 + g2|) / 127 of the unit, with 5% for the second step's growth. Its device bytes are exactly
// the codes, the block scales and one unit's fp32 scratch (the largest; untied, the embedding shares it).
TEST(ModelCuda, EightBitGradientStoreHoldsTheFp32Gradients) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  const LlamaConfig cfg = small_config();
  const Batch b1(cfg.vocab_size, 5), b2(cfg.vocab_size, 6);
  const ActPolicy policy = ActPolicy::parse("fp32", cfg.n_layers);
  const ModelStage whole = model_stage_whole(cfg);
  LlamaModel plain(gpu, cfg, kB, kT, policy);
  plain.init_weights(4);
  const MemSnapshot before = MemoryTracker::of(MemDevice::cuda).current();
  CudaGradStore store(gpu, cfg, whole, 256, QuantRounding::stochastic);
  const MemSnapshot after = MemoryTracker::of(MemDevice::cuda).current();
  LlamaModel q8(cfg, kB, kT, policy, whole, 1, store.model_storage(), nullptr, gpu);
  q8.init_weights(4);
  std::vector<float> first;
  for (const Batch* b : {&b1, &b2}) {
    plain.forward_backward(b->in.data(), b->tgt.data(), kB, kT, {.act_seed = 1});
    if (first.empty()) first = flat_download(plain, plain.grads_flat());
    const MicroBatchRun run{.act_seed = 1, .grad_first = b == &b1, .grad_seed = 99};
    store_forward_backward(q8, store, b->in.data(), b->tgt.data(), kB, kT, run);
  }
  const std::vector<float> want = flat_download(plain, plain.grads_flat());
  size_t bytes = 0, largest = 0;
  for (int u = 0; u < store.unit_count(); ++u) {
    const ParamSegment& r = store.unit(u);
    std::vector<float> got(r.end - r.begin);
    gpu.download(got.data(), store.unit_fp32(u), got.size() * sizeof(float));
    float g1 = 0, sum = 0, diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      g1 = std::max(g1, std::fabs(first[r.begin + i])), sum = std::max(sum, std::fabs(want[r.begin + i]));
      diff = std::max(diff, std::fabs(got[i] - want[r.begin + i]));
    }
    EXPECT_LE(diff, 1.05f * (g1 + sum) / 127) << "unit " << u;
    bytes += got.size() + grad_q8_blocks(got.size(), 256) * sizeof(float);
    largest = std::max(largest, got.size());
  }
  EXPECT_EQ(after.bytes[size_t(MemCategory::gradients)] - before.bytes[size_t(MemCategory::gradients)],
            bytes + largest * sizeof(float));
}

TEST(ModelCuda, RefusesWhatOnlyTheHostCanDo) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  const LlamaConfig cfg = small_config();
  const ModelStage shard = model_stage_shard(cfg, model_stage_whole(cfg), 2, 0, false);
  try {
    LlamaModel m(cfg, kB, kT, ActPolicy::parse("fp32", cfg.n_layers), shard, 1, {}, nullptr, gpu);
    FAIL() << "a tensor-parallel shard on the GPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsharded"), std::string::npos) << e.what();
  }
  LlamaModel m(gpu, cfg, kB, kT, ActPolicy::parse("agoq", cfg.n_layers));
  EXPECT_THROW(m.store().set_calibration(true), Error);
}

}  // namespace
}  // namespace agoq

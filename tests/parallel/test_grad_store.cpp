// The 8-bit gradient store on a pipeline's first stage: the embedding's gradient, handed over in sparse form, is
// folded in pieces of vocabulary rows through a scratch no larger than a decoder layer, with the bits of the
// dense gradient folded whole; and the memory model counts that scratch to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../common/bits_equal.h"
#include "core/rng.h"
#include "model/llama.h"
#include "model/ops.h"
#include "parallel/grad_store.h"
#include "plan/memory_model.h"
#include "quant/grad_q8.h"

namespace agoq {
namespace {

LlamaConfig wide_vocab_cfg() {
  LlamaConfig c;
  c.vocab_size = 2048, c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 128;
  c.max_seq_len = 32;
  return c;
}

GradQ8Options fold_options(uint64_t seed, int unit) {
  GradQ8Options o;
  o.block = 256, o.rounding = QuantRounding::stochastic, o.seed = {seed, uint64_t(unit)};
  return o;
}

// unit_ready's fold of a whole dense unit: the reference.
void fold_dense(GradQ8Buffer& q, const float* g, bool first, uint64_t seed, int unit) {
  if (first) grad_q8_quantize(g, q.n, q.codes.data(), q.scales.data(), fold_options(seed, unit));
  else grad_q8_accumulate(q.codes.data(), q.scales.data(), g, q.n, fold_options(seed, unit));
}

void expect_same_q8(const GradQ8Buffer& got, const GradQ8Buffer& want, const std::string& what) {
  EXPECT_TRUE(bits_equal(got.codes.data(), want.codes.data(), got.codes.bytes())) << what;
  EXPECT_TRUE(bits_equal(got.scales.data(), want.scales.data(), got.scales.bytes())) << what;
}

// Stage 0 of 2 (the embedding and one layer; the embedding's vocabulary shard is 3.5x the layer), whole and as TP
// shard 1 of 2 (vocabulary rows from 1024): two micro-batches' sparse gradients folded in pieces, against the
// dense gradient (the tokens' rows scattered into the whole shard) folded whole with the same seeds.
TEST(GradStore, FirstStageEmbeddingFoldsInPiecesWithTheDenseBits) {
  const LlamaConfig cfg = wide_vocab_cfg();
  const int N = 64;
  for (int tp : {1, 2}) {
    SCOPED_TRACE("TP " + std::to_string(tp));
    const ModelStage st = model_stage_shard(cfg, model_stages_split(cfg, 2)[0], tp, tp - 1);
    const ShardDims d = model_shard_dims(cfg, st);
    MemoryTracker& tr = MemoryTracker::global();
    tr.reset_peaks();
    const size_t scratch_before = tr.tag_peak("grad.scratch");
    GradStore store(cfg, st, {GradStoreKind::q8, 256, QuantRounding::stochastic});
    const std::vector<GradRange>& units = store.units();
    ASSERT_GT(store.pieces(0).size(), 2u);
    // The scratch holds the layer unit (the largest but the embedding), not the embedding.
    EXPECT_EQ(tr.tag_peak("grad.scratch") - scratch_before, units[1].size() * sizeof(float));
    EXPECT_LT(units[1].size() * 3, units[0].size());

    GradQ8Buffer want(units[0].size(), 256, MemCategory::gradients, "test");
    std::vector<float> dense(units[0].size());
    Rng rng(17);
    std::vector<int32_t> tokens(N);
    std::vector<float> dout(size_t(N) * cfg.dim);
    for (int j = 0; j < 2; ++j) {
      for (int32_t& t : tokens) t = int32_t(rng.below(cfg.vocab_size));
      tokens[1] = tokens[0];  // a token twice: its rows add
      for (float& x : dout) x = rng.normal();
      store.embedding_fold(dout.data(), tokens.data(), N, j == 0, 100 + j);
      std::fill(dense.begin(), dense.end(), 0.f);
      embedding_backward(dense.data(), dout.data(), tokens.data(), N, d.C, d.v_begin, d.V);
      fold_dense(want, dense.data(), j == 0, 100 + j, 0);
    }
    expect_same_q8(store.q8_buffer(0), want, "embedding");
    // Read back piece by piece: each piece's dequantized values.
    std::vector<float> whole(units[0].size());
    grad_q8_dequantize(want.codes.data(), want.scales.data(), whole.size(), whole.data(), 256);
    for (const GradRange& p : store.pieces(0))
      EXPECT_TRUE(bits_equal(store.unit_fp32(0, p), whole.data() + p.begin, p.size() * sizeof(float)));
  }
}

// Through the model: the first stage writing into the q8 store (the embedding through MicroBatchRun's sparse
// hand-over) against the same stage writing its own dense fp32 gradients, folded whole unit by unit.
TEST(GradStore, FirstStageModelBackwardMatchesTheDenseFold) {
  const LlamaConfig cfg = wide_vocab_cfg();
  const int B = 2, T = 32, N = B * T;
  const ActPolicy pol = ActPolicy::parse("agoq", cfg.n_layers);
  const ModelStage st = model_stages_split(cfg, 2)[0];
  GradStore store(cfg, st, {GradStoreKind::q8, 256, QuantRounding::stochastic});
  const std::vector<GradRange>& units = store.units();
  LlamaModel pieces(cfg, B, T, pol, st, 1, store.model_storage()), dense(cfg, B, T, pol, st, 1);
  pieces.init_weights(3), dense.init_weights(3);
  EXPECT_EQ(pieces.grads().embed, nullptr);  // backward writes no dense embedding gradient
  std::vector<GradQ8Buffer> want;
  for (const GradRange& u : units) want.emplace_back(u.size(), 256, MemCategory::gradients, "test");
  Rng rng(19);
  std::vector<int32_t> tokens(N);
  std::vector<float> dout(size_t(N) * cfg.dim);
  store.step_begin();
  for (int j = 0; j < 2; ++j) {
    const uint64_t seed = 200 + j;
    for (int32_t& t : tokens) t = int32_t(rng.below(cfg.vocab_size));
    for (float& x : dout) x = rng.normal();
    MicroBatchRun run{.act_seed = 7};
    run.grads_ready = [&](int layer) { store.unit_ready(grad_unit_of_layer(st, layer), j == 0, seed); };
    run.embedding_grad = [&](const float* d, const int32_t* t, int rows) {
      store.embedding_fold(d, t, rows, j == 0, seed);
    };
    for (LlamaModel* m : {&pieces, &dense}) {
      m->stage_forward(tokens.data(), B, T, run);
      std::copy(dout.begin(), dout.end(), m->stage_output_grad());
      m->stage_backward(tokens.data(), B, T, m == &pieces ? run : MicroBatchRun{.act_seed = 7});
    }
    for (size_t u = 0; u < units.size(); ++u)
      fold_dense(want[u], dense.grads().data() + units[u].begin, j == 0, seed, int(u));
    dense.grads().zero();
  }
  for (size_t u = 0; u < units.size(); ++u) expect_same_q8(store.q8_buffer(int(u)), want[u], "unit " + std::to_string(u));
}

// The memory model's gradient bytes of such a stage (codes, scales and the layer-sized scratch) are the store's.
TEST(GradStore, MemoryModelCountsTheFirstStagesScratch) {
  const LlamaConfig cfg = wide_vocab_cfg();
  for (int tp : {1, 2}) {
    const ModelStage st = model_stage_shard(cfg, model_stages_split(cfg, 2)[0], tp, tp - 1);
    MemoryTracker& tr = MemoryTracker::global();
    const size_t before = tr.current().bytes[int(MemCategory::gradients)];
    GradStore store(cfg, st, {GradStoreKind::q8});
    PlanCpuOptions c;
    c.batch = 1, c.seq = 32, c.grad_q8 = true, c.pp = 2, c.stage = st;
    const PlanMemory want = plan_memory_cpu_trainer(cfg, ActPolicy::parse("agoq", cfg.n_layers), c);
    EXPECT_EQ(tr.current().bytes[int(MemCategory::gradients)] - before, want[MemCategory::gradients]) << "TP " << tp;
  }
}

}  // namespace
}  // namespace agoq

// The 8-bit gradient store on a pipeline's first stage: the embedding's gradient, handed over in sparse form, is
// folded in pieces of vocabulary rows through a scratch no larger than a decoder layer, with the bits of the
// dense gradient folded whole; and the memory model counts that scratch to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/bits_equal.h"
#include "arch/params.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/llama.h"
#include "model/ops.h"
#include "parallel/grad_store.h"
#include "parallel/grid.h"
#include "parallel_test_util.h"
#include "plan/memory_model.h"
#include "quant/grad_q8.h"
#include "tests/common/store_backward.h"
#include "train/trainer.h"

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
    const MicroBatchRun run{.act_seed = 7, .grad_first = j == 0, .grad_seed = seed};
    for (LlamaModel* m : {&pieces, &dense}) {
      m->stage_forward(tokens.data(), B, T, run);
      std::copy(dout.begin(), dout.end(), m->stage_output_grad());
      if (m == &pieces) store_backward(pieces, store, tokens.data(), B, T, run);
      else dense.stage_backward(tokens.data(), B, T, run);
    }
    for (size_t u = 0; u < units.size(); ++u)
      fold_dense(want[u], dense.grads().data() + units[u].begin, j == 0, seed, int(u));
    dense.grads().zero();
  }
  for (size_t u = 0; u < units.size(); ++u)
    expect_same_q8(store.q8_buffer(int(u)), want[u], "unit " + std::to_string(u));
}

// A tied model (one stage with both ends) whose vocabulary spans three lm_head pieces, the last partial.
LlamaConfig tied_wide_cfg() {
  LlamaConfig c = wide_vocab_cfg();
  c.vocab_size = 2 * kLlamaHeadPieceRows + 1000, c.n_layers = 1, c.tie_embeddings = true;
  return c;
}

GradStoreOptions pieces_options(int max_tokens) {
  GradStoreOptions o{GradStoreKind::q8, 256, QuantRounding::nearest};
  o.lm_head_pieces = true, o.max_tokens = size_t(max_tokens);
  return o;
}

// Tied, with the lm_head's gradient in pieces: the head hands over its weight gradient piece by piece, the blocks
// the input tokens touch wait in fp32 for the embedding's rows; against the model's own dense fp32 gradient, the
// same loss and every block of every unit within nearest rounding's half step. The store's fp32 scratch is a small
// part of the embedding.
TEST(GradStore, TiedHeadInPiecesMatchesTheDenseGradient) {
  const LlamaConfig cfg = tied_wide_cfg();
  const int B = 2, T = 32, N = B * T, V = cfg.vocab_size;
  const ActPolicy pol = ActPolicy::parse("fp32", cfg.n_layers);
  const ModelStage st = model_stage_whole(cfg);
  MemoryTracker& tr = MemoryTracker::global();
  tr.reset_peaks();
  const size_t scratch_before = tr.tag_peak("grad.scratch");
  GradStore store(cfg, st, pieces_options(N));
  const std::vector<GradRange>& units = store.units();
  EXPECT_LT((tr.tag_peak("grad.scratch") - scratch_before) * 4, units[0].size() * sizeof(float));
  // The store's sparse sink, watched: the pieces come in order.
  struct Watch final : GradRowsSink {
    GradStore& store;
    std::vector<int> piece_rows;
    explicit Watch(GradStore& s) : store(s) {}
    void embedding_fold(const float* d, const int32_t* t, int rows, bool first, uint64_t seed) override {
      store.embedding_fold(d, t, rows, first, seed);
    }
    void lm_head_fold(float* dw, int v0, int rows, const int32_t* t, int n, bool first, uint64_t seed) override {
      EXPECT_EQ(v0, int(piece_rows.size()) * kLlamaHeadPieceRows);
      piece_rows.push_back(rows);
      store.lm_head_fold(dw, v0, rows, t, n, first, seed);
    }
  } watch(store);
  GradStoreView storage = store.model_storage();
  ASSERT_EQ(storage.rows, &store);
  storage.rows = &watch;
  LlamaModel pieces(cfg, B, T, pol, st, 1, storage), dense(cfg, B, T, pol, st, 1);
  pieces.init_weights(3), dense.init_weights(3);
  Rng rng(23);
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[i] = int32_t(rng.below(V)), targets[i] = int32_t(rng.below(V));
  tokens[1] = tokens[0], tokens[2] = tokens[0] ^ 1;  // a row twice; a neighbour sharing its block
  tokens[3] = V - 1, tokens[4] = kLlamaHeadPieceRows - 1, tokens[5] = kLlamaHeadPieceRows;  // the edges
  const MicroBatchRun run{.act_seed = 7, .grad_seed = 1};
  store.step_begin();
  const float loss = store_forward_backward(pieces, store, tokens.data(), targets.data(), B, T, run);
  const float want_loss = dense.forward_backward(tokens.data(), targets.data(), B, T, MicroBatchRun{.act_seed = 7});
  EXPECT_NEAR(loss, want_loss, 1e-5 * want_loss);
  EXPECT_EQ(watch.piece_rows, (std::vector<int>{kLlamaHeadPieceRows, kLlamaHeadPieceRows, 1000}));
  for (size_t u = 0; u < units.size(); ++u) {
    const GradQ8Buffer& q = store.q8_buffer(int(u));
    std::vector<float> got(q.n);
    grad_q8_dequantize(q.codes.data(), q.scales.data(), q.n, got.data(), 256);
    const float* want = dense.grads().data() + units[u].begin;
    size_t bad = 0;
    for (size_t b = 0; b < q.n; b += 256) {
      const size_t e = std::min(q.n, b + 256);
      float absmax = 0;
      for (size_t i = b; i < e; ++i) absmax = std::max(absmax, std::abs(want[i]));
      const float tol = absmax / 127 * 0.5f * (1 + 1e-3f) + 1e-6f * absmax;
      for (size_t i = b; i < e; ++i) bad += std::abs(got[i] - want[i]) > tol;
    }
    EXPECT_EQ(bad, 0u) << "unit " << u << " of " << units.size();
  }
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

namespace agoq {
namespace {

namespace fs = std::filesystem;

// Training a tied model with the lm_head's gradient in pieces against the whole one, on this job's grids (one
// process; DP 2, TP 2 and TP 2 + SP; TP 2 + SP x DP 2): the same curve up to the rounding of fp32 sums taken in another
// order, and this rank's memory model to the byte. The vocabulary (2 pieces and 16 rows) splits into 2 and 4.
TEST(GradStore, TiedHeadInPiecesTrainsAsTheWholeOnEveryGrid) {
  const int W = world().size(), V = 2 * kLlamaHeadPieceRows + 16;
  const fs::path data = shared_data("tiedpieces", V);
  struct Grid {
    int tp;
    bool sp;
  };
  std::vector<Grid> grids = {{1, false}};  // np 2: DP 2
  if (W == 2) grids.push_back({2, false}), grids.push_back({2, true});
  if (W == 4) grids = {{2, true}};
  for (const auto [T, sp] : grids) {
    const std::string grid = "TP " + std::to_string(T) + (sp ? " + SP" : "") + " x DP " + std::to_string(W / T);
    TrainOptions o = tiny(data, "whole" + std::to_string(T) + (sp ? "sp" : ""), 2);
    o.model.tie_embeddings = true;
    o.grad_store = GradStoreKind::q8, o.allreduce = GradReduce::q8, o.tp = T, o.sp = sp;
    const TrainResult whole = train_run(o);
    o.lm_head_grad = LmHeadGrad::pieces, o.out_dir += "_pieces";
    const TrainResult pieces = train_run(o);
    const double dl = max_rel_diff(pieces.losses, whole.losses), dn = max_rel_diff(pieces.grad_norms, whole.grad_norms);
    if (world().rank() == 0)
      std::printf("[ measured ] %s: pieces vs whole losses %.2e, norms %.2e\n", grid.c_str(), dl, dn);
    EXPECT_LE(dl, 2e-3) << grid;
    EXPECT_LE(dn, 2e-2) << grid;
    EXPECT_LT(pieces.losses.back(), pieces.losses.front()) << grid;

    LlamaConfig cfg = o.model;
    cfg.vocab_size = V, cfg.max_seq_len = o.seq;
    const ParallelGrid g = parallel_grid_make(world(), 1, T);
    PlanCpuOptions c;
    c.batch = o.batch, c.seq = o.seq, c.grad_q8 = true, c.lm_head_pieces = true;
    c.stage = model_stage_shard(cfg, model_stage_whole(cfg), T, g.tp_rank, sp);
    c.grad_block = model_block_isolating_replicated(cfg, {c.stage}, 256);  // the trainer's (32 under TP)
    PlanMemory want = plan_memory_cpu_trainer(cfg, ActPolicy::parse(o.act_policy, cfg.n_layers), c);
    want[MemCategory::workspace] += MemoryTracker::global().tag_peak("data");  // the token files
    for (const MemCategory k : {MemCategory::gradients, MemCategory::workspace})
      EXPECT_EQ(want[k], pieces.peak.bytes[int(k)])
          << grid << ", rank " << world().rank() << ", " << mem_category_name(k);
    EXPECT_LT(pieces.peak.bytes[int(MemCategory::gradients)], whole.peak.bytes[int(MemCategory::gradients)]) << grid;
  }
  shared_cleanup(data);
}

// The flag's errors: a bad value, the fp32 store, an untied model.
TEST(GradStore, LmHeadGradFlagErrorsAreOneLine) {
  const fs::path data = shared_data("lmheadflag");
  std::unique_ptr<Communicator> self = world().split(world().rank(), 0);
  auto error_of = [&](TrainOptions o) {
    o.comm = self.get();
    try {
      train_run(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainOptions o = tiny(data, "x" + std::to_string(world().rank()), 1);
  o.grad_store = GradStoreKind::fp32, o.lm_head_grad = LmHeadGrad::pieces;
  EXPECT_NE(error_of(o).find("--lm-head-grad pieces is a way of the 8-bit gradient store"), std::string::npos);
  o.grad_store = GradStoreKind::q8;
  EXPECT_NE(error_of(o).find("--lm-head-grad pieces is for tied embeddings"), std::string::npos);
  shared_cleanup(data);
}

}  // namespace
}  // namespace agoq

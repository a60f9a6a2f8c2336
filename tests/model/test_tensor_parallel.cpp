// Tensor-parallel shards of the model (Megatron's layout) against the whole model, in one process: T threads each
// run a shard, joined by a TensorGroup over shared memory (the MPI one is parallel/comm_tensor_group.h, tested in
// tests/parallel). Loss and every gradient of every shard against the matching slice of the whole model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/act_store_cpu.h"
#include "model/llama.h"

namespace agoq {
namespace {

// T threads' collectives: each rank publishes its buffer, then every rank reduces all of them in rank order (so
// every rank gets the same bits, as MPI's reductions give).
class ThreadGroup {
 public:
  explicit ThreadGroup(int T) : ptrs_(T), cptrs_(T), sync_(T) {}
  class Member : public TensorGroup {
   public:
    Member(ThreadGroup& g, int r) : g_(g), r_(r) {}
    int size() const override { return int(g_.ptrs_.size()); }
    int rank() const override { return r_; }
    void sum(float* x, size_t n) override { g_.reduce(r_, x, n, false); }
    void max(float* x, size_t n) override { g_.reduce(r_, x, n, true); }
    void all_gather(const float* part, float* whole, size_t n) override { g_.gather(r_, part, whole, n); }
    void reduce_scatter(const float* whole, float* part, size_t n) override { g_.scatter(r_, whole, part, n); }

   private:
    ThreadGroup& g_;
    int r_;
  };

 private:
  void reduce(int r, float* x, size_t n, bool max) {
    ptrs_[r] = x;
    sync_.arrive_and_wait();
    std::vector<float> out(ptrs_[0], ptrs_[0] + n);
    for (size_t k = 1; k < ptrs_.size(); ++k)
      for (size_t i = 0; i < n; ++i) out[i] = max ? std::max(out[i], ptrs_[k][i]) : out[i] + ptrs_[k][i];
    sync_.arrive_and_wait();  // every rank has read every buffer
    std::copy(out.begin(), out.end(), x);
  }
  void gather(int r, const float* part, float* whole, size_t n) {
    std::vector<float> mine(part, part + n);  // part may lie in whole
    cptrs_[r] = mine.data();
    sync_.arrive_and_wait();
    for (size_t k = 0; k < cptrs_.size(); ++k) std::copy(cptrs_[k], cptrs_[k] + n, whole + k * n);
    sync_.arrive_and_wait();
  }
  void scatter(int r, const float* whole, float* part, size_t n) {
    cptrs_[r] = whole;
    sync_.arrive_and_wait();
    for (size_t i = 0; i < n; ++i) {  // rank order, as in reduce
      float acc = cptrs_[0][r * n + i];
      for (size_t k = 1; k < cptrs_.size(); ++k) acc += cptrs_[k][r * n + i];
      part[i] = acc;
    }
    sync_.arrive_and_wait();
  }
  std::vector<float*> ptrs_;
  std::vector<const float*> cptrs_;
  std::barrier<> sync_;
};

LlamaConfig tp_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 48, c.dim = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.ffn_dim = 48;
  c.max_seq_len = 16, c.tie_embeddings = tied;
  return c;
}

// Largest |shard - slice of whole| over a tensor, relative to the largest |whole| of that tensor.
double slice_rel_diff(const float* shard, const float* whole, const ParamTensor& t, int T, int r) {
  const TensorSlice s = model_tensor_slice(t.shape, t.split_dim, T, r);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < s.rows; ++i)
    for (size_t j = 0; j < s.cols; ++j) {
      const double w = whole[(s.row0 + i) * s.whole_cols + s.col0 + j];
      diff = std::max(diff, std::abs(double(shard[i * s.cols + j]) - w)), scale = std::max(scale, std::abs(w));
    }
  return diff / scale;
}

struct ShardRun {
  std::unique_ptr<ThreadGroup> group;
  std::vector<std::unique_ptr<ThreadGroup::Member>> members;
  std::vector<std::unique_ptr<LlamaModel>> shards;  // T = 1: the whole model
  std::vector<float> losses;
};

// One micro-batch forward + backward on T shards (T threads) from the same initial weights.
ShardRun run_shards(const LlamaConfig& c, int T, const std::string& policy, bool sp = false) {
  const int B = 2, Tq = 8;
  Rng rng(7);
  std::vector<int32_t> in(B * Tq), tgt(B * Tq);
  for (int i = 0; i < B * Tq; ++i) in[i] = int32_t(rng.below(c.vocab_size)), tgt[i] = int32_t(rng.below(c.vocab_size));
  tgt[5] = -1;  // an ignored target
  const ActPolicy pol = ActPolicy::parse(policy, c.n_layers);
  ShardRun run;
  run.group = std::make_unique<ThreadGroup>(T);
  for (int r = 0; r < T; ++r) {
    run.members.push_back(std::make_unique<ThreadGroup::Member>(*run.group, r));
    run.shards.push_back(std::make_unique<LlamaModel>(c, B, Tq, pol,
                                                      model_stage_shard(c, model_stage_whole(c), T, r, sp), 1,
                                                      std::vector<ParamSegment>{}, run.members[r].get()));
    run.shards[r]->init_weights(11);
    run.shards[r]->grads().zero();
  }
  run.losses.resize(T);
  std::vector<std::thread> threads;
  for (int r = 0; r < T; ++r)
    threads.emplace_back(
        [&, r] { run.losses[r] = run.shards[r]->forward_backward(in.data(), tgt.data(), B, Tq, {.act_seed = 5}); });
  for (std::thread& t : threads) t.join();
  return run;
}

// Every shard's gradients against the matching slices of the whole model's: the worst relative difference of a
// tensor (slice_rel_diff), and ||shards - whole|| / ||whole|| over everything.
struct GradDiff {
  double worst = 0, rel_l2 = 0;
};
GradDiff shards_vs_whole(const ShardRun& run, LlamaModel& whole) {
  const int T = int(run.shards.size());
  GradDiff out;
  double num = 0, den = 0;
  for (int r = 0; r < T; ++r) {
    const ParamSet& g = run.shards[r]->grads();
    for (size_t i = 0; i < g.named().size(); ++i) {
      const ParamTensor& t = g.named()[i];
      const ParamTensor& w = whole.grads().named()[i];
      EXPECT_EQ(t.name, w.name);
      out.worst = std::max(out.worst, slice_rel_diff(t.data, w.data, t, T, r));
      if (t.split_dim < 0 && r > 0) continue;  // a replicated tensor counts once
      const TensorSlice s = model_tensor_slice(t.shape, t.split_dim, T, r);
      for (size_t a = 0; a < s.rows; ++a)
        for (size_t b = 0; b < s.cols; ++b) {
          const double x = t.data[a * s.cols + b], y = w.data[(s.row0 + a) * s.whole_cols + s.col0 + b];
          num += (x - y) * (x - y), den += y * y;
        }
    }
  }
  out.rel_l2 = std::sqrt(num / den);
  return out;
}

// T shards vs the whole model, fp32: the same loss on every shard, every gradient within 1e-5 of its tensor's
// largest value. Returns the worst difference.
double expect_shards_match_whole(const LlamaConfig& c, int T, bool sp = false) {
  const ShardRun whole = run_shards(c, 1, "fp32"), tp = run_shards(c, T, "fp32", sp);
  for (int r = 0; r < T; ++r) {
    EXPECT_EQ(tp.losses[r], tp.losses[0]) << "shard " << r;  // computed from the reduced statistics
    EXPECT_NEAR(tp.losses[r], whole.losses[0], 1e-6 * whole.losses[0]) << "shard " << r;
  }
  const GradDiff d = shards_vs_whole(tp, *whole.shards[0]);
  EXPECT_LE(d.worst, 1e-5) << "T = " << T;
  return d.worst;
}

TEST(TensorParallel, ShardsMatchTheWholeModelFp32) {
  for (bool tied : {false, true})
    for (int T : {2, 4}) {
      SCOPED_TRACE("T = " + std::to_string(T) + (tied ? ", tied embeddings" : ""));
      const double worst = expect_shards_match_whole(tp_config(tied), T);
      std::printf("[ measured ] TP=%d%s: worst gradient difference %.2e of the tensor's largest value\n", T,
                  tied ? " tied" : "", worst);
    }
}

// Sequence parallelism: the same comparison, the residual stream and the norms on each rank's rows of the batch
// (16 rows: 8 per rank on T = 2, 4 on T = 4, so T = 4 splits inside a sequence).
TEST(TensorParallel, SequenceParallelShardsMatchTheWholeModelFp32) {
  for (bool tied : {false, true})
    for (int T : {2, 4}) {
      SCOPED_TRACE("SP, T = " + std::to_string(T) + (tied ? ", tied embeddings" : ""));
      const double worst = expect_shards_match_whole(tp_config(tied), T, /*sp=*/true);
      std::printf("[ measured ] TP=%d + SP%s: worst gradient difference %.2e of the tensor's largest value\n", T,
                  tied ? " tied" : "", worst);
    }
  LlamaConfig gqa = tp_config(false);
  gqa.n_kv_heads = 2;
  expect_shards_match_whole(gqa, 2, /*sp=*/true);
}

// Under SP each rank stores only its rows of the residual slots (norm inputs, rstd, norm outputs).
TEST(TensorParallel, SequenceParallelStoresTheRowsOfItsShard) {
  const LlamaConfig c = tp_config(false);
  const ActPolicy fp32 = ActPolicy::parse("fp32", c.n_layers);
  const size_t rows = 16, T = 2;
  const size_t tp_other = act_store_bytes(fp32, c, rows, false, int(T)),
               tp_attn = act_store_bytes(fp32, c, rows, true, int(T));
  const size_t sp_other = act_store_bytes(fp32, c, rows, false, int(T), true);
  EXPECT_EQ(act_store_bytes(fp32, c, rows, true, int(T), true), tp_attn);  // attention's slots: every row
  // Per layer: 4 C-wide slots and 2 rstd, halved; gate, up, SwiGLU (F/T wide) on every row.
  const size_t residual = size_t(c.n_layers) * (4 * rows * c.dim + 2 * rows) * sizeof(float);
  EXPECT_EQ(tp_other - sp_other, residual / T);
  ShardRun run = run_shards(c, int(T), "fp32", /*sp=*/true);
  EXPECT_EQ(run.shards[1]->store().stored_bytes(false), sp_other);
  EXPECT_EQ(run.shards[1]->store().stored_bytes(true), tp_attn);
}

TEST(TensorParallel, SequenceParallelErrors) {
  const LlamaConfig c = tp_config(false);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { model_stage_shard(c, model_stage_whole(c), 1, 0, true); }).find("--sp"), std::string::npos);
  EXPECT_NE(message([] { model_sp_check(4, 3, 5); }).find("--tp 4 does not divide the 15 rows (batch 3 x seq 5)"),
            std::string::npos);
  EXPECT_EQ(message([] { model_sp_check(4, 2, 6); }), "");
}

TEST(TensorParallel, GroupedQueryAttentionSplitsKvHeads) {
  LlamaConfig c = tp_config(false);
  c.n_kv_heads = 2;
  expect_shards_match_whole(c, 2);
}

// AGoQ on shards: each shard quantizes the activations it stores (groups along its own width, with their own
// stochastic-rounding streams), so the gradients differ from the whole model's by quantization noise of the same
// size as the whole model's own under the policy. The forward computes in fp32: the loss is the fp32 one.
TEST(TensorParallel, AgoqPolicyOnShardsIsWithinTheWholeModelsQuantizationError) {
  const LlamaConfig c = tp_config(false);
  const ShardRun ref = run_shards(c, 1, "fp32"), whole_q = run_shards(c, 1, "agoq");
  const double whole_err = shards_vs_whole(whole_q, *ref.shards[0]).rel_l2;
  for (bool sp : {false, true})
    for (int T : {2, 4}) {
      const ShardRun tp = run_shards(c, T, "agoq", sp);
      EXPECT_NEAR(tp.losses[0], ref.losses[0], 1e-6 * ref.losses[0]);
      const double err = shards_vs_whole(tp, *ref.shards[0]).rel_l2;
      std::printf("[ measured ] agoq policy: gradient error vs fp32 %.4f (TP=%d%s) vs %.4f (one process)\n", err, T,
                  sp ? " + SP" : "", whole_err);
      EXPECT_GT(err, 0.0);
      EXPECT_LT(err, 2 * whole_err) << "T = " << T << (sp ? " + SP" : "");
    }
}

TEST(TensorParallel, ShardLayoutAndErrors) {
  LlamaConfig c = tp_config(false);
  c.n_kv_heads = 2;
  const ModelStage s = model_stage_shard(c, model_stage_whole(c), 2, 1);
  const ShardDims d = model_shard_dims(c, s);
  EXPECT_EQ(d.H, 2);
  EXPECT_EQ(d.Hkv, 1);
  EXPECT_EQ(d.Q, 16);
  EXPECT_EQ(d.KV, 8);
  EXPECT_EQ(d.F, 24);
  EXPECT_EQ(d.V, 24);
  EXPECT_EQ(d.v_begin, 24);
  EXPECT_EQ(d.C, 32);
  // The shards' parameters sum to the whole model's plus the replicated norms.
  const size_t norms = size_t(2 * c.n_layers + 1) * c.dim;
  EXPECT_EQ(2 * model_stage_param_count(c, s), c.param_count() + norms);
  auto message = [&](const LlamaConfig& cfg, int T) {
    try {
      model_tp_check(cfg, T);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(c, 3).find("does not divide the model's 4 attention heads"), std::string::npos);
  EXPECT_NE(message(c, 4).find("2 kv heads"), std::string::npos);
  LlamaConfig f = tp_config(false);
  f.ffn_dim = 50;
  EXPECT_NE(message(f, 4).find("MLP width (--ffn) 50"), std::string::npos);
  LlamaConfig v = tp_config(false);
  v.vocab_size = 50;
  EXPECT_NE(message(v, 4).find("vocabulary of 50 tokens"), std::string::npos);
  EXPECT_EQ(message(c, 2), "");
}

}  // namespace
}  // namespace agoq

namespace agoq {
namespace {

// The blocks under which every shard's norms lie alone: checked against the layout itself, tensor by tensor.
TEST(TensorParallel, BlocksNeverMixANormWithAShardsSlice) {
  auto shards = [](const LlamaConfig& c, int T) {
    std::vector<ModelStage> s;
    for (ModelStage st : model_stages_split(c, 2, {})) s.push_back(model_stage_shard(c, st, T, 0, false));
    return s;
  };
  LlamaConfig c;
  c.vocab_size = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2;
  for (const auto& [dim, ffn, T, want] : std::vector<std::tuple<int, int, int, int>>{
           {256, 688, 2, 256}, {32, 48, 2, 32}, {64, 176, 2, 64}, {48, 64, 2, 16}, {32, 48, 1, 256}}) {
    SCOPED_TRACE("dim " + std::to_string(dim) + ", T " + std::to_string(T));
    c.dim = dim, c.ffn_dim = ffn;
    const std::vector<ModelStage> st = shards(c, T);
    const int b = model_block_isolating_replicated(c, st, 256);
    EXPECT_EQ(b, want);
    for (const ModelStage& s : st) {  // every norm starts a block and ends one (or its unit)
      const std::vector<ParamSegment> units = model_grad_units(c, s);
      size_t at = 0, u = 0;
      for (const HfTensor& t : hf_tensors(c, s)) {
        while (at >= units[u].end) ++u;
        const size_t n = size_t(t.shape.size() == 1 ? t.shape[0] : t.shape[0] * t.shape[1]);
        if (T > 1 && model_tensor_split_dim(t.role) < 0) {
          EXPECT_EQ((at - units[u].begin) % size_t(b), 0u) << t.name;
          EXPECT_TRUE(at + n == units[u].end || (at + n - units[u].begin) % size_t(b) == 0) << t.name;
        }
        at += n;
      }
    }
  }
}

}  // namespace
}  // namespace agoq

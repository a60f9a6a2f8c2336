// The analytic memory model: its exact CPU-trainer mode against the memory tracker's measured peaks, and the
// GPU model's bookkeeping (stages, in-flight micro-batches, TP split, ZeRO-1, categories).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/allreduce_q8.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/act_store_cpu.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "parallel/grad_reduce.h"
#include "parallel/grad_store.h"
#include "plan/memory_model.h"
#include "plan/presets.h"
#include "quant/grad_q8.h"
#include "tests/common/llama_shape.h"
#include "tests/common/store_backward.h"

#include <memory>

namespace agoq {
namespace {

// Builds the real model + one AdamW per gradient unit as DpOptimizer does (rank 0's ZeRO shards with dp > 1;
// fp32 or 8-bit moments) (+ an 8-bit gradient store), runs one forward_backward and one optimizer step, and compares
// each category's own peak with the model: the optimizer exactly, the others within 10% (the model aims at exact).
void expect_cpu_model_matches(const LlamaConfig& cfg, int B, int T, const std::string& policy, bool q8, int dp = 1,
                              bool optim_q8 = false) {
  SCOPED_TRACE(policy + (q8 ? " q8" : "") + (optim_q8 ? " optim q8" : "") + " layers " + std::to_string(cfg.n_layers) +
               " B " + std::to_string(B) + " T " + std::to_string(T) + " dp " + std::to_string(dp));
  MemoryTracker& tr = MemoryTracker::global();
  const MemSnapshot before = tr.current();
  tr.reset_peaks();
  const ActPolicy pol = ActPolicy::parse(policy, cfg.n_layers);
  {
    const ModelStage whole = model_stage_whole(cfg);
    GradStore store(cfg, whole, {q8 ? GradStoreKind::q8 : GradStoreKind::fp32});
    LlamaModel model(cfg, B, T, pol, whole, 1, store.model_storage());
    AdamWConfig ac;
    ac.state = optim_q8 ? OptimState::q8 : OptimState::fp32;
    const std::vector<GradUnit> units = grad_units_sharded(store.units(), dp, 0, dp > 1, 256);
    std::vector<std::unique_ptr<AdamW>> adam;
    size_t shard = 0;
    for (const GradUnit& u : units) {
      const size_t own = u.range.begin + u.own.begin;
      adam.push_back(std::make_unique<AdamW>(model.params(), ac, own, own + u.own.size()));
      shard += u.own.size();
    }
    Buffer<float> reduced_shard(dp > 1 ? shard : 0, MemCategory::gradients, "grad.shard");  // GradReducer's, ZeRO-1
    model.init_weights(5);
    Rng rng(9);
    std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
    store.step_begin();
    store_forward_backward(model, store, in.data(), tgt.data(), B, T, {.act_seed = 1, .grad_seed = 3});
    for (size_t u = 0; u < units.size(); ++u)  // AdamW reads each piece's gradient indexed in the flat layout
      for (const GradRange& p : store.pieces(int(u))) {
        const size_t a = units[u].range.begin + p.begin;
        const size_t from = std::max(a, adam[u]->begin()), to = std::min(a + p.size(), adam[u]->end());
        if (from < to) adam[u]->step(model.params().data(), store.unit_fp32(int(u), p) - a, 1e-3f, 1, from, to);
      }

    PlanCpuOptions opt;
    opt.batch = B, opt.seq = T, opt.grad_q8 = q8, opt.zero = dp > 1, opt.dp = dp, opt.optim_q8 = optim_q8;
    const PlanMemory want = plan_memory_cpu_trainer(cfg, pol, opt);
    const MemSnapshot peak = tr.peak_per_category();
    size_t measured_total = 0;
    for (int c = 0; c < kMemCategoryCount; ++c) {
      const size_t measured = peak.bytes[c] - before.bytes[c];
      measured_total += measured;
      const double tol = 0.10 * double(measured);
      EXPECT_LE(std::abs(double(want.bytes[c]) - double(measured)), tol)
          << mem_category_name(MemCategory(c)) << ": model " << want.bytes[c] << ", tracker " << measured;
      const MemCategory cat = MemCategory(c);
      if (cat == MemCategory::weights || cat == MemCategory::gradients || cat == MemCategory::optimizer) {
        EXPECT_EQ(want.bytes[c], measured) << mem_category_name(cat) << ", to the byte";
      }
    }
    EXPECT_LE(std::abs(double(want.total()) - double(measured_total)), 0.10 * double(measured_total));
  }
}

TEST(PlanCpuModel, MatchesTrackerSingleStage) {
  const LlamaConfig a = llama_shape(512, 64, 2, 4, 2, 176, 64);
  const LlamaConfig b = llama_shape(1000, 128, 3, 8, 8, 344, 64);
  const LlamaConfig c = llama_shape(300, 32, 2, 2, 1, 96, 300);  // T > tile rows: one sequence per tile
  for (const char* policy : {"fp32", "baseline-bf16", "agoq"}) {
    expect_cpu_model_matches(a, 2, 32, policy, false);
    expect_cpu_model_matches(b, 3, 48, policy, false);
    expect_cpu_model_matches(c, 1, 300, policy, false);
  }
  expect_cpu_model_matches(a, 2, 32, "agoq", true);
  expect_cpu_model_matches(b, 2, 64, "agoq", true, 2);  // ZeRO-1 shard of the optimizer
  expect_cpu_model_matches(a, 2, 32, "uniform4", false);
  // 8-bit moments, whole and rank 0's ZeRO-1 shards over 2 and 3 ranks.
  for (int dp : {1, 2, 3}) expect_cpu_model_matches(b, 2, 32, "agoq", true, dp, true);
  expect_cpu_model_matches(a, 2, 32, "fp32", false, 1, true);
}

// A forward-only model (what `agoq eval` and `agoq sample` build): the model's bytes per category are what it
// holds, to the byte, with nothing for gradients, the optimizer or a reduction.
TEST(PlanCpuModel, ForwardOnlyMatchesTheTracker) {
  const LlamaConfig cfg = llama_shape(512, 64, 2, 4, 2, 176, 64);
  const ActPolicy policy = ActPolicy::forward_only(cfg.n_layers);
  PlanCpuOptions o;
  o.batch = 1, o.seq = 64, o.threads = 1;
  const PlanMemory want = plan_memory_cpu_trainer(cfg, policy, o);
  const MemSnapshot before = MemoryTracker::global().current();
  const LlamaModel model(model_backend_cpu(), cfg, o.batch, o.seq, policy);
  const MemSnapshot held = MemoryTracker::global().current();
  for (int c = 0; c < kMemCategoryCount; ++c)
    if (MemCategory(c) != MemCategory::workspace)  // the plan adds attention's per-call scratch to the buffers
      EXPECT_EQ(held.bytes[c] - before.bytes[c], want[MemCategory(c)]) << mem_category_name(MemCategory(c));
  EXPECT_EQ(want[MemCategory::gradients] + want[MemCategory::optimizer] + want[MemCategory::communication], 0u);
}

// Pipeline stages (P = 2, 4) are checked against real pipeline runs under mpirun:
// tests/parallel/test_pipeline.cpp, Pipeline.MemoryModelMatchesEachStage.

TEST(PlanGpuModel, ActivationBytesEqualTheStore) {
  const LlamaConfig cfg = llama_shape(512, 128, 3, 8, 2, 344, 128);
  for (const char* policy : {"fp32", "baseline-bf16", "agoq", "uniform4", "attn=bf16,mlp=3,norm=8"}) {
    const ActPolicy p = ActPolicy::parse(policy, cfg.n_layers);
    EXPECT_EQ(plan_act_bytes(p, cfg, 1, 100), act_store_bytes(p, cfg, 100, true) + act_store_bytes(p, cfg, 100, false));
    CpuActStore store(cfg, 100, p, model_stage_whole(cfg));
    EXPECT_EQ(plan_act_bytes(p, cfg, 1, 100), store.stored_bytes(true) + store.stored_bytes(false)) << policy;
  }
  EXPECT_EQ(plan_slot_cols(cfg, 1), act_slot_cols(cfg));
  const auto c2 = plan_slot_cols(cfg, 2);
  EXPECT_EQ(c2[int(ActSlot::q)], 64);
  EXPECT_EQ(c2[int(ActSlot::k)], 16);
  EXPECT_EQ(c2[int(ActSlot::gate)], 172);
  EXPECT_EQ(c2[int(ActSlot::attn_norm_in)], 128);  // sequence parallelism off: the residual stream is whole
  EXPECT_EQ(c2[int(ActSlot::attn_lse)], 4);
  // TP 2 halves exactly the split slots.
  const ActPolicy bf = ActPolicy::parse("baseline-bf16", 3);
  EXPECT_LT(plan_act_bytes(bf, cfg, 2, 100), plan_act_bytes(bf, cfg, 1, 100));
}

// The planner's TP modelling against the trainer's real shards (arch/stage.h): the per-rank slot widths, saved
// activation bytes and parameters of every TP rank of every pipeline stage (vocab 1024 needs no padding, kv heads
// divide T).
TEST(PlanGpuModel, TensorParallelShapesAreTheTrainersShards) {
  const LlamaConfig cfg = llama_shape(1024, 128, 4, 8, 4, 344, 128);
  for (int T : {1, 2, 4}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    EXPECT_EQ(plan_slot_cols(cfg, T), act_slot_cols(cfg, T));
    for (const char* policy : {"fp32", "baseline-bf16", "agoq"}) {
      const ActPolicy p = ActPolicy::parse(policy, cfg.n_layers);
      CpuActStore store(cfg, 100, p, model_stage_shard(cfg, model_stage_whole(cfg), T, T - 1));
      EXPECT_EQ(plan_act_bytes(p, cfg, T, 100), store.stored_bytes(true) + store.stored_bytes(false)) << policy;
      if (T == 1) continue;
      // Sequence parallelism: the residual slots on 100 / T rows of the shard's store; every slot 1/T of T = 1's.
      CpuActStore sp(cfg, 100, p, model_stage_shard(cfg, model_stage_whole(cfg), T, T - 1, true));
      EXPECT_EQ(plan_act_bytes(p, cfg, T, 100, true), sp.stored_bytes(true) + sp.stored_bytes(false)) << policy;
      if (std::string(policy) == "fp32") {
        EXPECT_EQ(T * plan_act_bytes(p, cfg, T, 100, true), plan_act_bytes(p, cfg, 1, 100));
      }
    }
    for (int P : {1, 2}) {
      const std::vector<PlanStage> planned = plan_stages(cfg, {T * P, T, P, false}, {64, 1, 8});
      const std::vector<ModelStage> stages = model_stages_split(cfg, P);
      for (int r = 0; r < P; ++r)
        for (int t = 0; t < T; ++t)
          EXPECT_EQ(planned[r].params, model_stage_param_count(cfg, model_stage_shard(cfg, stages[r], T, t)))
              << "stage " << r << " of " << P << ", TP rank " << t;
    }
  }
}

TEST(PlanGpuModel, StagesAndInFlight) {
  LlamaConfig cfg = llama_shape(1024, 128, 10, 4, 4, 256, 64);
  PlanParallel par{8, 1, 4, false};
  auto stages = plan_stages(cfg, par, {64, 1, 8});
  ASSERT_EQ(stages.size(), 4u);
  const int layers[] = {2, 2, 3, 3}, flight[] = {4, 3, 2, 1};
  size_t params = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(stages[r].n_layers, layers[r]);
    EXPECT_EQ(stages[r].in_flight, flight[r]);
    EXPECT_EQ(stages[r].embed, r == 0);
    EXPECT_EQ(stages[r].head, r == 3);
    params += stages[r].params;
  }
  EXPECT_EQ(params, cfg.param_count());  // vocab 1024 needs no padding
  stages = plan_stages(cfg, par, {64, 1, 2});
  EXPECT_EQ(stages[0].in_flight, 2);
  EXPECT_EQ(stages[3].in_flight, 1);
  // TP 2: matrices split, norms replicated.
  par = {8, 2, 1, false};
  stages = plan_stages(cfg, par, {64, 1, 8});
  EXPECT_LT(stages[0].params, cfg.param_count() / 2 + 10 * 2 * 128 + 128 + 1);
  EXPECT_GT(stages[0].params, cfg.param_count() / 2);
}

// AGoQ's first stage holds its embedding's fp32 gradient only in pieces no larger than a layer's matrix (the
// trainer's q8 store, parallel/grad_store.h): its workspace equals that of a middle stage with the same layers; the
// last stage's lm_head gradient is whole.
TEST(PlanGpuModel, FirstStageHoldsTheEmbeddingGradientInPieces) {
  const LlamaConfig cfg = plan_preset("llama-8b");
  const PlanWorkload w{4096, 1, 16};
  const PlanParallel par{64, 4, 4, false};
  const std::vector<PlanStage> st = plan_stages(cfg, par, w);
  auto work = [&](int r) { return plan_memory_static(cfg, par, w, st[r], PlanSystem::agoq)[MemCategory::workspace]; };
  EXPECT_EQ(st[0].n_layers, st[1].n_layers);
  EXPECT_EQ(work(0), work(1));
  const size_t vocab_rows = size_t(plan_padded_vocab(cfg, 4, 128)) / 4;
  EXPECT_GE(work(3), work(1) + 4 * (vocab_rows - 14336 / 4) * size_t(cfg.dim));  // lm_head whole instead of w_gate
}

TEST(PlanGpuModel, CategoriesAndZero) {
  const LlamaConfig cfg = plan_preset("llama-8b");
  const PlanWorkload w{4096, 1, 8};
  for (bool zero : {false, true}) {
    const PlanParallel par{64, 4, 4, zero};
    for (const PlanStage& st : plan_stages(cfg, par, w)) {
      const PlanMemory base =
          plan_memory_per_rank(cfg, par, w, st, PlanSystem::baseline, ActPolicy::parse("baseline-bf16", st.n_layers));
      const PlanMemory ag =
          plan_memory_per_rank(cfg, par, w, st, PlanSystem::agoq, ActPolicy::parse("agoq", st.n_layers));
      EXPECT_LT(ag.total(), base.total());
      EXPECT_EQ(base[MemCategory::gradients], 4 * st.params);
      EXPECT_LT(ag[MemCategory::activations], base[MemCategory::activations] / 3);
      EXPECT_EQ(ag[MemCategory::optimizer], base[MemCategory::optimizer]);
      EXPECT_EQ(base[MemCategory::optimizer], zero ? 8 * ((st.params + 3) / 4) : 8 * st.params);
      // 8-bit moments: AGoQ only, 2 bytes per value and two fp32 scales per 128 (ZeRO-1: of the shard).
      PlanGpuOptions q8;
      q8.optim_q8 = true;
      const size_t n = zero ? (st.params + 3) / 4 : st.params;
      const PlanMemory ag8 =
          plan_memory_per_rank(cfg, par, w, st, PlanSystem::agoq, ActPolicy::parse("agoq", st.n_layers), q8);
      const PlanMemory base8 = plan_memory_per_rank(cfg, par, w, st, PlanSystem::baseline,
                                                    ActPolicy::parse("baseline-bf16", st.n_layers), q8);
      EXPECT_EQ(ag8[MemCategory::optimizer], 2 * n + 8 * ((n + 127) / 128));
      EXPECT_EQ(base8.total(), base.total());
      EXPECT_EQ(ag.total() - ag8.total(), ag[MemCategory::optimizer] - ag8[MemCategory::optimizer]);
      if (!zero) {
        EXPECT_NEAR(double(ag[MemCategory::gradients]) / double(st.params), 1.0 + 4.0 / 256, 1e-3);
      }
      EXPECT_EQ(base[MemCategory::activations] % size_t(st.in_flight), 0u);
    }
  }
}

TEST(PlanGpuModel, BadParallelConfigs) {
  const LlamaConfig cfg = plan_preset("llama-8b");
  auto expect_error = [&](PlanParallel par, const char* needle) {
    try {
      plan_stages(cfg, par, {4096, 1, 8});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({63, 4, 4, false}, "not divisible");
  expect_error({64, 1, 64, false}, "exceeds");
  expect_error({60, 3, 4, false}, "does not divide");
  expect_error({0, 1, 1, false}, "positive");
  expect_error({8, 1, 1, false, true}, "--sp (sequence parallelism) shards over the tensor-parallel ranks");
  try {
    plan_stages(cfg, {8, 8, 1, false, true}, {4095, 1, 8});
    ADD_FAILURE() << "no error for --sp with 4095 rows on 8 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sp: --tp 8 does not divide the 4095 tokens"), std::string::npos)
        << e.what();
  }
}

TEST(PlanGpuModel, ParseBytes) {
  EXPECT_EQ(plan_parse_bytes("80GiB", "--gpu-mem"), size_t(80) << 30);
  EXPECT_EQ(plan_parse_bytes("80G", "--gpu-mem"), size_t(80) << 30);
  EXPECT_EQ(plan_parse_bytes("80GB", "--gpu-mem"), size_t(80e9));
  EXPECT_EQ(plan_parse_bytes("80 gib", "--gpu-mem"), size_t(80) << 30);
  EXPECT_EQ(plan_parse_bytes("1.5TiB", "--gpu-mem"), size_t(3) << 39);
  EXPECT_EQ(plan_parse_bytes("512MiB", "--gpu-mem"), size_t(512) << 20);
  EXPECT_EQ(plan_parse_bytes("4096", "--gpu-mem"), 4096u);
  for (const char* bad : {"", "abc", "80XB", "-5GiB", "1.2.3G", "GiB", "0GiB"})
    EXPECT_THROW(plan_parse_bytes(bad, "--gpu-mem"), Error) << bad;
}

TEST(PlanPresets, ShapesAndSizes) {
  const LlamaConfig a = plan_preset("llama-8b"), b = plan_preset("llama-13b"), c = plan_preset("llama-32b");
  EXPECT_NEAR(double(a.param_count()) / 1e9, 8.03, 0.01);
  EXPECT_NEAR(double(b.param_count()) / 1e9, 13.02, 0.01);
  EXPECT_NEAR(double(c.param_count()) / 1e9, 32.76, 0.01);
  EXPECT_EQ(a.n_kv_heads, 8);
  EXPECT_EQ(b.n_kv_heads, 40);
  EXPECT_EQ(c.ffn_dim, 27648);
  EXPECT_THROW(plan_preset("llama-99b"), Error);
  EXPECT_THROW(plan_model_resolve("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace agoq

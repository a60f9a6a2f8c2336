// The step-time model (plan/time_model.h) against values computed by hand for one small model, and its inputs:
// rate curves, link speeds, the calibration file.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/calibration.h"
#include "plan/time_model.h"
#include "tests/common/llama_shape.h"

namespace agoq {
namespace {

// dim 64, 2 layers, 4 heads of 16 (2 kv heads), MLP 128, vocabulary 256 (a multiple of Megatron's padding).
LlamaConfig tiny() { return llama_shape(256, 64, 2, 4, 2, 128, 16); }

// Round numbers, one point per curve (constant rates), so each term is a quotient a reader can redo.
PlanCalibration round_calibration() {
  PlanCalibration c;
  c.device.gemm.points = {{1, 1e9}};
  c.device.attention.points = {{1, 5e8}};
  c.device.elementwise_bw = 1e10, c.device.act_quant_bw = 2e9, c.device.act_bf16_bw = 4e9;
  c.device.grad_fold_bw = 1e9, c.device.adam_params_s = 1e7, c.device.adam_q8_params_s = 2e7;
  c.intra = {1e9, 1e-5, 2e9}, c.inter = {1e8, 1e-4, 2e8};  // one-way sends at twice a collective's rate
  c.ranks_per_node = 2, c.dp_overlap = 0;
  return c;
}

// Per layer: q and o 64x64, k and v 64x32, gate/up/down 64x128; the head 64x256.
constexpr double kLayerMatmul = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128;           // 36864
constexpr double kMatmulParams = 2 * kLayerMatmul + 64 * 256;                       // 90112
constexpr double kParams = 64 * 256 + 2 * (kLayerMatmul + 2 * 64) + 64 + 64 * 256;  // + embedding, norms: 106816
// Causal attention of a micro-batch of 2 sequences of 16, 4 heads of 16, over both layers: half of QK^T and of PV,
// 2 FLOPs a product, per head and sequence; backward 2.5x the forward.
constexpr double kAttnForward = 2 * (2.0 * 16 * 16 / 2 * 16) * 4 * 2;
constexpr double kAttnFlops = 3.5 * kAttnForward * 2;

// The pipeline part of a step: every term but the DP reduction, ZeRO's gather and the optimizer.
double pipeline_s(const PlanTime& t) {
  return t.term("gemm+attention") + t.term("elementwise") + t.term("act_store") + t.term("grad_store") +
         t.term("tp_comm") + t.term("pp_send") + t.term("pp_bubble");
}

TEST(TimeModel, FlopsAreSixPerMatmulParameterPerTokenAndCausalAttention) {
  const LlamaConfig cfg = tiny();
  const PlanWorkload w{16, 2, 3};
  const std::vector<PlanStage> st = plan_stages(cfg, {1, 1, 1}, w);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(double(st[0].params), kParams);
  const PlanStageFlops f = plan_stage_flops(cfg, st[0], 1, 2, 16, round_calibration());
  EXPECT_DOUBLE_EQ(f.gemm, 6 * kMatmulParams * 32);  // forward 2, backward 4 FLOPs per parameter and token
  EXPECT_DOUBLE_EQ(f.attention, kAttnFlops);
}

TEST(TimeModel, SingleRankStepIsMicroBatchesTimesComputePlusOptimizer) {
  const LlamaConfig cfg = tiny();
  const PlanCalibration cal = round_calibration();
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime t = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, opt, cal);
  EXPECT_NEAR(t.term("gemm+attention"), 3 * (6 * kMatmulParams * 32 / 1e9 + kAttnFlops / 5e8), 1e-12);
  EXPECT_DOUBLE_EQ(t.term("act_store"), 0);   // the baseline keeps fp32 slots in place
  EXPECT_DOUBLE_EQ(t.term("grad_store"), 0);  // and fp32 gradients
  EXPECT_DOUBLE_EQ(t.term("tp_comm") + t.term("pp_send") + t.term("pp_bubble") + t.term("dp_reduce"), 0);
  EXPECT_NEAR(t.term("optimizer"), kParams / 1e7, 1e-12);
  double sum = 0;
  for (const PlanTimeTerm& term : t.terms) sum += term.seconds;
  EXPECT_DOUBLE_EQ(t.step_s, sum);
  EXPECT_DOUBLE_EQ(t.tokens_s, 3 * 32 / t.step_s);
  // AGoQ adds the 4-bit store's passes and the q8 gradient fold (4 fp32 bytes per parameter per micro-batch)
  opt.system = PlanSystem::agoq;
  const PlanTime q = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, opt, cal);
  EXPECT_GT(q.term("act_store"), 0);
  EXPECT_NEAR(q.term("grad_store"), 3 * 4 * kParams / 1e9, 1e-12);
}

TEST(TimeModel, DataParallelReductionFp32VersusQ8AndZeroGather) {
  const LlamaConfig cfg = tiny();
  const PlanCalibration cal = round_calibration();  // DP 2 inside a node: 1 GB/s, 10 us; one bucket
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime fp32 = plan_step_time(cfg, {2, 1, 1}, {16, 2, 3}, opt, cal);
  // ring all-reduce over 2: 2 (n-1)/n of the fp32 bytes, 2 (n-1) latencies
  EXPECT_NEAR(fp32.term("dp_reduce"), 4 * kParams / 1e9 + 2 * 1e-5, 1e-12);
  EXPECT_DOUBLE_EQ(fp32.tokens_s, 2 * 3 * 32 / fp32.step_s);
  // allreduce_q8: all-to-all and all-gather of int8 codes with an fp32 scale per 256 (each half the buffer over
  // 2 ranks), 2 latencies, and the local dequantize-sum-requantize passes over the fp32 values
  opt.system = PlanSystem::agoq;
  const PlanTime q8 = plan_step_time(cfg, {2, 1, 1}, {16, 2, 3}, opt, cal);
  const double codes = kParams * (1 + 4.0 / 256);
  EXPECT_NEAR(q8.term("dp_reduce"), 2 * (codes / 2) / 1e9 + 2 * 1e-5 + 2 * 4 * kParams / 1e9, 1e-12);
  // ZeRO-1: a reduce-scatter instead of the all-reduce, the optimizer on half, then a gather of bf16 weights
  PlanParallel zero{2, 1, 1};
  zero.zero1 = true;
  opt.system = PlanSystem::baseline;
  const PlanTime z = plan_step_time(cfg, zero, {16, 2, 3}, opt, cal);
  EXPECT_NEAR(z.term("dp_reduce"), 4 * kParams / 2 / 1e9 + 2 * 1e-5, 1e-12);
  EXPECT_NEAR(z.term("zero_gather"), 2 * kParams / 2 / 1e9 + 1e-5, 1e-12);
  EXPECT_NEAR(z.term("optimizer"), kParams / 2 / 1e7, 1e-12);
}

TEST(TimeModel, TensorParallelCollectivesPerLayerAndSequenceParallelEqualVolume) {
  const LlamaConfig cfg = tiny();
  const PlanCalibration cal = round_calibration();
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime t = plan_step_time(cfg, {2, 2, 1}, {16, 2, 3}, opt, cal);
  // 4 all-reduces of the micro-batch's bf16 activations per layer, one after the embedding and one in the head;
  // over 2 ranks each costs the bytes once and 2 latencies
  const double one = 32 * 64 * 2 / 1e9 + 2 * 1e-5;
  EXPECT_NEAR(t.term("tp_comm"), 3 * (4 * 2 + 2) * one, 1e-12);
  PlanParallel sp{2, 2, 1};
  sp.sp = true;
  const PlanTime s = plan_step_time(cfg, sp, {16, 2, 3}, opt, cal);
  EXPECT_NEAR(s.term("tp_comm"), t.term("tp_comm"), 1e-12);  // all-gather + reduce-scatter = one all-reduce
  EXPECT_LT(s.term("elementwise"), t.term("elementwise"));   // norms and residual adds on half the rows
  EXPECT_THROW(plan_step_time(cfg, {3, 3, 1}, {16, 2, 3}, opt, cal), Error);  // 3 does not divide 4 heads
}

TEST(TimeModel, PipelineBubbleIsStagesMinusOneMicroBatchesOfTheSlowestStage) {
  const LlamaConfig cfg = tiny();
  const PlanCalibration cal = round_calibration();
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const int m = 5;
  const PlanTime t = plan_step_time(cfg, {2, 1, 2}, {16, 2, m}, opt, cal);
  ASSERT_EQ(t.micro_batch_s.size(), 2u);
  const double slowest = std::max(t.micro_batch_s[0], t.micro_batch_s[1]);
  EXPECT_DOUBLE_EQ(t.micro_batch_s[size_t(t.slowest_stage)], slowest);
  // one send: a micro-batch's bf16 activations (or their gradient) one way; 2 ranks fit one node: the intra link
  const double send = 32 * 64 * 2 / 2e9 + 1e-5;
  // 1F1B: (m + P - 1) micro-batch slots, and the first forward's and last backward's way over the P - 1 links
  EXPECT_NEAR(t.term("pp_bubble"), 1 * (slowest + 2 * send), 1e-12);
  EXPECT_NEAR(pipeline_s(t), m * slowest + (slowest + 2 * send), 1e-12);
  // the sends overlap the stage's compute (isend), which is longer here: nothing shows
  EXPECT_DOUBLE_EQ(t.term("pp_send"), 0);
  // over a slow link (the stages on two nodes of one rank) only the part beyond the compute shows
  PlanCalibration slow = cal;
  slow.ranks_per_node = 1;
  slow.inter = {1e5, 1e-4, 1e5};
  const PlanTime s = plan_step_time(cfg, {2, 1, 2}, {16, 2, m}, opt, slow);
  const double slow_send = 32 * 64 * 2 / 1e5 + 1e-4;
  ASSERT_GT(slow_send, slowest);
  EXPECT_NEAR(s.micro_batch_s[0], slow_send, 1e-12);  // each stage: the larger of its work and its send
  EXPECT_NEAR(s.micro_batch_s[1], slow_send, 1e-12);
  EXPECT_NEAR(s.term("pp_send"), m * (slow_send - t.micro_batch_s[size_t(s.slowest_stage)]), 1e-12);
}

TEST(TimeModel, TimeSharedCoresFillTheBubbleUpToTheCriticalPath) {
  const LlamaConfig cfg = tiny();
  PlanCalibration cal = round_calibration();
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  cal.core_share = 0.5;  // 4 ranks on 2 cores
  // 4 micro-batches over 2 stages: the mean work (4 slots) exceeds the critical path at twice the speed (5 / 2)
  const PlanTime many = plan_step_time(cfg, {2, 1, 2}, {16, 2, 4}, opt, cal);
  EXPECT_DOUBLE_EQ(many.term("pp_bubble"), 0);
  EXPECT_NEAR(pipeline_s(many), 4 * (many.micro_batch_s[0] + many.micro_batch_s[1]) / 2, 1e-12);
  // 1 micro-batch over 2 stages: one rank works at a time, at a core's full speed: 2 slots at half the time
  const PlanTime one = plan_step_time(cfg, {2, 1, 2}, {16, 2, 1}, opt, cal);
  const double slowest = one.micro_batch_s[size_t(one.slowest_stage)];
  const double send = 32 * 64 * 2 / 2e9 + 1e-5;
  EXPECT_NEAR(pipeline_s(one), (2 * slowest + 2 * send) * 0.5, 1e-12);
  EXPECT_NEAR(one.term("pp_bubble"), (slowest + 2 * send) * 0.5, 1e-12);
  // waiting ranks that spin (wait_yield 0) fill nothing: the dedicated pipeline; half-yielding ones: half the way
  PlanCalibration spin = cal;
  spin.core_share = 1;
  const PlanTime dedicated = plan_step_time(cfg, {2, 1, 2}, {16, 2, 4}, opt, spin);
  spin.core_share = 0.5, spin.wait_yield = 0;
  EXPECT_NEAR(pipeline_s(plan_step_time(cfg, {2, 1, 2}, {16, 2, 4}, opt, spin)), pipeline_s(dedicated), 1e-12);
  spin.wait_yield = 0.5;
  EXPECT_NEAR(pipeline_s(plan_step_time(cfg, {2, 1, 2}, {16, 2, 4}, opt, spin)),
              (pipeline_s(dedicated) + pipeline_s(many)) / 2, 1e-12);
}

TEST(TimeModel, TimeSharedCoresCarryTheStagesPlacedOnThem) {
  // 4 stages on 2 cores, round-robin: stages 0 and 2 share one core, 1 and 3 (with the head) the other, which the
  // first waits for; 8 micro-batches keep both cores busy past the critical path. As an interleaved pipeline over
  // 2 cores with 2 stages on each, the bubble is half of the busiest core's micro-batch.
  const LlamaConfig cfg = llama_shape(256, 64, 4, 4, 2, 128, 16);
  PlanCalibration cal = round_calibration();
  cal.core_share = 0.5;
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime t = plan_step_time(cfg, {4, 1, 4}, {16, 2, 8}, opt, cal);
  const std::vector<double>& mb = t.micro_batch_s;
  ASSERT_EQ(mb.size(), 4u);
  ASSERT_GT(mb[3] + mb[1], mb[0] + mb[2]);
  const double busiest = (mb[1] + mb[3]) / 2;
  EXPECT_NEAR(t.term("pp_bubble"), busiest / 2, 1e-12);
  EXPECT_NEAR(pipeline_s(t), 8 * busiest + busiest / 2, 1e-12);
}

TEST(TimeModel, ModelEfficiencyScalesTheComputeTerms) {
  const LlamaConfig cfg = tiny();
  PlanCalibration cal = round_calibration();
  const PlanTime full = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, {}, cal);
  cal.device.model_efficiency = 0.5;
  const PlanTime half = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, {}, cal);
  EXPECT_NEAR(half.term("gemm+attention"), 2 * full.term("gemm+attention"), 1e-12);
  EXPECT_NEAR(half.term("elementwise"), 2 * full.term("elementwise"), 1e-12);
  EXPECT_DOUBLE_EQ(half.term("act_store"), full.term("act_store"));
  EXPECT_DOUBLE_EQ(half.term("optimizer"), full.term("optimizer"));
}

TEST(TimeModel, TpEfficiencyScalesTheShardsTermsOnly) {
  const LlamaConfig cfg = tiny();
  PlanCalibration cal = round_calibration();
  const PlanTime full = plan_step_time(cfg, {2, 2, 1}, {16, 2, 3}, {}, cal);
  const PlanTime whole = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, {}, cal);
  cal.tp_efficiency = 0.5;
  const PlanTime half = plan_step_time(cfg, {2, 2, 1}, {16, 2, 3}, {}, cal);
  for (const char* term : {"gemm+attention", "elementwise", "tp_comm"})
    EXPECT_NEAR(half.term(term), 2 * full.term(term), 1e-12) << term;
  EXPECT_DOUBLE_EQ(half.term("act_store"), full.term("act_store"));
  EXPECT_DOUBLE_EQ(half.term("optimizer"), full.term("optimizer"));
  EXPECT_DOUBLE_EQ(plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, {}, cal).step_s, whole.step_s);  // no shards
}

TEST(TimeModel, GemmRowsCurveScalesCallsByTheirRows) {
  const LlamaConfig cfg = tiny();
  PlanCalibration cal = round_calibration();
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime flat = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, opt, cal);
  cal.device.gemm_rows.points = {{16, 0.5}, {64, 1.0}};  // the megatron trainer's GEMMs take all 32 rows at once
  const PlanTime rows = plan_step_time(cfg, {1, 1, 1}, {16, 2, 3}, opt, cal);
  const double attention = 3 * kAttnFlops / 5e8, gemm = flat.term("gemm+attention") - attention;
  EXPECT_NEAR(rows.term("gemm+attention") - attention, gemm / std::sqrt(0.5), 1e-12);  // 32 rows: 0.5^(1/2)
  EXPECT_DOUBLE_EQ(rows.term("elementwise"), flat.term("elementwise"));
}

TEST(TimeModel, LinksAcrossNodesUseTheInterNodeLink) {
  const LlamaConfig cfg = tiny();
  const PlanCalibration cal = round_calibration();  // 2 ranks per node: DP 4 spans nodes
  PlanTimeOptions opt;
  opt.system = PlanSystem::baseline;
  const PlanTime t = plan_step_time(cfg, {4, 1, 1}, {16, 2, 2}, opt, cal);
  EXPECT_NEAR(t.term("dp_reduce"), 2.0 * 3 / 4 * 4 * kParams / 1e8 + 2 * 3 * 1e-4, 1e-12);
}

TEST(TimeModel, RateCurvesInterpolateInLogLogAndHoldBeyondTheEnds) {
  PlanRateCurve c;
  c.points = {{1e6, 1e9}, {1e8, 1e11}};
  EXPECT_DOUBLE_EQ(c.at(1e3), 1e9);
  EXPECT_DOUBLE_EQ(c.at(1e9), 1e11);
  EXPECT_NEAR(c.at(1e7), 1e10, 1e-3);
  EXPECT_NEAR(c.at(1e6 * std::sqrt(10.0)), 1e9 * std::sqrt(10.0), 1e-3);
  EXPECT_THROW(PlanRateCurve{}.at(1), Error);
}

TEST(TimeModel, RingCollectiveFormulas) {
  const PlanLink l{1e9, 1e-6, 2e9};
  EXPECT_DOUBLE_EQ(plan_allreduce_s(l, 8e9, 8), 2.0 * 7 / 8 * 8 + 14e-6);
  EXPECT_DOUBLE_EQ(plan_allgather_s(l, 8e9, 8), 7.0 / 8 * 8 + 7e-6);
  EXPECT_DOUBLE_EQ(plan_send_s(l, 1e9), 0.5 + 1e-6);  // one way, at the link's one-way rate
  EXPECT_DOUBLE_EQ(plan_allreduce_s(l, 8e9, 1), 0);
}

TEST(Calibration, ParsesLinkRatesInBytesAndBits) {
  EXPECT_DOUBLE_EQ(plan_parse_rate("900GB/s", "--intra"), 900e9);
  EXPECT_DOUBLE_EQ(plan_parse_rate("50 GB/s", "--inter"), 50e9);
  EXPECT_DOUBLE_EQ(plan_parse_rate("200Gbit/s", "--inter"), 25e9);
  EXPECT_DOUBLE_EQ(plan_parse_rate("100Mbit", "--inter"), 12.5e6);
  EXPECT_DOUBLE_EQ(plan_parse_rate("1234", "--inter"), 1234);
  for (const char* bad : {"fast", "10 parsecs/s", "-5GB/s", "0GB/s", ""}) {
    try {
      plan_parse_rate(bad, "--intra");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--intra"), std::string::npos) << e.what();
    }
  }
}

TEST(Calibration, JsonRoundTripsAndNamesAMissingField) {
  PlanCalibration d = plan_calibration_gpu_defaults();
  d.tp_efficiency = 0.8;
  d.device.gemm_rows.points = {{64, 0.9}, {256, 1.0}};
  const PlanCalibration r = plan_calibration_from_json(plan_calibration_json(d), d.source);
  EXPECT_EQ(r.device.gemm.points, d.device.gemm.points);
  EXPECT_EQ(r.device.attention.points, d.device.attention.points);
  EXPECT_EQ(r.device.grad_fold_bw, d.device.grad_fold_bw);
  EXPECT_EQ(r.inter.bytes_s, d.inter.bytes_s);
  EXPECT_EQ(r.intra.latency_s, d.intra.latency_s);
  EXPECT_EQ(r.ranks_per_node, d.ranks_per_node);
  EXPECT_EQ(r.inter.send_bytes_s, d.inter.send_bytes_s);
  EXPECT_EQ(r.device.model_efficiency, d.device.model_efficiency);
  EXPECT_EQ(r.core_share, d.core_share);
  EXPECT_EQ(r.wait_yield, d.wait_yield);
  EXPECT_EQ(r.tp_efficiency, d.tp_efficiency);
  EXPECT_EQ(r.device.gemm_rows.points, d.device.gemm_rows.points);
  EXPECT_EQ(r.trainer, d.trainer);
  EXPECT_EQ(plan_calibration_json(r), plan_calibration_json(d));
  nlohmann::json j = plan_calibration_json(d);
  j["inter"].erase("latency_s");
  try {
    plan_calibration_from_json(j, "cal.json");
    ADD_FAILURE() << "a calibration without inter.latency_s was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cal.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inter.latency_s"), std::string::npos) << e.what();
  }
  j = plan_calibration_json(d);
  j["device"]["gemm_flops_by_call_flops"] = nlohmann::json::array({{1e9, 1e12}, {1e8, 1e12}});
  EXPECT_THROW(plan_calibration_from_json(j, "cal.json"), Error);  // sizes out of order
  j = plan_calibration_json(d);
  j["core_share"] = 1.5;
  EXPECT_THROW(plan_calibration_from_json(j, "cal.json"), Error);  // more than a core per rank
  j = plan_calibration_json(d);
  j.erase("tp_efficiency");  // a file from before these were measured: TP as the terms say, rows alike
  j["device"].erase("gemm_rate_by_rows");
  EXPECT_EQ(plan_calibration_from_json(j, "cal.json").tp_efficiency, 1.0);
  EXPECT_TRUE(plan_calibration_from_json(j, "cal.json").device.gemm_rows.points.empty());
  j["tp_efficiency"] = -1;
  EXPECT_THROW(plan_calibration_from_json(j, "cal.json"), Error);
  EXPECT_THROW(plan_calibration_load("/nonexistent/cal.json"), Error);
}

}  // namespace
}  // namespace agoq

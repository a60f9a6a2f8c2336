#include "plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/llama.h"
#include "opmath/op_flops.h"

namespace agoq {

double PlanRateCurve::at(double size) const {
  AGOQ_CHECK(!points.empty(), "a rate curve of the calibration is empty");
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i) {
    const auto [x1, y1] = points[i];
    if (size > x1) continue;
    const auto [x0, y0] = points[i - 1];
    const double f = std::log(size / x0) / std::log(x1 / x0);
    return std::exp(std::log(y0) + f * (std::log(y1) - std::log(y0)));
  }
  return points.back().second;
}

const char* plan_trainer_name(PlanTrainer t) { return t == PlanTrainer::agoq_cpu ? "agoq-cpu" : "megatron-gpu"; }
PlanTrainer plan_trainer_parse(const std::string& name) {
  if (name == "agoq-cpu") return PlanTrainer::agoq_cpu;
  AGOQ_CHECK(name == "megatron-gpu", "trainer '", name, "' is not one of agoq-cpu, megatron-gpu");
  return PlanTrainer::megatron_gpu;
}
double plan_trainer_wire_bytes(PlanTrainer t) { return t == PlanTrainer::agoq_cpu ? 4 : 2; }

double PlanTime::term(const std::string& name) const {
  for (const PlanTimeTerm& t : terms)
    if (t.name == name) return t.seconds;
  return 0;
}

double plan_allreduce_s(const PlanLink& l, double bytes, int n) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / l.bytes_s + 2.0 * (n - 1) * l.latency_s;
}
double plan_allgather_s(const PlanLink& l, double bytes, int n) {
  if (n <= 1) return 0;
  return double(n - 1) / n * bytes / l.bytes_s + double(n - 1) * l.latency_s;
}
double plan_send_s(const PlanLink& l, double bytes) { return bytes / l.send_bytes_s + l.latency_s; }

namespace {

// Per-rank widths after TP (kv heads replicated when T exceeds them, as the memory model does).
struct Widths {
  double d, ct, kvt, ft, vt;
};
Widths widths(const LlamaConfig& cfg, int tp) {
  const double hd = cfg.head_dim();
  return {double(cfg.dim), double(cfg.dim) / tp, std::max(1, cfg.n_kv_heads / tp) * hd, double(cfg.ffn_dim) / tp,
          std::ceil(double(cfg.vocab_size) / tp)};
}

// Rows per GEMM call: agoq's CPU trainer runs the layers tile by tile (model/llama.h), its head in chunks.
struct Rows {
  double layer, head;
};
Rows gemm_rows(const PlanCalibration& cal, int micro_batch, int seq) {
  const int N = micro_batch * seq;
  if (cal.trainer == PlanTrainer::agoq_cpu) return {double(llama_tile_rows(seq, N)), double(std::min(N, 256))};
  return {double(N), double(N)};
}

}  // namespace

PlanStageFlops plan_stage_flops(const LlamaConfig& cfg, const PlanStage& st, int tp, int micro_batch, int seq,
                                const PlanCalibration& cal) {
  const Widths w = widths(cfg, tp);
  const double N = double(micro_batch) * seq;
  const Rows r = gemm_rows(cal, micro_batch, seq);
  PlanStageFlops f;
  auto add = [&](double rows, double in, double out, int per_layer) {
    const double call = 2 * rows * in * out, calls = N / rows * per_layer;
    // forward once, backward twice (input and weight gradients): 3 calls of the forward's size
    f.gemm_calls.push_back({call, int(std::lround(3 * calls)), rows});
    f.gemm += 3 * call * calls;
  };
  if (st.n_layers > 0) {
    const int L = st.n_layers;
    add(r.layer, w.d, w.ct, 2 * L);   // q, o
    add(r.layer, w.d, w.kvt, 2 * L);  // k, v
    add(r.layer, w.d, w.ft, 3 * L);   // gate, up, down
    const double heads = double(cfg.n_heads) / tp;
    f.attention = (attention_forward_flops(micro_batch, heads, seq, cfg.head_dim()) +
                   attention_backward_flops(micro_batch, heads, seq, cfg.head_dim())) *
                  L;
  }
  if (st.head) add(r.head, w.d, w.vt, 1);
  return f;
}

namespace {

// Bytes the memory-bound ops read and write per token of one stage, forward and backward (fp32, as bench ops
// counts them: RMSNorm 8 / 16 bytes per value, RoPE 8 each way, a residual add 12 each way, SwiGLU 12 / 20,
// cross-entropy 8 per logit); AGoQ's recomputed norm and SwiGLU outputs run their forward again in backward.
double elementwise_bytes_per_token(const LlamaConfig& cfg, const PlanStage& st, int tp, bool sp,
                                   const ActPolicy& policy) {
  const Widths w = widths(cfg, tp);
  const double resid = sp ? w.d / tp : w.d;  // norms and residual adds: 1/T of the rows per rank under SP
  double b = 0;
  for (int l = 0; l < st.n_layers; ++l) {
    b += 2 * (8 + 16) * resid + 2 * 8 * (w.ct + w.kvt) + 2 * 2 * 12 * resid + (12 + 20) * w.ft;
    if (!policy.at(l, ActSlot::attn_norm_out).stored) b += 8 * resid;
    if (!policy.at(l, ActSlot::mlp_norm_out).stored) b += 8 * resid;
    if (!policy.at(l, ActSlot::swiglu_out).stored) b += 12 * w.ft;
  }
  if (st.head) b += 24 * resid + 8 * w.vt;
  if (st.embed) b += 20 * w.d;
  return b;
}

// Seconds per token the activation store spends quantizing in forward and dequantizing in backward (slots kept in
// fp32 are written in place; recomputed ones are not stored).
double act_store_s_per_token(const LlamaConfig& cfg, const PlanStage& st, int tp, bool sp, const ActPolicy& policy,
                             const PlanDeviceRates& dev) {
  const std::array<int, kActSlotCount> cols = plan_slot_cols(cfg, tp);
  double b = 0;
  for (int l = 0; l < st.n_layers; ++l)
    for (int s = 0; s < kActSlotCount; ++s) {
      const SlotStorage& ss = policy.at(l, ActSlot(s));
      if (!ss.stored || ss.format.kind == QuantKind::fp32) continue;
      const double rows = double(act_slot_rows(ActSlot(s), 1u << 20, tp, sp)) / double(1u << 20);
      b += 4.0 * cols[s] * rows / (ss.format.kind == QuantKind::bf16 ? dev.act_bf16_bw : dev.act_quant_bw);
    }
  return b;
}

const PlanLink& link_for(const PlanCalibration& cal, int span) {
  return span <= cal.ranks_per_node ? cal.intra : cal.inter;
}

// pp: the part of the stage's outbound pipeline sends its own work does not cover; cross: one send's time.
struct StageTime {
  double compute = 0, elementwise = 0, act_store = 0, grad_store = 0, tp = 0, pp = 0, cross = 0;
  double work() const { return compute + elementwise + act_store + grad_store + tp; }
  double total() const { return work() + pp; }
};

StageTime stage_micro_batch_time(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                                 const PlanStage& st, const PlanTimeOptions& opt, const PlanCalibration& cal) {
  const int T = par.tp;
  const double N = double(w.rows());
  const ActPolicy policy = ActPolicy::parse(opt.system == PlanSystem::agoq ? "agoq" : "fp32", st.n_layers);
  StageTime t;
  const PlanStageFlops f = plan_stage_flops(cfg, st, T, w.micro_batch, w.seq, cal);
  const PlanDeviceRates& dev = cal.device;
  for (const PlanStageFlops::Gemm& g : f.gemm_calls)
    t.compute +=
        g.flops * g.calls / (dev.gemm.at(g.flops) * (dev.gemm_rows.points.empty() ? 1 : dev.gemm_rows.at(g.rows)));
  if (f.attention > 0) t.compute += f.attention / cal.device.attention.at(w.seq);
  t.elementwise = N * elementwise_bytes_per_token(cfg, st, T, par.sp, policy) / cal.device.elementwise_bw;
  t.compute /= cal.device.model_efficiency, t.elementwise /= cal.device.model_efficiency;
  t.act_store = N * act_store_s_per_token(cfg, st, T, par.sp, policy, cal.device);
  if (opt.system == PlanSystem::agoq) t.grad_store = 4.0 * double(st.params) / cal.device.grad_fold_bw;
  if (T > 1) {  // per layer: two all-reduces forward, two backward (SP: all-gathers and reduce-scatters, as much)
    const PlanLink& l = link_for(cal, T);
    const Rows r = gemm_rows(cal, w.micro_batch, w.seq);
    const double tiles = std::ceil(N / r.layer), bytes = r.layer * cfg.dim * plan_trainer_wire_bytes(cal.trainer);
    const double one = par.sp ? 2 * plan_allgather_s(l, bytes, T) : plan_allreduce_s(l, bytes, T);
    t.tp = 4.0 * st.n_layers * tiles * one;
    if (st.embed) t.tp += plan_allreduce_s(l, N * cfg.dim * plan_trainer_wire_bytes(cal.trainer), T);
    if (st.head) t.tp += plan_allreduce_s(l, N * cfg.dim * plan_trainer_wire_bytes(cal.trainer), T);
    const double k = 1 / cal.tp_efficiency;  // what the calibration's TP 2 run showed beyond these terms
    t.compute *= k, t.elementwise *= k, t.tp *= k;
  }
  if (par.pp > 1) {
    // Sends are asynchronous: per micro-batch the stage's outbound link carries one transfer per boundary (the
    // output forward, the input's gradient back) while it computes; only what its work does not cover shows.
    const double bytes = N / (par.sp ? T : 1) * cfg.dim * plan_trainer_wire_bytes(cal.trainer);
    const int boundaries = (st.stage > 0) + (st.stage < par.pp - 1);
    t.cross = plan_send_s(link_for(cal, par.gpus), bytes);
    t.pp = std::max(0.0, boundaries * t.cross - t.work());
  }
  return t;
}

// The DP reduction of one stage's gradients per step: fp32 all-reduce (reduce-scatter under ZeRO-1) or the q8
// all-to-all + all-gather of INT8 codes with a scale per 256, one latency per bucket.
double dp_reduce_s(const PlanParallel& par, const PlanStage& st, const PlanTimeOptions& opt,
                   const PlanCalibration& cal) {
  const int D = par.dp();
  if (D <= 1) return 0;
  const PlanLink& l = link_for(cal, par.tp * D);
  const double n = double(st.params), buckets = std::ceil(4 * n / double(opt.bucket_bytes));
  const double lat = buckets * 2.0 * (D - 1) * l.latency_s;
  if (opt.system == PlanSystem::agoq) {
    const double q8 = n * (1 + 4.0 / 256);
    return 2 * (plan_allgather_s(l, q8, D) - (D - 1) * l.latency_s) + lat + 2 * 4 * n / cal.device.grad_fold_bw;
  }
  const double fp32 = 4 * n;
  return (par.zero1 ? plan_allgather_s(l, fp32, D) - (D - 1) * l.latency_s
                    : plan_allreduce_s(l, fp32, D) - 2.0 * (D - 1) * l.latency_s) +
         lat;
}

StageTime scaled(const StageTime& t, double k) {
  return {k * t.compute, k * t.elementwise, k * t.act_store, k * t.grad_store, k * t.tp, k * t.pp, k * t.cross};
}

StageTime plus(const StageTime& a, const StageTime& b) {
  return {a.compute + b.compute,
          a.elementwise + b.elementwise,
          a.act_store + b.act_store,
          a.grad_store + b.grad_store,
          a.tp + b.tp,
          a.pp + b.pp,
          a.cross + b.cross};
}

// Ranks time-sharing cores sit round-robin on them (rank r on core r mod C, as `mpirun --map-by core` places
// them). The busiest core's mean micro-batch over the stages on it, whose work the others wait for, and the cores
// one pipeline's stages occupy.
struct CorePlacement {
  StageTime busiest;
  int pipeline_cores = 1;
};

CorePlacement place_on_cores(const std::vector<StageTime>& stages, const PlanParallel& par, double core_share) {
  const int ranks = par.gpus, per_stage = par.tp * par.dp();
  const int cores = std::clamp(int(std::lround(ranks * core_share)), 1, ranks);
  CorePlacement out;
  for (int c = 0; c < cores; ++c) {
    StageTime sum;
    int n = 0;
    for (int r = c; r < ranks; r += cores, ++n) sum = plus(sum, stages[size_t(r / per_stage)]);
    if (sum.total() / n > out.busiest.total()) out.busiest = scaled(sum, 1.0 / n);
  }
  std::vector<bool> used(size_t(cores), false);
  for (int st = 0; st < par.pp; ++st) used[size_t(st * per_stage % cores)] = true;
  out.pipeline_cores = int(std::count(used.begin(), used.end(), true));
  return out;
}

// What one of the step's m micro-batch slots costs, and the bubble. Dedicated devices (core_share 1): the slowest
// stage's micro-batch; the 1F1B bubble is P - 1 of them plus the first forward's and the last backward's way
// over the P - 1 links. Ranks time-sharing cores (core_share < 1) whose waiting hands its core to the others
// (wait_yield 1): the larger of the busiest core's mean work (the cores never idle) and the 1F1B critical path at
// the speed of a rank with a core to itself (1 / core_share faster). A pipeline spread over p cores, v stages on
// each, runs as an interleaved 1F1B over p devices: its bubble is (p - 1) / v of a core's micro-batch (Narayanan
// et al. 2021). A waiting rank that gives only part of its core (wait_yield between 0 and 1) gets the same part of
// the way from the dedicated pipeline to the shared one.
StageTime pipeline_slot(const std::vector<StageTime>& stages, int slowest, double m, const PlanParallel& par,
                        const PlanCalibration& cal, double& bubble) {
  const StageTime& s = stages[size_t(slowest)];
  bubble = (par.pp - 1) * (s.total() + 2 * s.cross);
  if (cal.core_share >= 1 || par.pp == 1) return s;
  const CorePlacement place = place_on_cores(stages, par, cal.core_share);
  const double p = place.pipeline_cores, v = par.pp / p;
  StageTime shared = place.busiest;
  double shared_bubble = (p - 1) / v * place.busiest.total();
  if (m * place.busiest.total() + shared_bubble < (m * s.total() + bubble) * cal.core_share)
    shared = scaled(s, cal.core_share), shared_bubble = bubble * cal.core_share;
  const double y = cal.wait_yield;
  bubble = (1 - y) * bubble + y * shared_bubble;
  return plus(scaled(s, 1 - y), scaled(shared, y));
}

}  // namespace

PlanTime plan_step_time(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                        const PlanTimeOptions& opt, const PlanCalibration& cal) {
  plan_parallel_check(cfg, par, w);
  const std::vector<PlanStage> stages = plan_stages(cfg, par, w);
  PlanTime out;
  std::vector<StageTime> st_t;
  for (const PlanStage& st : stages) {
    st_t.push_back(stage_micro_batch_time(cfg, par, w, st, opt, cal));
    out.micro_batch_s.push_back(st_t.back().total());
  }
  out.slowest_stage =
      int(std::max_element(out.micro_batch_s.begin(), out.micro_batch_s.end()) - out.micro_batch_s.begin());
  const double m = w.num_micro_batches;
  double bubble = 0;
  const StageTime s = pipeline_slot(st_t, out.slowest_stage, m, par, cal, bubble);
  auto add = [&](const char* name, double sec) { out.terms.push_back({name, sec}); };
  add("gemm+attention", m * s.compute);
  add("elementwise", m * s.elementwise);
  add("act_store", m * s.act_store);
  add("grad_store", m * s.grad_store);
  add("tp_comm", m * s.tp);
  add("pp_send", m * s.pp);
  add("pp_bubble", bubble);
  // Per step, the slowest stage's own reduction, gather and optimizer (stages run them side by side).
  const int D = par.dp();
  double dp = 0, gather = 0, optim = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const PlanStage& st = stages[i];
    const double reduce = dp_reduce_s(par, st, opt, cal);
    // without ZeRO-1 the reduction runs beside the last micro-batch's backward (2/3 of its GEMM work)
    const double hidden = par.zero1 ? 0 : std::min(reduce, cal.dp_overlap * st_t[i].compute * 2 / 3);
    const double g = par.zero1 && D > 1 ? plan_allgather_s(link_for(cal, par.tp * D),
                                                           double(st.params) * plan_trainer_wire_bytes(cal.trainer), D)
                                        : 0;
    const double n_opt = double(st.params) / (par.zero1 ? D : 1);
    const double o = n_opt / (opt.optim_q8 ? cal.device.adam_q8_params_s : cal.device.adam_params_s);
    if (reduce - hidden + g + o > dp + gather + optim) dp = reduce - hidden, gather = g, optim = o;
  }
  add("dp_reduce", dp);
  add("zero_gather", gather);
  add("optimizer", optim);
  for (const PlanTimeTerm& t : out.terms) {
    // (a calibration's ranges keep every term finite; this names the term should one still not be)
    AGOQ_CHECK(std::isfinite(t.seconds) && t.seconds >= 0, "the step-time model's ", t.name, " term is ", t.seconds,
               " s with the calibration ", cal.source, ": a rate or latency in it is out of range");
    out.step_s += t.seconds;
  }
  out.tokens_s = double(w.rows()) * m * D / out.step_s;
  AGOQ_CHECK(std::isfinite(out.step_s) && out.step_s > 0 && std::isfinite(out.tokens_s),
             "the step-time model predicts ", out.step_s, " s a step with the calibration ", cal.source,
             ": a rate or latency in it is out of range");
  return out;
}

nlohmann::json plan_time_json(const PlanTime& t) {
  nlohmann::json j = {{"step_s", t.step_s},
                      {"tokens_per_s", t.tokens_s},
                      {"slowest_stage", t.slowest_stage},
                      {"micro_batch_s", t.micro_batch_s}};
  for (const PlanTimeTerm& term : t.terms) j["terms"][term.name] = term.seconds;
  return j;
}

std::string plan_time_text(const PlanTime& t, const std::string& system, const std::string& source) {
  char line[256];
  std::snprintf(line, sizeof line, "predicted step (%s): %.4f s, %.0f tokens/s (calibration: %s)\n", system.c_str(),
                t.step_s, t.tokens_s, source.c_str());
  std::string out = line;
  for (const PlanTimeTerm& term : t.terms) {
    std::snprintf(line, sizeof line, "  %-16s %10.4f s  %5.1f%%\n", term.name.c_str(), term.seconds,
                  100 * term.seconds / t.step_s);
    out += line;
  }
  return out;
}

}  // namespace agoq

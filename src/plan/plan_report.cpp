#include "plan/plan_report.h"

#include <cstdio>

#include "core/error.h"
#include "core/memory_json.h"

namespace agoq {

namespace {

double gib(size_t b) { return double(b) / double(1ull << 30); }

nlohmann::json memory_json(const PlanMemory& m, size_t gpu_mem) {
  nlohmann::json j = mem_bytes_json(m.bytes);
  j["total"] = m.total();
  j["fits"] = m.total() <= gpu_mem;
  return j;
}

}  // namespace

double PlanReport::reduction(int s) const {
  return 1.0 - double(stages[s].agoq.total()) / double(stages[s].baseline.total());
}
double PlanReport::planned_reduction(int s) const {
  return 1.0 - double(stages[s].planned.total()) / double(stages[s].baseline.total());
}

void plan_seq_check(const LlamaConfig& cfg, int seq, const std::string& model_name) {
  AGOQ_CHECK(seq >= 1, "--seq must be positive (got ", seq, ")");
  AGOQ_CHECK(seq <= cfg.max_seq_len, "--seq ", seq, " is beyond ", model_name, "'s ", cfg.max_seq_len,
             " positions (max_position_embeddings)");
}

PlanReport plan_run(const PlanRequest& req) {
  plan_seq_check(req.cfg, req.work.seq, req.model_name);
  PlanReport rep;
  rep.req = req;
  const PlanActShape shape{req.cfg, req.par.tp, req.work.rows(), req.par.sp};
  for (const PlanStage& st : plan_stages(req.cfg, req.par, req.work, req.gpu)) {
    PlanStageReport r;
    r.stage = st;
    r.baseline = plan_memory_per_rank(req.cfg, req.par, req.work, st, PlanSystem::baseline,
                                      ActPolicy::parse("baseline-bf16", st.n_layers), req.gpu);
    r.agoq = plan_memory_per_rank(req.cfg, req.par, req.work, st, PlanSystem::agoq,
                                  ActPolicy::parse("agoq", st.n_layers), req.gpu);
    const PlanMemory fixed = plan_memory_static(req.cfg, req.par, req.work, st, PlanSystem::agoq, req.gpu);
    r.act_budget = req.gpu_mem > fixed.total() ? req.gpu_mem - fixed.total() : 0;
    PlanStageBudget b;
    b.n_layers = st.n_layers, b.in_flight = st.in_flight, b.budget = r.act_budget;
    const size_t need = plan_min_act_bytes(shape, b, req.bits);
    r.bits_feasible = need <= b.budget;
    if (!r.bits_feasible) b.budget = need;  // shown at the lowest bits, marked as not fitting
    r.bits = plan_allocate_stage(shape, b, req.bits);
    r.bits.budget = r.act_budget;
    r.planned = fixed;
    r.planned[MemCategory::activations] = r.bits.act_bytes;
    rep.stages.push_back(r);
  }
  for (int s = 1; s < int(rep.stages.size()); ++s)
    if (rep.stages[s].baseline.total() > rep.stages[rep.tightest].baseline.total()) rep.tightest = s;
  return rep;
}

nlohmann::json plan_report_json(const PlanReport& rep) {
  const PlanRequest& q = rep.req;
  nlohmann::json j;
  j["model"] = {{"name", q.model_name},         {"dim", q.cfg.dim},
                {"layers", q.cfg.n_layers},     {"heads", q.cfg.n_heads},
                {"kv_heads", q.cfg.n_kv_heads}, {"ffn", q.cfg.ffn_dim},
                {"vocab", q.cfg.vocab_size},    {"vocab_padded", plan_padded_vocab(q.cfg, q.par.tp, q.gpu.vocab_align)},
                {"params", q.cfg.param_count()}};
  j["parallel"] = {{"gpus", q.par.gpus}, {"tp", q.par.tp},       {"pp", q.par.pp},
                   {"dp", q.par.dp()},   {"zero1", q.par.zero1}, {"sp", q.par.sp}};
  j["workload"] = {
      {"seq", q.work.seq}, {"micro_batch", q.work.micro_batch}, {"num_micro_batches", q.work.num_micro_batches}};
  j["gpu_mem"] = q.gpu_mem;
  j["options"] = {{"bucket_bytes", q.gpu.bucket_bytes},
                  {"reserve_bytes", q.gpu.reserve_bytes},
                  {"grad_block", q.gpu.grad_block},
                  {"quantize_attention", q.bits.quantize_attention},
                  {"optim_state", q.gpu.optim_q8 ? "q8" : "fp32"},
                  {"optim_block", q.gpu.optim_block},
                  {"bits", q.bits.bits}};
  j["stages"] = nlohmann::json::array();
  for (int s = 0; s < int(rep.stages.size()); ++s) {
    const PlanStageReport& r = rep.stages[s];
    nlohmann::json bits;
    for (int k = 0; k < kActSlotCount; ++k) bits[act_slot_name(ActSlot(k))] = plan_bits_name(r.bits.bits[k]);
    nlohmann::json planned = memory_json(r.planned, q.gpu_mem);
    planned["reduction"] = rep.planned_reduction(s);
    planned["bits"] = bits;
    planned["bits_summary"] = plan_bits_summary(r.bits.bits);
    planned["act_budget"] = r.act_budget;
    planned["bits_feasible"] = r.bits_feasible;
    nlohmann::json agoq = memory_json(r.agoq, q.gpu_mem);
    agoq["reduction"] = rep.reduction(s);
    j["stages"].push_back({{"stage", s},
                           {"layers", {r.stage.first_layer, r.stage.first_layer + r.stage.n_layers - 1}},
                           {"in_flight", r.stage.in_flight},
                           {"params_per_rank", r.stage.params},
                           {"baseline", memory_json(r.baseline, q.gpu_mem)},
                           {"agoq", agoq},
                           {"planned", planned}});
  }
  j["tightest_stage"] = rep.tightest;
  j["tightest_reduction"] = rep.reduction(rep.tightest);
  return j;
}

std::string plan_report_text(const PlanReport& rep) {
  const PlanRequest& q = rep.req;
  std::string out;
  char line[512];
  auto put = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  put("agoq plan: %s: dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d (padded %d), %.2fB parameters\n",
      q.model_name.c_str(), q.cfg.dim, q.cfg.n_layers, q.cfg.n_heads, q.cfg.n_kv_heads, q.cfg.ffn_dim, q.cfg.vocab_size,
      plan_padded_vocab(q.cfg, q.par.tp, q.gpu.vocab_align), double(q.cfg.param_count()) / 1e9);
  put("  %d GPUs = TP %d%s x PP %d x DP %d, ZeRO-1 %s; seq %d, micro-batch %d, %d micro-batches (1F1B); %.2f GiB per GPU\n",
      q.par.gpus, q.par.tp, q.par.sp ? " (SP)" : "", q.par.pp, q.par.dp(), q.par.zero1 ? "on" : "off", q.work.seq,
      q.work.micro_batch, q.work.num_micro_batches, gib(q.gpu_mem));
  put("  agoq = 4-bit non-attention activations (attention bf16), 8-bit gradients%s; planned = bits allocated to fill "
      "the GPU\n\nper-GPU memory, GiB\n",
      q.gpu.optim_q8 ? ", 8-bit AdamW moments" : "");
  put("%-5s %-7s %-9s %-9s %8s %8s %8s %8s %8s %8s %8s %-5s %8s\n", "stage", "layers", "in-flight", "system", "weights",
      "grads", "optim", "activ", "comm", "work", "total", "fits", "vs base");
  for (int s = 0; s < int(rep.stages.size()); ++s) {
    const PlanStageReport& r = rep.stages[s];
    const std::pair<const char*, const PlanMemory*> rows[] = {
        {"baseline", &r.baseline}, {"agoq", &r.agoq}, {"planned", &r.planned}};
    for (int i = 0; i < 3; ++i) {
      const PlanMemory& m = *rows[i].second;
      char layers[32] = "", flight[16] = "", stage[16] = "", vs[16] = "";
      if (i == 0) {
        std::snprintf(stage, sizeof stage, "%d", s);
        std::snprintf(layers, sizeof layers, "%d-%d", r.stage.first_layer, r.stage.first_layer + r.stage.n_layers - 1);
        std::snprintf(flight, sizeof flight, "%d", r.stage.in_flight);
      } else {
        std::snprintf(vs, sizeof vs, "%+.1f%%", -100.0 * (i == 1 ? rep.reduction(s) : rep.planned_reduction(s)));
      }
      put("%-5s %-7s %-9s %-9s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %-5s %8s\n", stage, layers, flight,
          rows[i].first, gib(m[MemCategory::weights]), gib(m[MemCategory::gradients]), gib(m[MemCategory::optimizer]),
          gib(m[MemCategory::activations]), gib(m[MemCategory::communication]), gib(m[MemCategory::workspace]),
          gib(m.total()), m.total() <= q.gpu_mem ? "yes" : "NO", vs);
    }
  }
  put("\nplanned bits (minimise sum C/(2^b-1)^2 within each stage's activation budget; C: %s)\n",
      "default, 1 per stored value, attention x16");
  put("%-5s %-9s %12s %-44s %12s %s\n", "stage", "in-flight", "act budget", "bits per slot class", "activations", "");
  for (const PlanStageReport& r : rep.stages)
    put("%-5d %-9d %10.2f G %-44s %10.2f G %s\n", r.stage.stage, r.stage.in_flight, gib(r.act_budget),
        plan_bits_summary(r.bits.bits).c_str(), gib(r.bits.act_bytes),
        r.bits_feasible ? "" : "does not fit even at the lowest bits");
  const int t = rep.tightest;
  put("\ntightest stage %d: baseline %.2f GiB, agoq %.2f GiB: %.1f%% less memory per GPU (%s the 50%% target)\n", t,
      gib(rep.stages[t].baseline.total()), gib(rep.stages[t].agoq.total()), 100.0 * rep.reduction(t),
      rep.reduction(t) >= 0.5 ? "meets" : "below");
  return out;
}

}  // namespace agoq

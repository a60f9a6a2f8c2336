#include "plan/auto_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/memory_json.h"
#include "plan/calibration.h"
#include "plan/plan_report.h"

namespace agoq {

std::vector<int> plan_divisors(int n) {
  std::vector<int> low, high;
  for (int i = 1; i <= n / i; ++i)  // i <= n / i: i * i <= n without computing i * i
    if (n % i == 0) {
      low.push_back(i);
      if (i != n / i) high.push_back(n / i);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

namespace {

double gib(size_t b) { return double(b) / double(1ull << 30); }

std::string system_name(PlanSystem s, bool optim_q8) {
  if (s == PlanSystem::baseline) return "baseline";
  return optim_q8 ? "agoq + q8 AdamW" : "agoq";
}

// The stage with the largest memory of one system (AGoQ: its allocated bits; infeasible bits do not fit), and
// why it does not fit, if it does not.
void candidate_memory(const PlanReport& rep, size_t gpu_mem, PlanCandidate& c) {
  size_t worst = 0;
  for (int s = 0; s < int(rep.stages.size()); ++s) {
    const PlanStageReport& st = rep.stages[s];
    const PlanMemory& m = c.system == PlanSystem::baseline ? st.baseline : st.planned;
    if (m.total() >= worst) worst = m.total(), c.peak = m, c.peak_stage = s;
    if (c.system == PlanSystem::agoq && !st.bits_feasible && c.not_fit.empty()) {
      char line[200];
      std::snprintf(line, sizeof line,
                    "stage %d: weights, gradients and optimizer leave %.1f GiB, less than "
                    "its activations need even at the lowest bits",
                    s, gib(st.act_budget));
      c.not_fit = line;
    }
  }
  if (c.not_fit.empty() && worst > gpu_mem) {
    char line[240];
    std::snprintf(line, sizeof line,
                  "stage %d needs %.1f GiB of %.1f GiB (weights %.1f, gradients %.1f, optimizer "
                  "%.1f, activations %.1f)",
                  c.peak_stage, gib(worst), gib(gpu_mem), gib(c.peak[MemCategory::weights]),
                  gib(c.peak[MemCategory::gradients]), gib(c.peak[MemCategory::optimizer]),
                  gib(c.peak[MemCategory::activations]));
    c.not_fit = line;
  }
}

}  // namespace

std::string PlanCandidate::name() const {
  std::string s =
      "TP " + std::to_string(par.tp) + " x PP " + std::to_string(par.pp) + " x DP " + std::to_string(par.dp());
  if (par.sp) s += ", SP";
  if (par.zero1) s += ", ZeRO-1";
  const int m = work.num_micro_batches;
  s += ", " + std::to_string(m) + (m == 1 ? " micro-batch" : " micro-batches") + " of " +
       std::to_string(work.micro_batch);
  return s + ", " + system_name(system, optim_q8);
}

const PlanCandidate* PlanAutoResult::best_of(PlanSystem system, std::optional<bool> optim_q8) const {
  for (const PlanCandidate& c : fits)
    if (c.system == system && (!optim_q8 || c.optim_q8 == *optim_q8)) return &c;
  return nullptr;
}

std::vector<std::pair<int, int>> plan_auto_layouts(const LlamaConfig& cfg, int gpus, int seq,
                                                   std::vector<PlanRefusedLayout>* refused) {
  std::vector<std::pair<int, int>> out;
  for (int tp : plan_divisors(gpus))
    for (int pp : plan_divisors(gpus / tp)) {
      try {
        plan_parallel_check(cfg, {gpus, tp, pp}, {seq, 1, 1});
        out.push_back({tp, pp});
      } catch (const Error& e) {
        if (refused) refused->push_back({tp, pp, e.what()});
      }
    }
  return out;
}

PlanAutoResult plan_auto(const PlanAutoRequest& req) {
  // What no layout can mend fails here, by flag, rather than as every layout refused.
  plan_seq_check(req.cfg, req.seq, req.model_name);
  plan_parallel_check(req.cfg, {req.gpus, 1, 1}, {req.seq, 1, 1});
  AGOQ_CHECK(req.global_batch >= 1 && req.global_batch <= kPlanMaxCount, "--global-batch ", req.global_batch,
             " is out of range (1 to ", kPlanMaxCount, " sequences)");
  PlanAutoResult res;
  res.req = req;
  std::vector<PlanCandidate> all;
  for (const auto& [tp, pp] : plan_auto_layouts(req.cfg, req.gpus, req.seq, &res.refused)) {
    const int dp = req.gpus / (tp * pp);
    if (req.global_batch % dp != 0) {
      res.refused.push_back({tp, pp,
                             "DP " + std::to_string(dp) + " does not divide the global batch of " +
                                 std::to_string(req.global_batch) + " sequences"});
      continue;
    }
    for (int b : plan_divisors(req.global_batch / dp))
      for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
        for (int zero = 0; zero <= (dp > 1 ? 1 : 0); ++zero)
          for (int q8 = 0; q8 <= 1; ++q8) {
            if (sp && (size_t(b) * req.seq) % size_t(tp) != 0) continue;
            PlanRequest pr;
            pr.model_name = req.model_name, pr.cfg = req.cfg, pr.gpu_mem = req.gpu_mem, pr.bits = req.bits;
            pr.par = {req.gpus, tp, pp, zero == 1, sp == 1};
            pr.work = {req.seq, b, req.global_batch / (dp * b)};
            pr.gpu = req.gpu;
            pr.gpu.optim_q8 = q8 == 1;
            const PlanReport rep = plan_run(pr);
            for (PlanSystem sys : {PlanSystem::baseline, PlanSystem::agoq}) {
              if (sys == PlanSystem::baseline && q8) continue;  // the baseline keeps fp32 AdamW
              PlanCandidate c;
              c.par = pr.par, c.work = pr.work, c.system = sys, c.optim_q8 = q8 == 1;
              candidate_memory(rep, req.gpu_mem, c);
              PlanTimeOptions to;
              to.system = sys, to.optim_q8 = c.optim_q8, to.bucket_bytes = req.gpu.bucket_bytes;
              c.time = plan_step_time(req.cfg, c.par, c.work, to, req.cal);
              all.push_back(std::move(c));
            }
          }
  }
  res.evaluated = all.size();
  std::stable_sort(all.begin(), all.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) { return a.time.step_s < b.time.step_s; });
  for (PlanCandidate& c : all) {
    if (c.not_fit.empty()) res.fits.push_back(std::move(c));
    else if (res.fits.empty()) res.faster_not_fitting.push_back(std::move(c));
  }
  return res;
}

namespace {

nlohmann::json candidate_json(const PlanCandidate& c) {
  nlohmann::json mem = mem_bytes_json(c.peak.bytes);
  mem["total"] = c.peak.total();
  nlohmann::json j = {{"name", c.name()},
                      {"tp", c.par.tp},
                      {"pp", c.par.pp},
                      {"dp", c.par.dp()},
                      {"sp", c.par.sp},
                      {"zero1", c.par.zero1},
                      {"micro_batch", c.work.micro_batch},
                      {"num_micro_batches", c.work.num_micro_batches},
                      {"system", plan_system_name(c.system)},
                      {"optim_state", c.optim_q8 ? "q8" : "fp32"},
                      {"time", plan_time_json(c.time)},
                      {"memory_peak_stage", c.peak_stage},
                      {"memory", mem}};
  if (!c.not_fit.empty()) j["not_fit"] = c.not_fit;
  return j;
}

}  // namespace

nlohmann::json plan_auto_json(const PlanAutoResult& r) {
  nlohmann::json j = {{"model", r.req.model_name},          {"gpus", r.req.gpus},
                      {"gpu_mem", r.req.gpu_mem},           {"seq", r.req.seq},
                      {"global_batch", r.req.global_batch}, {"calibration", plan_calibration_json(r.req.cal)},
                      {"evaluated", r.evaluated},           {"fitting", r.fits.size()}};
  j["top"] = nlohmann::json::array();
  for (size_t i = 0; i < r.fits.size() && int(i) < r.req.top; ++i) j["top"].push_back(candidate_json(r.fits[i]));
  if (const PlanCandidate* b = r.best_baseline()) j["best_baseline"] = candidate_json(*b);
  if (const PlanCandidate* a = r.best_agoq()) j["best_agoq"] = candidate_json(*a);
  j["faster_not_fitting"] = nlohmann::json::array();
  for (size_t i = 0; i < r.faster_not_fitting.size() && i < 3; ++i)
    j["faster_not_fitting"].push_back(candidate_json(r.faster_not_fitting[i]));
  j["refused_layouts"] = nlohmann::json::array();
  for (const PlanRefusedLayout& f : r.refused)
    j["refused_layouts"].push_back({{"tp", f.tp}, {"pp", f.pp}, {"reason", f.reason}});
  return j;
}

namespace {

void candidate_text(std::string& out, const PlanCandidate& c, const char* label) {
  char line[512];
  std::snprintf(
      line, sizeof line,
      "%-4s %s\n     %.0f tokens/s, step %.3f s; stage %d peak %s (weights %s, "
      "gradients %s, optimizer %s, activations %s)\n     time:",
      label, c.name().c_str(), c.time.tokens_s, c.time.step_s, c.peak_stage, format_bytes(c.peak.total()).c_str(),
      format_bytes(c.peak[MemCategory::weights]).c_str(), format_bytes(c.peak[MemCategory::gradients]).c_str(),
      format_bytes(c.peak[MemCategory::optimizer]).c_str(), format_bytes(c.peak[MemCategory::activations]).c_str());
  out += line;
  for (const PlanTimeTerm& t : c.time.terms) {
    if (t.seconds <= 0) continue;
    std::snprintf(line, sizeof line, " %s %.3f", t.name.c_str(), t.seconds);
    out += line;
  }
  out += "\n";
}

}  // namespace

std::string plan_auto_text(const PlanAutoResult& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "agoq plan --auto: %s on %d GPUs of %.1f GiB, seq %d, global batch %d sequences\n"
                "calibration: %s\n%zu configurations evaluated, %zu fit\n",
                r.req.model_name.c_str(), r.req.gpus, gib(r.req.gpu_mem), r.req.seq, r.req.global_batch,
                r.req.cal.source.c_str(), r.evaluated, r.fits.size());
  out += line;
  for (size_t i = 0; i < r.fits.size() && int(i) < r.req.top; ++i) {
    std::snprintf(line, sizeof line, "#%zu", i + 1);
    candidate_text(out, r.fits[i], line);
  }
  if (const PlanCandidate* b = r.best_baseline()) {
    out += "best unquantized layout:\n";
    candidate_text(out, *b, "");
    if (const PlanCandidate* a = r.best_agoq()) {
      std::snprintf(line, sizeof line, "     the best AGoQ layout (%s) predicts %.2fx its tokens/s\n",
                    a->name().c_str(), a->time.tokens_s / b->time.tokens_s);
      out += line;
    }
  } else {
    out += "no unquantized layout fits\n";
  }
  if (!r.faster_not_fitting.empty()) {
    out += r.fits.empty() ? "nothing fits; the fastest layouts and why not:\n" : "faster layouts that do not fit:\n";
    for (size_t i = 0; i < r.faster_not_fitting.size() && i < 3; ++i) {
      const PlanCandidate& c = r.faster_not_fitting[i];
      std::snprintf(line, sizeof line, "  %s (%.0f tokens/s): %s\n", c.name().c_str(), c.time.tokens_s,
                    c.not_fit.c_str());
      out += line;
    }
  }
  if (!r.refused.empty()) {
    std::snprintf(line, sizeof line, "%zu layouts refused, e.g. TP %d x PP %d: %s\n", r.refused.size(), r.refused[0].tp,
                  r.refused[0].pp, r.refused[0].reason.c_str());
    out += line;
  }
  return out;
}

}  // namespace agoq

#include "plan/bit_alloc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/memory.h"
#include "model/act_store_cpu.h"
#include "plan/memory_model.h"

namespace agoq {

namespace {

bool always_fp32(ActSlot s) { return s == ActSlot::attn_rstd || s == ActSlot::mlp_rstd || s == ActSlot::attn_lse; }

int storage_bits(const SlotStorage& st) {
  if (!st.stored) return 0;
  return st.format.bits;  // 32 fp32, 16 bf16, else the int width
}

// Effective bits of the error model: ints their width; bf16's 8-bit significand is about one bit better than an
// 8-bit range quantizer of the same group; fp32 is exact for our purpose.
double effective_bits(const QuantFormat& f) {
  if (f.kind == QuantKind::bf16) return 9;
  if (f.kind == QuantKind::fp32) return 24;
  return f.bits;
}

struct Level {
  QuantFormat format;
  size_t bytes;  // one layer, one micro-batch
  double error;  // C / (2^b - 1)^2
};

// Everything the greedy walk needs for one stage.
struct StageProblem {
  ActPolicy base;
  size_t fixed = 0;  // one micro-batch, every layer, the slots the allocator does not choose
  std::array<std::vector<Level>, kActSlotCount> levels;  // ascending bytes; empty: not allocatable
  int n_layers = 1, in_flight = 1;

  size_t bytes(const std::array<int, kActSlotCount>& cur) const {
    size_t per_layer = 0;
    for (int s = 0; s < kActSlotCount; ++s)
      if (!levels[s].empty()) per_layer += levels[s][cur[s]].bytes;
    return size_t(in_flight) * (fixed + size_t(n_layers) * per_layer);
  }
};

StageProblem stage_problem(const PlanActShape& shape, const PlanStageBudget& st, const PlanBitsOptions& opt) {
  AGOQ_CHECK(st.n_layers >= 1 && st.in_flight >= 1, "bit allocation: a stage needs >= 1 layer and >= 1 micro-batch");
  AGOQ_CHECK(!opt.bits.empty(), "bit allocation: no bit-widths to choose from");
  std::vector<int> bits = opt.bits;
  std::sort(bits.begin(), bits.end());
  bits.erase(std::unique(bits.begin(), bits.end()), bits.end());
  for (int b : bits)
    AGOQ_CHECK(b == 2 || b == 3 || b == 4 || b == 8, "bit allocation: bits must be 2, 3, 4 or 8 (got ", b, ")");

  StageProblem p;
  p.base = ActPolicy::parse(opt.base_policy, st.n_layers);
  p.n_layers = st.n_layers, p.in_flight = st.in_flight;
  const auto allocatable = plan_allocatable_slots(opt);
  const auto dflt = plan_default_sensitivity(shape, st.n_layers);
  for (int s = 0; s < kActSlotCount; ++s) {
    const ActSlot slot = ActSlot(s);
    if (!allocatable[s]) {
      for (int l = 0; l < st.n_layers; ++l)
        if (p.base.at(l, slot).stored)
          p.fixed += plan_slot_bytes(p.base.at(l, slot).format, shape.cfg, shape.tp, shape.rows, slot, shape.sp);
      continue;
    }
    const QuantFormat& bf = p.base.at(0, slot).format;
    const bool sym = bf.kind == QuantKind::int_group ? bf.symmetric : slot != ActSlot::swiglu_out;
    std::vector<QuantFormat> fmts;
    for (int b : bits) fmts.push_back(quant_format_int(b, opt.group, sym, opt.rounding));
    if (act_slot_is_attention(slot)) fmts.push_back(quant_format_bf16());
    const double C = st.sensitivity[s] >= 0 ? st.sensitivity[s] : dflt[s];
    for (const QuantFormat& f : fmts) {
      quant_format_check(f);
      const double q = std::exp2(effective_bits(f)) - 1;
      p.levels[s].push_back({f, plan_slot_bytes(f, shape.cfg, shape.tp, shape.rows, slot, shape.sp), C / (q * q)});
    }
  }
  return p;
}

std::array<int, kActSlotCount> min_levels() { return {}; }

PlanStageBits stage_result(const StageProblem& p, const std::array<int, kActSlotCount>& cur, size_t budget) {
  PlanStageBits r;
  r.policy = p.base;
  r.policy.name = "planned";
  for (int s = 0; s < kActSlotCount; ++s) {
    if (p.levels[s].empty()) {
      r.bits[s] = storage_bits(p.base.at(0, ActSlot(s)));
      continue;
    }
    const Level& lv = p.levels[s][cur[s]];
    for (auto& layer : r.policy.slots) layer[s] = {true, lv.format};
    r.bits[s] = lv.format.bits;
    r.error += lv.error;
  }
  r.act_bytes = p.bytes(cur);
  r.budget = budget;
  return r;
}

// The greedy walk down from the top levels; stops at the first state within budget.
PlanStageBits walk(const StageProblem& p, size_t budget) {
  std::array<int, kActSlotCount> cur{};
  for (int s = 0; s < kActSlotCount; ++s) cur[s] = p.levels[s].empty() ? 0 : int(p.levels[s].size()) - 1;
  while (p.bytes(cur) > budget) {
    int best_s = -1, best_j = -1;
    double best_ratio = 0;
    size_t best_saved = 0;
    for (int s = 0; s < kActSlotCount; ++s) {
      const auto& lv = p.levels[s];
      for (int j = 0; j < cur[s] && !lv.empty(); ++j) {
        const size_t saved = lv[cur[s]].bytes - lv[j].bytes;
        if (saved == 0) continue;
        const double ratio = (lv[j].error - lv[cur[s]].error) / double(saved);
        // Smallest error per byte; ties: the larger saving, then the lower slot index (deterministic).
        if (best_s < 0 || ratio < best_ratio || (ratio == best_ratio && saved > best_saved))
          best_s = s, best_j = j, best_ratio = ratio, best_saved = saved;
      }
    }
    AGOQ_CHECK(best_s >= 0, "bit allocation: no step left (internal)");
    cur[best_s] = best_j;
  }
  return stage_result(p, cur, budget);
}

}  // namespace

std::array<double, kActSlotCount> plan_default_sensitivity(const PlanActShape& shape, int n_layers) {
  const auto cols = plan_slot_cols(shape.cfg, shape.tp);
  std::array<double, kActSlotCount> c{};
  for (int s = 0; s < kActSlotCount; ++s)
    c[s] = double(n_layers) * double(act_slot_rows(ActSlot(s), shape.rows, shape.tp, shape.sp)) * cols[s] *
           (act_slot_is_attention(ActSlot(s)) ? 16.0 : 1.0);
  return c;
}

std::array<bool, kActSlotCount> plan_allocatable_slots(const PlanBitsOptions& opt) {
  const ActPolicy base = ActPolicy::parse(opt.base_policy, 1);
  std::array<bool, kActSlotCount> a{};
  for (int s = 0; s < kActSlotCount; ++s) {
    const ActSlot slot = ActSlot(s);
    a[s] = base.at(0, slot).stored && !always_fp32(slot) && (!act_slot_is_attention(slot) || opt.quantize_attention);
  }
  return a;
}

size_t plan_min_act_bytes(const PlanActShape& shape, const PlanStageBudget& st, const PlanBitsOptions& opt) {
  return stage_problem(shape, st, opt).bytes(min_levels());
}

PlanStageBits plan_allocate_stage(const PlanActShape& shape, const PlanStageBudget& st, const PlanBitsOptions& opt) {
  const StageProblem p = stage_problem(shape, st, opt);
  const size_t need = p.bytes(min_levels());
  AGOQ_CHECK(need <= st.budget, "activation budget ", format_bytes(st.budget), " (", st.budget,
             " bytes) cannot be met even at the lowest bits (",
             opt.bits.empty() ? 0 : *std::min_element(opt.bits.begin(), opt.bits.end()),
             "); the smallest feasible budget is ", format_bytes(need), " (", need, " bytes)");
  return walk(p, st.budget);
}

std::vector<PlanStageBits> plan_allocate_bits(const PlanActShape& shape, const std::vector<PlanStageBudget>& stages,
                                              const PlanBitsOptions& opt) {
  std::vector<PlanStageBits> out;
  for (size_t r = 0; r < stages.size(); ++r) {
    try {
      out.push_back(plan_allocate_stage(shape, stages[r], opt));
    } catch (const Error& e) {
      fail("stage ", r, ": ", e.what());
    }
  }
  return out;
}

std::string plan_bits_name(int bits) {
  if (bits == 0) return "-";
  if (bits == 16) return "bf16";
  if (bits == 32) return "fp32";
  return std::to_string(bits);
}

std::string plan_bits_summary(const std::array<int, kActSlotCount>& bits) {
  using S = ActSlot;
  const std::pair<const char*, std::vector<S>> classes[] = {{"norm", {S::attn_norm_in, S::mlp_norm_in}},
                                                            {"norm_out", {S::attn_norm_out, S::mlp_norm_out}},
                                                            {"attn", {S::q, S::k, S::v, S::attn_out}},
                                                            {"mlp", {S::gate, S::up}},
                                                            {"swiglu", {S::swiglu_out}}};
  std::string out;
  for (const auto& [name, slots] : classes) {
    bool same = true;
    for (S s : slots) same = same && bits[int(s)] == bits[int(slots[0])];
    std::string v;
    for (S s : slots) {
      if (!v.empty()) v += '/';
      v += plan_bits_name(bits[int(s)]);
      if (same) break;
    }
    if (!out.empty()) out += ' ';
    out.append(name).append("=").append(v);
  }
  return out;
}

PlanStageBits plan_stage_bits_of(const PlanActShape& shape, const ActPolicy& stage_policy, int in_flight) {
  PlanStageBits r;
  r.policy = stage_policy;
  for (int s = 0; s < kActSlotCount; ++s) r.bits[s] = storage_bits(stage_policy.at(0, ActSlot(s)));
  r.act_bytes = size_t(in_flight) * plan_act_bytes(stage_policy, shape.cfg, shape.tp, shape.rows, shape.sp);
  return r;
}

PlanReplan plan_replan_bits(const PlanActShape& shape, const std::vector<PlanStageBudget>& stages,
                            const std::vector<PlanStageBits>& current, const std::vector<size_t>& measured_peak,
                            size_t capacity, const PlanBitsOptions& opt, double margin) {
  AGOQ_CHECK(current.size() == stages.size() && measured_peak.size() == stages.size(), "replan: ", stages.size(),
             " stages, ", current.size(), " current allocations, ", measured_peak.size(), " measured peaks");
  AGOQ_CHECK(margin >= 0 && margin < 1, "replan: margin must be in [0, 1)");
  PlanReplan out;
  out.log = "replan:";
  const double usable = double(capacity) * (1.0 - margin);
  for (size_t r = 0; r < stages.size(); ++r) {
    const double spare = usable - double(measured_peak[r]);
    PlanStageBudget st = stages[r];
    st.budget = size_t(std::max(0.0, double(current[r].act_bytes) + spare));
    const StageProblem p = stage_problem(shape, st, opt);
    const size_t need = p.bytes(min_levels());
    const bool feasible = need <= st.budget;
    // Everything but the activations stays: the stage fits once capacity x (1 - margin) holds it plus `need`.
    const double others = double(measured_peak[r]) - double(current[r].act_bytes);
    out.min_capacity.push_back(size_t(std::ceil((others + double(need)) / (1.0 - margin))));
    out.stages.push_back(walk(p, feasible ? st.budget : need));
    char head[96];
    std::snprintf(head, sizeof head, " stage %zu %s%s free:", r, spare < 0 ? "-" : "+",
                  format_bytes(size_t(std::fabs(spare))).c_str());
    std::string changes;
    for (int s = 0; s < kActSlotCount; ++s)
      if (out.stages[r].bits[s] != current[r].bits[s])
        changes
            .append(changes.empty() ? " " : ", ")  // appended: GCC 12 misreports `"literal" + string` chains
            .append(act_slot_name(ActSlot(s)))
            .append(" ")
            .append(plan_bits_name(current[r].bits[s]))
            .append("->")
            .append(plan_bits_name(out.stages[r].bits[s]));
    out.changed = out.changed || !changes.empty();
    out.log.append(r ? ";" : "").append(head).append(changes.empty() ? " unchanged" : changes);
    if (!feasible)
      out.log.append(" (WARNING: does not fit even at the lowest bits, needs ")
          .append(format_bytes(need - st.budget))
          .append(" more)");
  }
  return out;
}

}  // namespace agoq

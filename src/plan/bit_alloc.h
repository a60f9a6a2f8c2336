// Bit allocation for saved activations, per pipeline stage (docs/plan.md).
//
// Per stage, each allocatable slot s (the ones the base policy stores in a quantizable way: norm inputs, gate, up,
// and attention's q/k/v/attn_out only when allowed) gets one format for all the stage's layers. The allocator
// minimises  sum_s C_s / (2^b_s - 1)^2  subject to  in_flight x (bytes of one micro-batch) <= budget,  with
// b_s in {2, 3, 4, 8} (bf16 counted as 9 effective bits for attention slots when they may be quantized).
//
// Greedy (ActNN-style): start every slot at its highest level; while over budget, take the one step down (to the
// level on that slot's lower convex hull) with the smallest error increase per byte saved. The path does not depend
// on the budget, so a larger budget stops earlier on the same path: monotone (never fewer bits anywhere). Every
// point of the path minimises error + lambda x bytes, so it is optimal for its own byte count; between path points
// the answer can leave bytes unused (at most one step's worth).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "arch/act_policy.h"
#include "arch/config.h"

namespace agoq {

// The shape activations are stored for: model, tensor parallelism, tokens per micro-batch, sequence parallelism.
struct PlanActShape {
  LlamaConfig cfg;
  int tp = 1;
  size_t rows = 0;
  bool sp = false;
};

struct PlanBitsOptions {
  std::vector<int> bits = {2, 3, 4, 8};
  bool quantize_attention = false;  // false: q, k, v, attn_out stay as the base policy keeps them (bf16)
  int group = 128;
  QuantRounding rounding = QuantRounding::stochastic;
  std::string base_policy = "agoq";  // which slots are stored / recomputed, and the formats of fixed slots
};

struct PlanStageBudget {
  int n_layers = 1, in_flight = 1;
  size_t budget = 0;  // bytes for the saved activations of all in-flight micro-batches
  // C per slot, summed over the stage's layers (quant_range_energy of each saved tile, quant/stats.h, as the
  // activation store's calibration sums it); a negative entry takes the default.
  std::array<double, kActSlotCount> sensitivity = filled(-1.0);
  static std::array<double, kActSlotCount> filled(double v) {
    std::array<double, kActSlotCount> a;
    a.fill(v);
    return a;
  }
};

struct PlanStageBits {
  std::array<int, kActSlotCount> bits{};  // per slot: 0 recomputed, 2/3/4/8 int, 16 bf16, 32 fp32
  ActPolicy policy;                       // for the stage's layers
  size_t act_bytes = 0;                   // in_flight x one micro-batch
  size_t budget = 0;
  double error = 0;  // sum over allocatable slots of C / (2^b - 1)^2
};

// Without calibration: every stored value has range 1 (C = element count over the stage's layers), attention
// slots weighted 16x (range 4x: the paper keeps them in high precision because errors there hurt most).
std::array<double, kActSlotCount> plan_default_sensitivity(const PlanActShape& shape, int n_layers);
// Slots the allocator chooses bits for under these options (by slot index).
std::array<bool, kActSlotCount> plan_allocatable_slots(const PlanBitsOptions& opt);

// Bytes of the stage's activations with every allocatable slot at its lowest level: the smallest feasible budget.
size_t plan_min_act_bytes(const PlanActShape& shape, const PlanStageBudget& st, const PlanBitsOptions& opt = {});
// One stage. Throws agoq::Error giving the smallest feasible budget when even the lowest bits do not fit.
PlanStageBits plan_allocate_stage(const PlanActShape& shape, const PlanStageBudget& st,
                                  const PlanBitsOptions& opt = {});
// Every stage; an error names the stage.
std::vector<PlanStageBits> plan_allocate_bits(const PlanActShape& shape, const std::vector<PlanStageBudget>& stages,
                                              const PlanBitsOptions& opt = {});

// Dynamic re-planning, for the pipeline trainer after warm-up: `measured_peak[r]` is stage r's measured peak bytes
// with the bits `current[r]`; each stage's activation budget becomes its current activation bytes plus what it has
// free below capacity x (1 - margin) (negative when over), and bits are re-allocated. A stage that cannot fit
// even at the lowest bits gets the lowest bits and a warning in the log (no throw: training can go on).
struct PlanReplan {
  std::vector<PlanStageBits> stages;
  std::vector<size_t> min_capacity;  // per stage: the smallest capacity that fits it at the lowest bits
  std::string log;  // one line: "replan: stage 0 -2.1 GiB: gate 4->3, up 4->3; stage 3 +6.0 GiB: gate 4->8; ..."
  bool changed = false;
};
PlanReplan plan_replan_bits(const PlanActShape& shape, const std::vector<PlanStageBudget>& stages,
                            const std::vector<PlanStageBits>& current, const std::vector<size_t>& measured_peak,
                            size_t capacity, const PlanBitsOptions& opt = {}, double margin = 0.05);

// A stage's current allocation as the re-planner takes it: the bits of `stage_policy` (n_layers layers, the first
// layer's format per slot) and its bytes for in_flight micro-batches.
PlanStageBits plan_stage_bits_of(const PlanActShape& shape, const ActPolicy& stage_policy, int in_flight);

// "norm 4, attn bf16, mlp 8" style summary of a stage's bits per slot class ("4/3" when a class's slots differ).
std::string plan_bits_summary(const std::array<int, kActSlotCount>& bits);
std::string plan_bits_name(int bits);  // "4", "bf16", "fp32", "-" (recomputed)

}  // namespace agoq

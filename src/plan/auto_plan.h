// `agoq plan --auto`: every layout of a model on N GPUs (TP x PP x DP, SP, ZeRO-1, micro-batch size and count for
// a global batch, AGoQ with fp32 or 8-bit AdamW states or the unquantized baseline), the memory model's verdict on
// each (AGoQ with the bit allocator's per-stage bits), the step-time model's prediction, ranked.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/bit_alloc.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"

namespace agoq {

struct PlanAutoRequest {
  std::string model_name;
  LlamaConfig cfg;
  int gpus = 8, seq = 4096, global_batch = 64;  // global batch in sequences per optimizer step
  size_t gpu_mem = size_t(80) << 30;
  PlanGpuOptions gpu;
  PlanBitsOptions bits;
  PlanCalibration cal;
  int top = 5;
};

// One point of the search.
struct PlanCandidate {
  PlanParallel par;
  PlanWorkload work;
  PlanSystem system = PlanSystem::agoq;
  bool optim_q8 = false;
  PlanTime time;
  PlanMemory peak;  // the stage with the largest total (AGoQ: with its allocated bits)
  int peak_stage = 0;
  std::string not_fit;       // empty when it fits: else why not ("stage 0 needs 91.2 GiB of 80 GiB: ...")
  std::string name() const;  // "TP 2 x PP 4 x DP 8, SP, ZeRO-1, micro-batch 1 x 8, agoq + q8 AdamW"
};

// (tp, pp) pairs the enumeration skips, each with the check's reason.
struct PlanRefusedLayout {
  int tp = 1, pp = 1;
  std::string reason;
};

struct PlanAutoResult {
  PlanAutoRequest req;
  std::vector<PlanCandidate> fits;                // by predicted tokens/s, fastest first
  std::vector<PlanCandidate> faster_not_fitting;  // faster than fits[0] (or all, when nothing fits), fastest first
  std::vector<PlanRefusedLayout> refused;
  size_t evaluated = 0;
  // The fastest fitting layout of system (with that optimizer state, if given), or null.
  const PlanCandidate* best_of(PlanSystem system, std::optional<bool> optim_q8 = {}) const;
  const PlanCandidate* best_baseline() const { return best_of(PlanSystem::baseline); }
  const PlanCandidate* best_agoq() const { return best_of(PlanSystem::agoq); }
};

// The divisors of n, ascending (none for n < 1); O(sqrt n).
std::vector<int> plan_divisors(int n);

// The (tp, pp) pairs with tp * pp dividing gpus that the model admits (plan_parallel_check), and the refused ones.
std::vector<std::pair<int, int>> plan_auto_layouts(const LlamaConfig& cfg, int gpus, int seq,
                                                   std::vector<PlanRefusedLayout>* refused = nullptr);
PlanAutoResult plan_auto(const PlanAutoRequest& req);
nlohmann::json plan_auto_json(const PlanAutoResult& r);
std::string plan_auto_text(const PlanAutoResult& r);

}  // namespace agoq

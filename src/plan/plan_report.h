// `agoq plan` end to end, as a library: per stage the memory of the baseline, of AGoQ's default policy (4-bit,
// attention bf16) and of AGoQ with allocated bits filling the GPU; as text or JSON. The CLI (cli/cmd_plan.cpp)
// only parses flags.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/bit_alloc.h"
#include "plan/memory_model.h"

namespace agoq {

struct PlanRequest {
  std::string model_name;
  LlamaConfig cfg;
  PlanParallel par;
  PlanWorkload work;
  size_t gpu_mem = size_t(80) << 30;
  PlanGpuOptions gpu;
  PlanBitsOptions bits;
};

struct PlanStageReport {
  PlanStage stage;
  PlanMemory baseline, agoq, planned;  // agoq: the default "agoq" policy; planned: allocated bits
  PlanStageBits bits;
  size_t act_budget = 0;      // gpu_mem minus planned's non-activation memory
  bool bits_feasible = true;  // false: even the lowest bits exceed act_budget (bits are then the lowest)
};

struct PlanReport {
  PlanRequest req;
  std::vector<PlanStageReport> stages;
  int tightest = 0;  // the stage with the largest baseline memory (the one that sets the per-GPU requirement)
  double reduction(int stage) const;          // 1 - agoq / baseline
  double planned_reduction(int stage) const;  // 1 - planned / baseline
};

// A sequence of 1 to the model's positions (max_position_embeddings), else an error naming --seq and the model.
void plan_seq_check(const LlamaConfig& cfg, int seq, const std::string& model_name);
PlanReport plan_run(const PlanRequest& req);
nlohmann::json plan_report_json(const PlanReport& rep);
std::string plan_report_text(const PlanReport& rep);

}  // namespace agoq

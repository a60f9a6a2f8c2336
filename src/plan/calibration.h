// The step-time model's inputs (plan/time_model.h's PlanCalibration): named GPU defaults, a JSON file, and
// `agoq plan --calibrate`'s measurement of this machine. docs/plan.md lists the fields.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "comm/communicator.h"
#include "plan/time_model.h"

namespace agoq {

// An H100-class GPU cluster (docs/plan.md): GEMMs at ~25-65% of the 989 TFLOP/s bf16 peak by size, flash
// attention ~35-45%, memory-bound passes at HBM's ~3 TB/s on bf16 data, NVLink 450 GB/s per direction inside
// nodes of 8, 200 Gbit/s InfiniBand between them.
PlanCalibration plan_calibration_gpu_defaults();

nlohmann::json plan_calibration_json(const PlanCalibration& c);
// Every field is required (but tp_efficiency, gemm_rate_by_rows and measured_ranks), of its type and within a sane
// range (a rate of 1e-300 would make every prediction infinite); an error names the source and the field.
PlanCalibration plan_calibration_from_json(const nlohmann::json& j, const std::string& source);
// The file `path` that `flag` names (--calibration, --calibrate); errors name both, and the field.
PlanCalibration plan_calibration_load(const std::string& path, const std::string& flag = "--calibration");
std::string plan_calibration_text(const PlanCalibration& c);     // a few lines for the console

// A link speed: "900GB/s", "50 GB/s" (decimal bytes), "200Gbit/s", "100Mbit" (bits), or plain bytes/s. Throws
// naming the flag on garbage.
double plan_parse_rate(const std::string& text, const std::string& flag);

struct PlanCalibrateOptions {
  int reps = 3;            // at least this many timed calls per measurement (and at least 0.25 s of them)
  int ranks_per_node = 0;  // 0: every rank when the world is on one host, else 1
};

// Collective over `world`: every rank measures at once (so the rates are those of a run with this many ranks
// sharing the machine) GEMMs by size, attention by length, the memory-bound, quantize and fold passes, AdamW, and
// all-reduce bandwidth and latency over the world (the intra-node link on one host, the inter-node link
// otherwise); rates are averaged over the ranks. The trainer modelled is agoq's CPU trainer.
PlanCalibration plan_calibrate(Communicator& world, const PlanCalibrateOptions& opt = {});

}  // namespace agoq

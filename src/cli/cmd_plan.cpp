// `agoq plan`: per-GPU training memory of a LLaMA model under TP/PP/DP for the Megatron-like baseline and AGoQ,
// the activation bits AGoQ's allocator picks per pipeline stage, and whether each stage fits (docs/plan.md).

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "cli/chart.h"
#include "cli/commands.h"
#include "cli/path_flag.h"
#include "comm/communicator.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/paths.h"
#include "optim/adamw.h"
#include "plan/auto_plan.h"
#include "plan/calibration.h"
#include "plan/plan_report.h"
#include "plan/presets.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct PlanArgs {
  std::string model, gpu_mem = "80GiB", reserve = "1GiB", bits = "2,3,4,8", png, optim_state = "fp32";
  int gpus = 8, tp = 1, pp = 1, seq = 4096, micro_batch = 1, micro_batches = 8, zero = 0;
  bool sp = false;
  double bucket_mb = 25;
  bool json = false, quantize_attention = false;
  // the step-time model: --auto searches; a calibration file or the GPU defaults with network overrides
  bool auto_search = false, time = false;
  int global_batch = 0, top = 5, gpus_per_node = 0, reps = 3;
  std::string calibration, calibrate_out, intra, inter, system = "agoq";
};

std::vector<int> parse_bits(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    AGOQ_CHECK(tok == "2" || tok == "3" || tok == "4" || tok == "8", "--bits: '", tok, "' is not one of 2, 3, 4, 8");
    out.push_back(std::stoi(tok));
  }
  AGOQ_CHECK(!out.empty(), "--bits is empty");
  return out;
}

// The time model's inputs: a calibration file, or the GPU defaults; the network flags override either.
PlanCalibration calibration_of(const PlanArgs& a) {
  PlanCalibration c =
      a.calibration.empty() ? plan_calibration_gpu_defaults() : plan_calibration_load(a.calibration, "--calibration");
  if (!a.intra.empty()) c.intra.bytes_s = c.intra.send_bytes_s = plan_parse_rate(a.intra, "--intra");
  if (!a.inter.empty()) c.inter.bytes_s = c.inter.send_bytes_s = plan_parse_rate(a.inter, "--inter");
  if (a.gpus_per_node > 0) c.ranks_per_node = a.gpus_per_node;
  if (!a.intra.empty() || !a.inter.empty() || a.gpus_per_node > 0) c.source += " (network from the flags)";
  return c;
}

// An existing file is replaced only when it is an earlier calibration (a mistyped path to a config must not go).
void check_calibration_target(const std::string& path) {
  output_file_check_replaceable("--calibrate", path, "a calibration", [](const std::string& p) {
    plan_calibration_load(p, "--calibrate");
    return true;
  });
}

// Collective under mpirun: every rank measures; rank 0 writes the file and prints it.
void cmd_plan_calibrate(const PlanArgs& a) {
  Communicator& world = comm_world();
  try {
    check_calibration_target(a.calibrate_out);
    PlanCalibrateOptions o;
    o.reps = a.reps, o.ranks_per_node = a.gpus_per_node;
    const PlanCalibration c = plan_calibrate(world, o);
    if (world.rank() != 0) return;
    const nlohmann::json j = plan_calibration_json(c);
    plan_calibration_from_json(j, "the measurement");  // what --calibration would refuse is not written
    atomic_file_write(a.calibrate_out, j.dump(2) + "\n");
    if (a.json) std::printf("%s\n", j.dump(2).c_str());
    else std::printf("%s\nwritten: %s\n", plan_calibration_text(c).c_str(), a.calibrate_out.c_str());
  } catch (...) {
    comm_fail(world, std::current_exception());
  }
}

void cmd_plan_auto(const PlanArgs& a) {
  AGOQ_CHECK(!a.model.empty(), "--auto needs --model");
  AGOQ_CHECK(a.global_batch > 0, "--auto needs --global-batch (sequences per optimizer step)");
  PlanAutoRequest req;
  req.model_name = a.model;
  req.cfg = plan_model_resolve(a.model);
  req.gpus = a.gpus, req.seq = a.seq, req.global_batch = a.global_batch, req.top = a.top;
  req.gpu_mem = plan_parse_bytes(a.gpu_mem, "--gpu-mem");
  req.gpu.reserve_bytes = a.reserve == "0" ? 0 : plan_parse_bytes(a.reserve, "--reserve");
  req.gpu.bucket_bytes = size_t(a.bucket_mb * double(1 << 20));
  req.bits.bits = parse_bits(a.bits);
  req.bits.quantize_attention = a.quantize_attention;
  req.cal = calibration_of(a);
  const PlanAutoResult r = plan_auto(req);
  if (a.json) std::printf("%s\n", plan_auto_json(r).dump(2).c_str());
  else std::printf("%s", plan_auto_text(r).c_str());
}

void cmd_plan_run(const PlanArgs& a) {
  AGOQ_CHECK(a.bucket_mb > 0 && a.bucket_mb < 1e6, "--bucket-mb must be more than 0 and less than 1000000 (got ",
             a.bucket_mb, ")");
  if (!a.png.empty()) {
    AGOQ_CHECK(a.calibrate_out.empty() && !a.auto_search,
               "--png charts one layout's plan: not with --auto or --calibrate");
    cli_chart_check("--png", a.png, "stages");
  }
  if (!a.calibrate_out.empty()) return cmd_plan_calibrate(a);
  if (a.auto_search) return cmd_plan_auto(a);
  PlanRequest req;
  AGOQ_CHECK(!a.model.empty(), "--model is required (llama-8b, llama-13b, llama-32b or a config.json)");
  req.model_name = a.model;
  req.cfg = plan_model_resolve(a.model);
  req.par = {a.gpus, a.tp, a.pp, a.zero != 0, a.sp};
  req.work = {a.seq, a.micro_batch, a.micro_batches};
  req.gpu_mem = plan_parse_bytes(a.gpu_mem, "--gpu-mem");
  req.gpu.reserve_bytes = a.reserve == "0" ? 0 : plan_parse_bytes(a.reserve, "--reserve");
  req.gpu.bucket_bytes = size_t(a.bucket_mb * double(1 << 20));
  req.bits.bits = parse_bits(a.bits);
  req.gpu.optim_q8 = optim_state_parse(a.optim_state) == OptimState::q8;
  req.bits.quantize_attention = a.quantize_attention;
  const PlanReport rep = plan_run(req);
  nlohmann::json j = plan_report_json(rep);
  std::string text = plan_report_text(rep);
  if (a.time || !a.calibration.empty()) {  // and the step-time model's prediction for this layout
    AGOQ_CHECK(a.system == "agoq" || a.system == "baseline", "--system must be agoq or baseline (got '", a.system,
               "')");
    PlanTimeOptions to;
    to.system = a.system == "agoq" ? PlanSystem::agoq : PlanSystem::baseline;
    to.optim_q8 = req.gpu.optim_q8, to.bucket_bytes = req.gpu.bucket_bytes;
    const PlanCalibration cal = calibration_of(a);
    const PlanTime t = plan_step_time(req.cfg, req.par, req.work, to, cal);
    j["time"] = plan_time_json(t);
    j["time"]["system"] = a.system;
    j["time"]["calibration"] = cal.source;
    text += plan_time_text(t, a.system, cal.source);
  }
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  else std::printf("%s", text.c_str());
  if (!a.png.empty()) {
    cli_chart_write("--png", j, a.png, "plan_chart.py", "stages", "AGOQ_PLAN_CHART");
    if (!a.json) std::printf("chart: %s\n", a.png.c_str());
  }
}

const CliCommand kPlan("", 40, [](CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  const CLI::Validator kCount = cli_in_range(1, kPlanMaxCount);  // GPUs, sequence length, batch sizes and counts
  CLI::App* c = app.add_subcommand(
      "plan", "per-GPU memory of baseline vs AGoQ under TP/PP/DP, AGoQ's bits per stage, step time, the best layout");
  c->add_option("--model", a->model, "llama-8b, llama-13b, llama-32b or a Hugging Face config.json")->check(cli_path());
  c->add_option("--gpus", a->gpus, "total GPUs (= tp * pp * dp)")->check(kCount)->capture_default_str();
  c->add_option("--tp", a->tp, "tensor-parallel size (modelled Megatron-style)")->check(kCount)->capture_default_str();
  c->add_flag("--sp", a->sp,
              "sequence parallelism over the --tp ranks (Megatron-SP: residual-stream activations 1/tp per rank)");
  c->add_option("--pp", a->pp, "pipeline stages")->check(kCount)->capture_default_str();
  c->add_option("--seq", a->seq, "sequence length")->check(kCount)->capture_default_str();
  c->add_option("--micro-batch,--batch", a->micro_batch, "sequences per micro-batch (train's --batch)")
      ->check(kCount)
      ->capture_default_str();
  c->add_option("--num-micro-batches,--accum", a->micro_batches, "micro-batches per step (1F1B; train's --accum)")
      ->check(kCount)
      ->capture_default_str();
  c->add_option("--gpu-mem,--mem-budget", a->gpu_mem, "memory per GPU, e.g. 80GiB (train's --mem-budget)")
      ->capture_default_str();
  c->add_option("--zero", a->zero, "1: ZeRO-1 (optimizer and master weights sharded over DP)")
      ->check(cli_in_range(0, 1))
      ->capture_default_str();
  c->add_option("--optim-state", a->optim_state, "AGoQ's AdamW moments: fp32 | q8 (8 bits, docs/optimizer.md)")
      ->capture_default_str();
  c->add_option("--bits", a->bits, "activation bit-widths the allocator may use")->capture_default_str();
  c->add_flag("--quantize-attention", a->quantize_attention, "let the allocator quantize attention slots too");
  c->add_option("--bucket-mb", a->bucket_mb, "gradient bucket (fp32 MiB) of AGoQ's q8 all-reduce")
      ->capture_default_str();
  c->add_option("--reserve", a->reserve, "per-GPU runtime reserve (CUDA context, NCCL, allocator)")
      ->capture_default_str();
  c->add_flag("--json", a->json, "print the plan as JSON");
  c->add_flag("--auto", a->auto_search,
              "search every layout, micro-batching and system; rank those that fit by "
              "predicted tokens/s (needs --global-batch)");
  c->add_option("--global-batch", a->global_batch, "--auto: sequences per optimizer step")->check(kCount);
  c->add_option("--top", a->top, "--auto: layouts shown")->check(kCount)->capture_default_str();
  c->add_flag("--time", a->time, "also predict this layout's step time, term by term (--system agoq|baseline)");
  c->add_option("--system", a->system, "--time: agoq | baseline")->capture_default_str();
  c->add_option("--calibration", a->calibration,
                "step-time inputs from FILE (written by --calibrate); default: "
                "H100-class GPU defaults (docs/plan.md)")
      ->check(cli_path());
  c->add_option("--calibrate", a->calibrate_out,
                "measure this machine (under mpirun: at that rank count) and "
                "write the calibration to FILE")
      ->check(cli_path());
  c->add_option("--reps", a->reps, "--calibrate: repetitions per measurement")
      ->check(cli_in_range(1, 1000000))
      ->capture_default_str();
  c->add_option("--intra", a->intra, "link bandwidth inside a node, e.g. 900GB/s (overrides the calibration)");
  c->add_option("--inter", a->inter, "link bandwidth between nodes, e.g. 50GB/s or 200Gbit/s");
  c->add_option("--gpus-per-node", a->gpus_per_node, "GPUs (ranks) per node")->check(kCount);
  c->add_option("--png", a->png, "also write a bar chart (and its JSON next to it) via scripts/plan_chart.py")
      ->check(cli_path());
  c->callback([a] { cmd_plan_run(*a); });
});

}  // namespace
}  // namespace agoq

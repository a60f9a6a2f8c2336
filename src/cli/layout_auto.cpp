#include "cli/layout_auto.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "arch/hf.h"
#include "core/error.h"
#include "core/memory.h"
#include "data/token_file.h"
#include "plan/auto_plan.h"
#include "plan/calibration.h"

namespace agoq {

namespace {

// The model's shape as the run will see it: the checkpoint's or SRC's config.json, else the flags; the
// vocabulary from the data.
LlamaConfig layout_model(const TrainOptions& o) {
  AGOQ_CHECK(o.resume.empty(), "--layout auto with --resume: a resumed run keeps its checkpoint's layout flags");
  LlamaConfig cfg = o.model;
  if (!o.init_from.empty()) {
    const std::filesystem::path hf = std::filesystem::path(o.init_from) / "config.json";
    AGOQ_CHECK(std::filesystem::is_regular_file(hf), "--layout auto with --init-from ", o.init_from,
               ": needs a folder with a config.json (for a GGUF file, run `agoq plan --auto` and pass its layout)");
    cfg = config_from_hf_json(json_object_read_file(hf.string(), "model config"));
  } else {
    cfg.vocab_size = int(token_file_read_header((std::filesystem::path(o.data_dir) / "train.bin").string()).vocab_size);
  }
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  return cfg;
}

size_t host_memory_per_rank(const Communicator& comm) {
  const double bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  return size_t(bytes / (comm.one_host() ? comm.size() : 1));
}

}  // namespace

void train_layout_auto(TrainOptions& o, Communicator& comm, const std::string& calibration) {
  PlanAutoRequest req;
  req.model_name = "this run's model";
  req.cfg = layout_model(o);
  // What --batch and --accum mean under pure data parallelism, counted in 64 bits and named by those flags.
  const int64_t global = int64_t(o.batch) * o.accum * comm.size();
  AGOQ_CHECK(o.batch >= 1 && o.accum >= 1 && global <= kPlanMaxCount, "--layout auto: --batch ", o.batch, " x --accum ",
             o.accum, " x ", comm.size(), comm.size() == 1 ? " rank" : " ranks", " = ", global,
             " sequences a step is out of range (1 to ", kPlanMaxCount, ")");
  req.gpus = comm.size(), req.seq = o.seq, req.global_batch = int(global);
  req.gpu_mem = o.mem_budget > 0 ? o.mem_budget : host_memory_per_rank(comm);
  req.gpu.reserve_bytes = 0;  // no device runtime to reserve for
  if (calibration.empty() && comm.rank() == 0)
    std::printf(
        "layout auto: measuring this machine at %d ranks (plan --calibrate FILE once, then "
        "--calibration FILE, saves this)\n",
        comm.size());
  req.cal = calibration.empty() ? plan_calibrate(comm) : plan_calibration_load(calibration, "--calibration");
  if (req.cal.measured_ranks > 0 && req.cal.measured_ranks != comm.size() && comm.rank() == 0)
    std::printf(
        "layout auto: note: %s was measured at %d ranks, this run has %d (rates a rank sees depend on how "
        "many share the machine)\n",
        calibration.c_str(), req.cal.measured_ranks, comm.size());
  const PlanSystem system =
      o.act_policy == "fp32" && o.grad_store == GradStoreKind::fp32 ? PlanSystem::baseline : PlanSystem::agoq;
  const PlanAutoResult r = plan_auto(req);
  const PlanCandidate* pick = r.best_of(system, o.adam.state == OptimState::q8);
  AGOQ_CHECK(pick, "--layout auto: no layout of ", comm.size(), " ranks fits ", format_bytes(req.gpu_mem),
             " per rank for a global batch of ", req.global_batch, " sequences",
             r.faster_not_fitting.empty() ? "" : " (" + r.faster_not_fitting[0].not_fit + ")");
  // Every rank computed the same search from the same calibration; rank 0's choice is broadcast all the same.
  int layout[6] = {pick->par.tp,    pick->par.pp,           pick->par.sp,
                   pick->par.zero1, pick->work.micro_batch, pick->work.num_micro_batches};
  comm.broadcast(layout, sizeof layout, 0);
  o.tp = layout[0], o.pp = layout[1], o.sp = layout[2] != 0, o.zero = layout[3];
  o.batch = layout[4], o.accum = layout[5];
  if (comm.rank() == 0)
    std::printf("layout auto: %s, predicted %.3f s a step, %.0f tokens/s (calibration: %s; %zu layouts fit)\n",
                pick->name().c_str(), pick->time.step_s, pick->time.tokens_s, req.cal.source.c_str(), r.fits.size());
}

}  // namespace agoq

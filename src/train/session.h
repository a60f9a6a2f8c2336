// One training run (`agoq train`, train_run): set-up, then step / evaluate / checkpoint until the last step, then
// the report. Each part is a member function short enough to read at once; the state they share is the members.
//
// Set-up, in order: flags, the P x D grid, the data, the model shape (the checkpoint's when resuming), the check
// that every rank runs the same config on the same data, the stage split, model, data parallelism and pipeline,
// the resumed state. Collective: every rank of the communicator constructs and runs a session with the same
// options.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "plan/memory_model.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace agoq {

class TrainSession {
 public:
  explicit TrainSession(const TrainOptions& opt);
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // The steps after the resumed one up to --steps (or --stop-after), checkpoints on the way and at the end.
  TrainResult run();

 private:
  void out_dir_check() const;
  void data_load();
  void config_resolve();
  PlanCpuOptions plan_options() const;  // this rank's run, as the memory model describes it
  void memory_check() const;
  void model_build();
  void resume();
  // One optimizer step: this replica's micro-batches through the model (or the pipeline), reduction, AdamW.
  DpStepResult train_step(long step, float lr);
  void batches_next();  // this replica's micro-batches of the next step into inputs_, targets_
  // Validation loss, the same on every rank.
  float evaluate();
  // Checkpoint `at_step` as ckpt-step<N>, then point `ckpt` at it (train/session_checkpoint.cpp). Collective.
  void checkpoint(long at_step);
  void replan();
  // The end-of-run tables (train/session_report.cpp).
  void report(const TrainResult& r, long first) const;
  void report_stages(const std::vector<double>& stage_peaks) const;
  void report_memory(const TrainResult& r) const;

  const TrainOptions& opt_;
  Communicator& world_;
  const bool lead_;  // world rank 0: writes metrics and checkpoints, prints
  ParallelGrid grid_;
  DpOptions dp_options_;
  TokenDataset train_set_, val_set_;
  LlamaConfig cfg_;
  std::string resume_commit_ = "-";
  std::vector<ModelStage> stages_;
  int B_, T_, m_;
  std::unique_ptr<DataLoader> loader_, val_loader_;
  std::unique_ptr<GradStore> grads_;  // built before model_, which writes its gradients into it
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<Pipeline> pipeline_;  // P > 1
  std::unique_ptr<MetricsLog> log_;
  long step_ = 0;  // the last completed step
  std::vector<int32_t> inputs_, targets_;  // this replica's m micro-batches of the step, back to back
  std::vector<int32_t> skipped_;           // where the other replicas' micro-batches are drawn to (inputs, targets)
  std::string replan_log_;
  double seconds_total_ = 0, wait_total_ = 0;  // step time and communication not hidden behind it, over the run
};

// ---- the session's parts that need no state (train/trainer.cpp, train/session_checkpoint.cpp) ----
// Throws agoq::Error naming the first invalid flag.
void train_options_validate(const TrainOptions& o);
// Everything that must agree across ranks for their collectives to match and their replicas to stay equal.
std::string train_run_description(const TrainOptions& o, const LlamaConfig& cfg, const std::string& resume_commit);
// "name size bytes fnv <hash>": ranks compare file contents, not paths (machines may mount data differently).
std::string file_digest(const std::filesystem::path& p);
NamedTensors named_tensors_of(ParamSet& p);
// The moments' form a checkpoint was written with (trainer.json "optim_state", "optim_q8"; absent: fp32).
MomentsForm moments_form_of(const nlohmann::json& trainer);

}  // namespace agoq

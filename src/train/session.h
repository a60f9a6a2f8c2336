// One training run (`agoq train`, train_run): set-up, then step / evaluate / checkpoint until the last step, then
// the report. Each part is a member function short enough to read at once; the state they share is the members.
//
// Set-up, in order: flags, the T x P x D grid, the data, the model shape (the checkpoint's when resuming), the check
// that every rank runs the same config on the same data, the stage split, model, data parallelism and pipeline,
// the resumed state. Collective: every rank of the communicator constructs and runs a session with the same
// options.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_share.h"
#include "core/dir_lock.h"
#include "data/data_loader.h"
#include "data/tokenizer.h"
#include "evaltask/task.h"
#include "formats/checkpoint.h"
#include "formats/model_source.h"
#include "model/backend_timed.h"
#include "optim/step.h"
#include "parallel/comm_tensor_group.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "parallel/step_cpu.h"
#include "plan/memory_model.h"
#include "train/checkpoint_reshard.h"
#include "train/metrics.h"
#include "train/run_dir.h"
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
  void out_dir_claim();  // lead only; opens tboard_
  void data_load();
  void config_resolve();
  void init_source_open();              // --init-from
  void blocks_isolate_replicated();     // step_options_'s blocks, so every TP rank's norms get the same bits
  PlanCpuOptions plan_options() const;  // this rank's run, as the memory model describes it
  void step_ids_check() const;
  void memory_check() const;
  void model_build();
  void model_build_gpu();  // --device cuda
  void model_make(const ModelStage& stage, int in_flight, const GradStoreView& grad_store_view,
                  TensorGroup* tensor_group, ModelBackend& backend);
  void resume();
  void weights_init_from();
  // One optimizer step: this replica's micro-batches through the model (or the pipeline), reduction, AdamW.
  StepResult train_step(long step, float lr);
  std::vector<MicroBatchRun> micro_batch_runs(long step);                    // its phase 1
  double forward_backward(const std::vector<MicroBatchRun>& runs);           // its phase 2
  StepMetrics train_step_measured(long step, float lr);                      // train_step, timed
  double tokens_per_step() const { return double(B_) * T_ * m_ * grid_.D; }  // over the replicas
  void debug_exit_if_asked(long step) const;
  bool validation_due(long step) const;
  float validation_logged(long step);  // evaluate(), also on the progress line
  void memory_record(nlohmann::json& rec) const;
  void run_finish(TrainResult& result, long first, long last);
  void batches_allocate();  // the loaders and the batch buffers
  void batches_next();      // this replica's micro-batches of the next step into inputs_, targets_ (and docs_)
  // Validation loss, the same on every rank.
  float evaluate();
  // --eval-task (train/session_eval_task.cpp): the tasks, read at set-up (a bad file fails before training); then each
  // task's metrics at a step, {"<task>": {"acc": ..., ...}}, also on the progress line.
  void eval_tasks_prepare();
  bool eval_tasks_due(long step) const;
  nlohmann::json eval_tasks_score(long step);
  // Checkpoint `at_step` as ckpt-step<N>, then point `ckpt` at it (train/session_checkpoint.cpp). Collective.
  void checkpoint(long at_step);
  void replan();
  void stop_signals_arm() const;                // from here on a stop signal ends the run after its step (train_run)
  std::string stop_note(long good_step) const;  // -1: no checkpoint yet
  int stop_agreed();                            // the stop signal any rank received, or 0; collective
  // The end-of-run tables (train/session_report.cpp).
  void report(const TrainResult& r, long first) const;
  void report_stages(const std::vector<double>& stage_peaks) const;
  void report_memory(const TrainResult& r) const;
  void report_memory_gpu(const TrainResult& r) const;

  const TrainOptions& opt_;
  Communicator& world_;
  const bool lead_;   // world rank 0: writes metrics and checkpoints, prints
  DirLock out_lock_;  // lead: --out is this run's until the session ends
  RunIdentity who_;   // lead: what its checkpoints record, and what it may delete
  ParallelGrid grid_;
  CpuStepOptions step_options_;
  TokenDataset train_set_, val_set_;
  LlamaConfig cfg_;
  std::string resume_commit_ = "-";
  std::unique_ptr<ModelReader> init_source_;  // --init-from, until its weights are read
  // The config.json of the model fine-tuned (--init-from) or of the checkpoint resumed: checkpoints keep the fields
  // agoq does not use (a fine-tuned model loads elsewhere as itself). Empty in a fresh run.
  nlohmann::json hf_config_;
  std::vector<ModelStage> stages_;
  int B_, T_, m_;
  std::unique_ptr<DataLoader> loader_, val_loader_;
  std::unique_ptr<GradStore> grads_;               // built before model_, which writes its gradients into it (CPU)
  std::unique_ptr<CommTensorGroup> tensor_group_;  // T > 1: the collectives joining this rank's shard to the others
  std::unique_ptr<ModelBackend> gpu_;              // --device cuda: where the model computes (else the CPU's ops)
  std::unique_ptr<TimedBackend> timed_;            // --profile: the CPU's ops, timed by class
  ComputeChoice compute_;                          // --compute, resolved: the GEMMs' precision and why
  std::unique_ptr<ModelBackend> cpu_bf16_;         // the CPU's ops with bf16 GEMMs (compute_ bf16 on the CPU)
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<StepEngine> engine_;  // the optimizer step: CpuStep, or CudaStep on the GPU
  CpuStep* cpu_step_ = nullptr;         // engine_ on the CPU (the pipeline's)
  std::unique_ptr<Pipeline> pipeline_;  // P > 1
  std::unique_ptr<MetricsLog> log_;
  std::unique_ptr<TensorBoardWriter> tboard_;  // lead, --tensorboard: opened with --out, then given to log_
  CpuThreads cpu_threads_;                     // the cores other processes leave free, re-measured between steps
  long step_ = 0;                              // the last completed step
  long step_resumed_ = -1;                     // the checkpoint's step when resumed
  std::vector<int32_t> inputs_, targets_;      // this replica's m micro-batches of the step, back to back
  std::vector<int32_t> skipped_;  // where the other replicas' micro-batches are drawn to (inputs, targets, docs)
  // Packed prompt/completion data (loss masks): each row's document start, and the step's counted targets over
  // its whole global batch (optim/step.h).
  std::vector<int32_t> docs_;
  double step_tokens_ = 0;
  std::string replan_log_;
  std::string block_notes_;                    // blocks_isolate_replicated's, for the log
  double seconds_total_ = 0, wait_total_ = 0;  // step time and communication not hidden behind it, over the run
  OpSeconds op_seconds_;                       // --profile: the steps' op time by class, over the run

  // The data's tokenizer, read once: it checks the token files' vocabulary and --init-from's tokenizer, then encodes
  // --eval-task's text (dropped after set-up when there is no task).
  std::unique_ptr<Tokenizer> data_tokenizer_;
  std::vector<Task> eval_tasks_;  // --eval-task
};

// ---- the session's parts that need no state (train/trainer.cpp, train/session_checkpoint.cpp) ----
// "name size bytes fnv <hash>": ranks compare file contents, not paths (machines may mount data differently).
std::string file_digest(const std::filesystem::path& p);
// Where the data loader stood at the checkpoint (its trainer.json); errors name the checkpoint and what is wrong.
DataLoader::State resume_loader_state(const CheckpointMeta& meta, const std::string& dir);
// The moments' form a checkpoint was written with (trainer.json "optim_state", "optim_q8"; absent: fp32).
MomentsForm moments_form_of(const nlohmann::json& trainer);

}  // namespace agoq

// `train_run`: one training run (data, model, data/pipeline parallelism, AdamW, schedule, evaluation, metrics,
// checkpoints) as a TrainSession (train/session.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"
#include "train/train_options.h"

namespace agoq {

struct TrainResult {
  std::vector<float> losses;  // train loss per step of this run
  float final_val_loss = 0;
  double tokens_per_s = 0;
  long last_step = 0;
  double act_bytes_per_token_layer = 0;  // saved activations under the policy
  std::vector<float> grad_norms;         // global gradient norm per step, before clipping
  std::string replan_log;                // the re-planning line, when one ran
  MemSnapshot peak;  // this rank's (GPU's, with --device cuda) peak per category over the steps (before the last save)
  int stop_signal = 0;  // the signal that stopped the run early (0: it ran to its last step)
  size_t peak_total = 0;
};

// Collective over the communicator: every rank calls it with the same options (checked at start-up). Only rank 0
// writes metrics and checkpoints and prints; every rank returns the same losses.
// Exit status of a run stopped by SIGTERM, SIGINT or SIGUSR1 after it saved a checkpoint (EX_TEMPFAIL: run it
// again with --resume).
constexpr int kExitStopped = 75;

// From the first step on, a stop signal on any rank (core/stop_signal.h) ends the run after the step in progress,
// on every rank at the same step, with a checkpoint; TrainResult::stop_signal then says which signal.
TrainResult train_run(const TrainOptions& opt);

// The model flags (o.model_flags) whose value differs from the config of `source` (the checkpoint resumed, the
// model fine-tuned, a --config file), as "--dim 64 (checkpoint: 128)"; empty when all agree.
std::string model_flags_disagreeing(const TrainOptions& o, const LlamaConfig& config,
                                    const char* source = "checkpoint");

}  // namespace agoq

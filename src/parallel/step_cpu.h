// The data-parallel engine (docs/parallel.md): one optimizer step of D = comm.size() replicas, each running m
// micro-batches, in two calls around whatever runs the micro-batches (docs/agoq.md, "How a step flows"):
//
//   runs = dp.step_begin(step, m)    what each micro-batch needs: its seeds, the 1/(D*m) scale
//   loss_sum = train_step_micro_batches(dp, model, ..., runs)   or   pipeline.run(..., runs, &dp)
//              (each backward part by part, dp.part_done(runs[j], j, part) after each: into the store, reduction
//              started)
//   result = dp.step_end(lr, loss_sum)   reduce (grad_reduce.h), norm, clip, divergence check, AdamW (dp_optimizer.h)
//
// Gradients live in a GradStore (fp32 or 8 bits) that the caller builds and gives to the model and to this engine;
// ranks sum them by MPI's fp32 collectives or AGoQ's q8 ones, optionally with ZeRO-1 (AdamW state sharded over the
// ranks); checkpoints see the moments through dp_moments.h.
#pragma once
#include <cstdint>
#include <vector>

#include "arch/hf.h"
#include "comm/allreduce_q8.h"
#include "comm/communicator.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "optim/train_step.h"
#include "parallel/dp_moments.h"
#include "parallel/dp_optimizer.h"
#include "parallel/grad_reduce.h"
#include "parallel/grad_store.h"

namespace agoq {

struct CpuStepOptions {
  GradStoreOptions store;  // of the GradStore the caller builds (this engine reads the store itself)
  GradReduce reduce = GradReduce::fp32;
  bool zero = false;  // ZeRO-1
  size_t bucket_bytes = 4 << 20;
  bool overlap = true;  // without ZeRO: reduce while backward runs (fp32 store's buckets; q8 store + q8 units)
  AdamWConfig adam;     // its state: fp32 or 8-bit moments (optim/adam_q8.h)
  float clip = 1.0f;
  // Pipeline parallelism: the ranks holding the other stages of this replica (null: the model is whole).
  Communicator* stages = nullptr;
  // Tensor parallelism: the shards of this rank's layers (null: unsharded); `comm` then holds the replicas of this
  // (stage, TP rank).
  Communicator* tensor = nullptr;
  uint64_t seed = 1337;  // stochastic rounding streams (activations, q8 gradients)
};

class CpuStep final : public TrainStep {
 public:
  // params: this rank's (stage's) weights; grads: the store its model writes into.
  CpuStep(Communicator& comm, ParamSet& params, GradStore& grads, const CpuStepOptions& opts);
  CpuStep(const CpuStep&) = delete;
  CpuStep& operator=(const CpuStep&) = delete;

  // Starts a step of m micro-batches on this rank and returns what micro-batch j (global micro-batch rank * m + j)
  // runs with: the rounding seeds a single process running all D * m would give it, and grad_scale 1 / (D * m).
  // Backwards must run in order j = 0 .. m-1.
  std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) override;
  // Micro-batch j's gradients of backward part `part` (model/llama.h) are final: the store folds them with the
  // run's gradient seed, and after the last micro-batch their reduction starts.
  void part_done(const MicroBatchRun& run, int j, int part) override;
  // After the m micro-batches: reduction, norm, clipping, divergence check, AdamW. loss_sum: the sum of this rank's
  // micro-batch losses (0 on pipeline stages without the head). Collective.
  StepResult step_end(float lr, double loss_sum) override;

  // Adam moments for checkpoints (dp_moments.h).
  // The weights are this rank's parameters themselves.
  NamedTensors weights_views() override;
  NamedTensors moments_views() override { return moments_.views(); }
  void moments_gather() override { moments_.gather(); }
  void moments_release() override { moments_.release(); }
  NamedTensors moments_load_views(const MomentsForm& file) override { return moments_.load_views(file); }
  void moments_scatter() override { moments_.scatter(); }

 private:
  int D_, rank_;
  ParamSet& params_;
  uint64_t seed_;
  long step_ = 0;  // of the step running
  int m_ = 1;
  double loss_tokens_ = 0;  // of the step running (optim/train_step.h)
  GradStore& store_;
  std::vector<GradUnit> units_;
  GradReducer reducer_;
  DpOptimizer optimizer_;
  DpMoments moments_;
};

}  // namespace agoq

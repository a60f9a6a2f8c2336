// The CPU step (optim/step.h's engine on the CPU; docs/parallel.md): one optimizer step of this rank, one of
// D = comm.size() data-parallel replicas, each running m micro-batches, possibly as one pipeline stage and one
// tensor-parallel shard. Its phases, each a call (docs/agoq.md, "How a step flows"):
//
//   1. step_begin      each micro-batch's seeds (those one process running all D * m would give it), 1/(D*m) scale
//   2. part_done       after each backward part (train_forward_backward, or parallel/pipeline.h on a stage): the
//                      part's gradients folded into the store, and after the last micro-batch their reduction started
//   3. grads_reduce    the rest of the reduction (grad_reduce.h)
//   4. norm_and_clip   loss and norm over the grid, divergence check, clipping factor (dp_optimizer.h)
//   5. update          AdamW per unit (ZeRO-1: per shard, then all-gathered)
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
#include "optim/step.h"
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

class CpuStep final : public StepEngine {
 public:
  // params: this rank's (stage's) weights; grads: the store its model writes into.
  CpuStep(Communicator& comm, ParamSet& params, GradStore& grads, const CpuStepOptions& opts);
  CpuStep(const CpuStep&) = delete;
  CpuStep& operator=(const CpuStep&) = delete;

  // Phase 1: micro-batch j is global micro-batch rank * m + j; backwards run in order j = 0 .. m-1.
  std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) override;
  // Phase 2: the store folds the part's gradients with the run's gradient seed; after the last micro-batch their
  // reduction starts.
  void part_done(const MicroBatchRun& run, int j, int part) override;
  double grads_reduce() override;                    // phase 3, collective
  StepNorm norm_and_clip(double loss_sum) override;  // phase 4, collective
  void update(float lr, float clip_scale) override;  // phase 5, collective with ZeRO-1

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
  double loss_tokens_ = 0;  // of the step running (optim/step.h)
  GradStore& store_;
  std::vector<GradUnit> units_;
  GradReducer reducer_;
  DpOptimizer optimizer_;
  DpMoments moments_;
};

}  // namespace agoq

// One optimizer step, written once for every device and grid (docs/agoq.md, "How a step flows"; docs/parallel.md,
// "Loss, norm, clipping"). A step is five phases, each one call:
//
//   1. runs = engine.step_begin(step, m)             what each micro-batch runs with: seeds, gradient scale
//   2. loss_sum = train_forward_backward(engine, model, ..., runs)   (train/forward_backward.h; a pipeline
//        stage: parallel/pipeline.h)
//        each micro-batch's forward, head and backward part by part; after each part engine.part_done(): its
//        gradients are final, the engine folds them into its store and starts their reduction
//   3. wait_s = engine.grads_reduce()                 the gradient summed over the replicas
//   4. norm = engine.norm_and_clip(loss_sum)          the step's loss and gradient norm over the grid, the
//                                                     divergence check, the clipping factor
//   5. engine.update(lr, norm.clip_scale)             AdamW (optim/adamw.h), unit by unit of the gradient store
//
// The engines are the CPU step (parallel/step_cpu.h: the ranks' data, pipeline and tensor parallelism) and the CUDA
// step (cuda_train/step_cuda.h: one GPU). The model never calls them: whoever runs the micro-batches calls the model
// part by part and the engine between the parts.
//
// Backward parts are numbered as the model's (n_layers the head, then the layers from the last, -1 the embedding),
// micro-batches in order j = 0 .. m-1.
//
// The loss is a mean per counted target. Without loss masks every micro-batch counts as many, and each one's mean
// weighs 1/(D·m); with them (prompt/completion data) step_begin is given the step's count over its whole global
// batch, and every micro-batch's loss is its sum over that count, so every grid normalises alike.
//
// Checkpoints see the weights and the Adam moments as named host tensors: moments_gather() before a save makes
// them current (a ZeRO gather, a copy from the device), moments_release() after it; for a load,
// moments_load_views(form) are the tensors to read into and moments_scatter() puts them in place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "arch/hf.h"
#include "core/rng.h"
#include "model/llama.h"
#include "optim/adamw.h"

namespace agoq {

// What a step did, the same on every rank of the grid.
struct StepResult {
  double loss = 0;       // mean over all ranks' micro-batches
  double grad_norm = 0;  // global norm of the reduced gradient, before clipping
  double wait_s = 0;     // communication not hidden behind backward
};

// Phase 4's result.
struct StepNorm {
  double loss = 0, grad_norm = 0;
  float clip_scale = 1;  // the gradient's factor so its norm is at most the clip
};

// How a checkpoint (or a run) keeps the moments.
struct MomentsForm {
  OptimState state = OptimState::fp32;
  AdamQ8Format q8;  // with state q8
  bool operator==(const MomentsForm& o) const { return state == o.state && (state == OptimState::fp32 || q8 == o.q8); }
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // Phase 1. loss_tokens: the counted targets of the step's whole global batch (all ranks' micro-batches), or 0
  // for a mean per micro-batch (above).
  virtual std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) = 0;
  // Phase 2: micro-batch j's gradients of backward part `part` are final; run: what it ran with (step_begin's
  // runs[j]), whose gradient seeds the fold uses.
  virtual void part_done(const MicroBatchRun& run, int j, int part) = 0;
  // Phase 3: the seconds spent waiting for communication not hidden behind backward.
  virtual double grads_reduce() = 0;
  // Phase 4. loss_sum: this rank's micro-batches' summed loss (0 on pipeline stages without the head). Throws Error
  // "training diverged at step S ..." (the same on every rank of a grid) when the loss or the norm is not finite.
  virtual StepNorm norm_and_clip(double loss_sum) = 0;
  // Phase 5.
  virtual void update(float lr, float clip_scale) = 0;

  virtual NamedTensors weights_views() = 0;
  virtual NamedTensors moments_views() = 0;
  virtual void moments_gather() = 0;
  virtual void moments_release() = 0;
  virtual NamedTensors moments_load_views(const MomentsForm& file) = 0;
  virtual void moments_scatter() = 0;
};

// Phases 3 to 5, for callers that need no more than the result (benchmarks, tests).
StepResult step_finish(StepEngine& engine, float lr, double loss_sum);

// ---- what both engines build their phases from ----

// The stochastic-rounding seed of the saved activations of global micro-batch g at `step`: fresh per micro-batch,
// reproducible from (seed, step, g), the same whichever device or grid runs it.
inline uint64_t step_act_seed(uint64_t seed, long step, uint64_t g) {
  return philox4x32(seed, uint64_t(step), g)[0] | (uint64_t(step) << 32);
}

// The stochastic-rounding seed of global micro-batch g's gradients in an 8-bit store at `step`.
inline uint64_t step_grad_seed(uint64_t seed, long step, uint64_t g) {
  return philox4x32(seed ^ 0x67726164ull, uint64_t(step), g)[0];  // "grad"
}

// Global micro-batch g of a step counting micro_total micro-batches over the grid: its stochastic-rounding seeds
// (activations, 8-bit gradients; grad_first is the caller's), and its gradient's weight (1/micro_total, or 1 when the
// loss is per counted token over loss_tokens: the micro-batch's loss is already its sum over the whole step's count).
MicroBatchRun step_micro_batch(uint64_t seed, long step, uint64_t g, int micro_total, double loss_tokens);
// The step's loss from the grid's summed micro-batch losses.
inline double step_loss(double loss_sum, int micro_total, double loss_tokens) {
  return loss_tokens > 0 ? loss_sum : loss_sum / double(micro_total);
}

// The factor the gradient is scaled by so its norm is at most `clip`. Throws Error "training diverged at step S:
// the loss is X ..." when the loss or the norm is not finite (a grid agrees on both, so every rank throws alike).
float step_clip_scale(long step, double loss, double grad_norm, float clip);

}  // namespace agoq

// What a training session asks of the engine around each optimizer step, whichever device runs it: CpuStep
// (parallel/step_cpu.h: the CPU's ranks) or CudaStep (cuda_train/step_cuda.h: one GPU). Here, below both,
// so the GPU's step needs nothing of the ranks' modules (MPI).
//
//   runs = step.step_begin(step, m);  loss_sum = <the m micro-batches>;  result = step.step_end(lr, loss_sum)
//
// Whoever runs the micro-batches (train_step_micro_batches below on a whole model, parallel/pipeline.h on a stage)
// runs each backward part by part (model/llama.h) and tells the step as each part's gradients are final:
// part_done(runs[j], j, part), parts numbered as the model's (n_layers the head, then the layers from the last, -1 the
// embedding), micro-batches in order j = 0 .. m-1. The step folds them into its store and starts their reduction
// while the rest of backward runs.
//
// The loss is a mean per counted target. Without loss masks every micro-batch counts as many, and each one's mean
// weighs 1/(D·m); with them (prompt/completion data) step_begin is given the step's count over its whole global
// batch, and every micro-batch's loss is its sum over that count, so every grid normalises alike.
//
// Checkpoints see the weights and the Adam moments as named host tensors: moments_gather() before a save makes
// them current (a ZeRO gather, a copy from the device), moments_release() after it; for a load,
// moments_load_views(form) are the tensors to read into and moments_scatter() puts them in place.
#pragma once
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

// How a checkpoint (or a run) keeps the moments.
struct MomentsForm {
  OptimState state = OptimState::fp32;
  AdamQ8Format q8;  // with state q8
  bool operator==(const MomentsForm& o) const { return state == o.state && (state == OptimState::fp32 || q8 == o.q8); }
};

// The stochastic-rounding seed of the saved activations of global micro-batch g at `step`: fresh per micro-batch,
// reproducible from (seed, step, g), the same whichever device or grid runs it.
inline uint64_t step_act_seed(uint64_t seed, long step, uint64_t g) {
  return philox4x32(seed, uint64_t(step), g)[0] | (uint64_t(step) << 32);
}

// The stochastic-rounding seed of global micro-batch g's gradients in an 8-bit store at `step`.
inline uint64_t step_grad_seed(uint64_t seed, long step, uint64_t g) {
  return philox4x32(seed ^ 0x67726164ull, uint64_t(step), g)[0];  // "grad"
}

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  // loss_tokens: the counted targets of the step's whole global batch (all ranks' micro-batches), or 0 for a mean
  // per micro-batch (above).
  virtual std::vector<MicroBatchRun> step_begin(long step, int m, double loss_tokens = 0) = 0;
  // Micro-batch j's gradients of backward part `part` are final; run: what it ran with (step_begin's runs[j]),
  // whose gradient seeds the fold uses.
  virtual void part_done(const MicroBatchRun& run, int j, int part) = 0;
  virtual StepResult step_end(float lr, double loss_sum) = 0;

  virtual NamedTensors weights_views() = 0;
  virtual NamedTensors moments_views() = 0;
  virtual void moments_gather() = 0;
  virtual void moments_release() = 0;
  virtual NamedTensors moments_load_views(const MomentsForm& file) = 0;
  virtual void moments_scatter() = 0;
};

// The m = runs.size() micro-batches of a step on a whole model (inputs/targets back to back, B x T tokens each),
// each part's gradients handed to `step` as backward finishes it: the sum of their losses.
double train_step_micro_batches(TrainStep& step, LlamaModel& model, const int32_t* inputs, const int32_t* targets,
                                int B, int T, const std::vector<MicroBatchRun>& runs);

}  // namespace agoq

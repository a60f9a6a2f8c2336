// What a training session asks of the engine around each optimizer step, whichever device runs it: DataParallel
// (parallel/data_parallel.h: the CPU's ranks) or CudaTrainStep (gpu/train_step_cuda.h: one GPU).
//
//   runs = step.step_begin(step, m);  loss_sum = <the m micro-batches>;  result = step.step_end(lr, loss_sum)
//
// Checkpoints see the weights and the Adam moments as named host tensors: moments_gather() before a save makes
// them current (a ZeRO gather, a copy from the device), moments_release() after it; for a load,
// moments_load_views(form) are the tensors to read into and moments_scatter() puts them in place.
#pragma once
#include <vector>

#include "arch/hf.h"
#include "model/llama.h"
#include "parallel/dp_moments.h"
#include "parallel/dp_optimizer.h"

namespace agoq {

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  virtual std::vector<MicroBatchRun> step_begin(long step, int m) = 0;
  virtual DpStepResult step_end(float lr, double loss_sum) = 0;

  virtual NamedTensors weights_views() = 0;
  virtual NamedTensors moments_views() = 0;
  virtual void moments_gather() = 0;
  virtual void moments_release() = 0;
  virtual NamedTensors moments_load_views(const MomentsForm& file) = 0;
  virtual void moments_scatter() = 0;
};

}  // namespace agoq

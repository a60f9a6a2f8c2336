// The training flags of data parallelism (--grad-store, --allreduce, --grad-rounding, --zero, AdamW, --clip, --seed)
// as the engine's options.
#pragma once
#include "parallel/step_cpu.h"
#include "train/trainer.h"

namespace agoq {

// stages, tensor: the grid's pipeline and tensor-parallel groups (null without --pp, --tp).
CpuStepOptions dp_options_of(const TrainOptions& opt, Communicator* stages, Communicator* tensor);

}  // namespace agoq

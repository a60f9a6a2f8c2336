// The training flags of data parallelism (--grad-store, --allreduce, --grad-rounding, --zero, AdamW, --clip, --seed)
// as the engine's options. Flag strings are read here, where the flags are; parallel/ sees only enums.
#pragma once
#include "parallel/data_parallel.h"
#include "train/trainer.h"

namespace agoq {

// Throws agoq::Error naming the flag when --grad-store or --allreduce has an unknown value (--grad-rounding and
// --zero are checked with the other training options). stages, tensor: the grid's pipeline and tensor-parallel
// groups (null without --pp, --tp).
DpOptions dp_options_of(const TrainOptions& opt, Communicator* stages, Communicator* tensor);

}  // namespace agoq

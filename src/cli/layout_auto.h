// `agoq train --layout auto`: the layout `agoq plan --auto` ranks first for the ranks the run was started with.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "train/trainer.h"

namespace agoq {

// Sets o's --tp, --pp, --sp, --zero, --batch and --accum to the fastest fitting layout of o's model and system on
// comm's ranks, for a global batch of --batch x --accum x ranks sequences (what the flags mean under pure data
// parallelism), with the step-time inputs of `calibration` (a file from `plan --calibrate`; empty: measured now,
// collectively) and --mem-budget (or this host's memory shared by its ranks) per rank. Rank 0 says what it chose.
// Collective.
void train_layout_auto(TrainOptions& o, Communicator& comm, const std::string& calibration);

}  // namespace agoq

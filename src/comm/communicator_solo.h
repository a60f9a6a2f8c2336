// The one-rank world of a process started without an MPI launcher (communicator_solo.cpp says why).
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace agoq {

// True when an MPI launcher (mpirun, srun, hydra) started this process.
bool comm_started_by_launcher();
std::unique_ptr<Communicator> comm_solo_make();

}  // namespace agoq

// The P x D process grid of pipeline + data parallelism: world rank = stage * D + replica (stage-major, as
// Megatron orders pipeline outermost, so a stage's D replicas are neighbours and reduce among themselves).
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace agoq {

struct ParallelGrid {
  int P = 1, D = 1;             // pipeline stages, data-parallel replicas
  int stage = 0, replica = 0;   // this rank's coordinates
  Communicator* dp = nullptr;    // the D ranks holding this stage (the world itself when P = 1)
  Communicator* pipe = nullptr;  // the P stages of this replica (null when P = 1)
  std::unique_ptr<Communicator> dp_owned, pipe_owned;
};

// Collective over world. Throws agoq::Error when P does not divide the number of ranks.
inline ParallelGrid parallel_grid_make(Communicator& world, int P) {
  const int W = world.size();
  AGOQ_CHECK(P >= 1, "--pp must be >= 1 (got ", P, ")");
  AGOQ_CHECK(W % P == 0, "--pp ", P, " needs a multiple of ", P, " ranks (e.g. mpirun -np ", P, "), the job has ", W);
  ParallelGrid g;
  g.P = P, g.D = W / P, g.stage = world.rank() / g.D, g.replica = world.rank() % g.D;
  if (P == 1) {
    g.dp = &world;
    return g;
  }
  g.dp_owned = world.split(g.stage, g.replica);
  g.pipe_owned = world.split(g.replica, g.stage);
  g.dp = g.dp_owned.get(), g.pipe = g.pipe_owned.get();
  return g;
}

}  // namespace agoq

// The T x P x D process grid of tensor, pipeline and data parallelism (docs/parallel.md):
//   world rank = (stage * D + replica) * T + tp_rank
// Tensor parallelism is innermost (a TP group is T adjacent ranks, as Megatron places them on one node), pipeline
// outermost. Every parallel dimension has its own communicator: the T shards of a layer (tp), the D replicas of one
// (stage, TP rank), which reduce their gradients among themselves (dp), and the P stages of one (replica, TP rank)
// (pipe).
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace agoq {

struct ParallelGrid {
  int T = 1, P = 1, D = 1;                  // tensor-parallel ranks, pipeline stages, data-parallel replicas
  int tp_rank = 0, stage = 0, replica = 0;  // this rank's coordinates
  Communicator* dp = nullptr;    // the D ranks holding this (stage, TP rank) (the world itself when T = P = 1)
  Communicator* pipe = nullptr;  // the P stages of this (replica, TP rank) (null when P = 1)
  Communicator* tp = nullptr;    // the T shards of this (stage, replica) (null when T = 1)
  std::unique_ptr<Communicator> dp_owned, pipe_owned, tp_owned;
};

// Collective over world. Throws agoq::Error when T * P does not divide the number of ranks.
inline ParallelGrid parallel_grid_make(Communicator& world, int P, int T = 1) {
  const int W = world.size();
  AGOQ_CHECK(P >= 1, "--pp must be >= 1 (got ", P, ")");
  AGOQ_CHECK(T >= 1, "--tp must be >= 1 (got ", T, ")");
  AGOQ_CHECK(W % (P * T) == 0, T > 1 ? "--tp " : "", T > 1 ? std::to_string(T) + " x " : "", "--pp ", P,
             " needs a multiple of ", P * T, " ranks (e.g. mpirun -np ", P * T, "), the job has ", W);
  ParallelGrid g;
  g.T = T, g.P = P, g.D = W / (P * T);
  const int r = world.rank();
  g.tp_rank = r % T, g.replica = (r / T) % g.D, g.stage = r / (T * g.D);
  if (P == 1 && T == 1) {
    g.dp = &world;
    return g;
  }
  // Colours are unique per group: each split is collective over the whole world.
  g.dp_owned = world.split(g.stage * T + g.tp_rank, g.replica);
  g.dp = g.dp_owned.get();
  if (P > 1) g.pipe_owned = world.split(g.replica * T + g.tp_rank, g.stage), g.pipe = g.pipe_owned.get();
  if (T > 1) g.tp_owned = world.split(g.stage * g.D + g.replica, g.tp_rank), g.tp = g.tp_owned.get();
  return g;
}

}  // namespace agoq

// Adam moments for checkpoints, which keep the single-process format (full adam.m.* / adam.v.* tensors) whatever
// the sharding (docs/parallel.md, "--zero 1"). Without ZeRO the views point into the optimizer. With ZeRO, a save
// gathers the shards into full-size buffers on rank 0 (point-to-point; they exist only during the save, tagged
// ckpt.moments in workspace), and a resume reads full-size moments on every rank, which then keeps its part.
#pragma once
#include <vector>

#include "comm/communicator.h"
#include "model/hf.h"
#include "parallel/dp_optimizer.h"

namespace agoq {

class DpMoments {
 public:
  DpMoments(Communicator& comm, const ParamSet& params, const std::vector<GradUnit>& units, DpOptimizer& optimizer,
            bool zero);

  // The moments under the checkpoint names "adam.m.<param>" / "adam.v.<param>". With ZeRO: after gather() on rank
  // 0, empty elsewhere and before it.
  NamedTensors views();
  void gather();  // collective
  void release();
  // Resume: views to load a checkpoint's moments into (full-size buffers with ZeRO, released by scatter(), which
  // hands every rank its part).
  NamedTensors load_views();
  void scatter();

 private:
  void full_allocate();

  Communicator& comm_;
  const ParamSet& params_;
  const std::vector<GradUnit>& units_;
  DpOptimizer& optimizer_;
  bool zero_;
  Buffer<float> full_m_, full_v_;  // ZeRO: gathered / loaded moments
};

}  // namespace agoq

// Adam moments for checkpoints, which keep the single-process format whatever the sharding (docs/parallel.md,
// "--zero 1"; docs/checkpoint-format.md), under optim/moments_schema.h's names: fp32 states as full F32 tensors;
// 8-bit states as their codes and one F32 scale tensor per gradient unit and moment (blocks are unit-relative, so
// the same for any grid).
//
// Without ZeRO the views point into the optimizer. With ZeRO, a save gathers the shards into full-size buffers on
// rank 0 (point-to-point; they exist only during the save, tagged ckpt.moments in workspace). A resume reads the
// file's form into full-size buffers when the run shards them or keeps them in another form, and every rank then
// takes its part, converting (quantizing or decoding one unit at a time) when the forms differ.
#pragma once
#include <string>
#include <vector>

#include "arch/hf.h"
#include "comm/communicator.h"
#include "optim/step.h"  // MomentsForm
#include "parallel/dp_optimizer.h"

namespace agoq {

class DpMoments {
 public:
  DpMoments(Communicator& comm, const ParamSet& params, const std::vector<GradUnit>& units, DpOptimizer& optimizer,
            bool zero, const MomentsForm& form);

  // The moments under their checkpoint names. With ZeRO: after gather() on rank 0, empty elsewhere and before it.
  NamedTensors views();
  void gather();  // collective
  void release();
  // Resume: views to load a checkpoint's moments of form `file` into, then scatter(), which hands every rank its
  // part (converted to this run's form) and releases what load_views allocated.
  NamedTensors load_views(const MomentsForm& file);
  void scatter();

 private:
  NamedTensors views_of(const MomentsForm& f, bool full);
  void full_allocate(const MomentsForm& f);
  void unit_take(size_t u);  // resume: unit u's own part from the full buffers (file_ form) into the optimizer

  Communicator& comm_;
  const ParamSet& params_;
  const std::vector<GradUnit>& units_;
  DpOptimizer& optimizer_;
  bool zero_;
  MomentsForm form_, file_;
  bool full_ = false;              // the views point into the full-size buffers below
  Buffer<float> full_m_, full_v_;  // fp32 form
  Buffer<int8_t> full_mc_;         // q8 form: codes of the whole layout, scales unit after unit
  Buffer<uint8_t> full_vc_;
  Buffer<float> full_ms_, full_vs_;
  std::vector<size_t> scale_at_;  // q8 form: unit u's first scale in full_ms_ / full_vs_
};

}  // namespace agoq

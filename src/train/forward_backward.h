// Phase 2 of a step on a whole model (optim/step.h lists the five): each micro-batch's forward, head and backward,
// part by part, the step's engine told after each part that its gradients are final (StepEngine::part_done), so
// their reduction overlaps the rest of backward. A pipeline stage runs its micro-batches through Pipeline::run.
// Header-only: the GPU-only build (scripts/gpu-check.sh) has no train/ library, and its `bench train --device cuda`
// runs the CUDA step through this same loop.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "optim/step.h"

namespace agoq {

// The m = runs.size() micro-batches (inputs/targets back to back, B x T tokens each): the sum of their losses.
// Backward parts are numbered as the model's: n_layers the head, then the layers from the last, -1 the embedding.
inline double train_forward_backward(StepEngine& engine, LlamaModel& model, const int32_t* inputs,
                                     const int32_t* targets, int B, int T, const std::vector<MicroBatchRun>& runs) {
  AGOQ_CHECK(model.stage().whole(model.config()),
             "a step's micro-batches on one process need the whole model "
             "(a pipeline stage runs them through parallel/pipeline.h)");
  const size_t rows = size_t(B) * T;
  double loss_sum = 0;
  for (int j = 0; j < int(runs.size()); ++j) {
    const MicroBatchRun& run = runs[j];
    const int32_t* in = inputs + size_t(j) * rows;
    model.stage_forward(in, B, T, run);
    loss_sum += model.stage_head(targets + size_t(j) * rows, B, T, run, true);
    engine.part_done(run, j, model.config().n_layers);
    model.stage_backward_begin(B, T, run);
    for (int part : model.backward_parts()) {
      model.stage_backward_part(part, in, B, T, run);
      engine.part_done(run, j, part);
    }
  }
  return loss_sum;
}

}  // namespace agoq

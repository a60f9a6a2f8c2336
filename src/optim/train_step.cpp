#include "optim/train_step.h"

#include "core/error.h"

namespace agoq {

double train_step_micro_batches(TrainStep& step, LlamaModel& model, const int32_t* inputs, const int32_t* targets,
                                int B, int T, const std::vector<MicroBatchRun>& runs) {
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
    step.part_done(run, j, model.config().n_layers);
    model.stage_backward_begin(B, T, run);
    for (int part : model.backward_parts()) {
      model.stage_backward_part(part, in, B, T, run);
      step.part_done(run, j, part);
    }
  }
  return loss_sum;
}

}  // namespace agoq

#include "optim/step_core.h"

#include <cmath>

#include "core/error.h"
#include "optim/train_step.h"

namespace agoq {

MicroBatchRun step_micro_batch(uint64_t seed, long step, uint64_t g, int micro_total, double loss_tokens) {
  MicroBatchRun r;
  r.act_seed = step_act_seed(seed, step, g);
  r.grad_scale = loss_tokens > 0 ? 1.0f : 1.0f / float(micro_total);
  r.loss_tokens = loss_tokens;
  r.grad_seed = step_grad_seed(seed, step, g);
  return r;
}

float step_clip_scale(long step, double loss, double grad_norm, float clip) {
  if (!std::isfinite(loss))
    fail("training diverged at step ", step, ": the loss is ", loss, " (loss ", loss, ", gradient norm ", grad_norm,
         ")");
  if (!std::isfinite(grad_norm))
    fail("training diverged at step ", step, ": the gradient norm is ", grad_norm, " (loss ", loss, ", gradient norm ",
         grad_norm, ")");
  return grad_norm > clip ? float(clip / grad_norm) : 1.0f;
}

void step_apply(StepDevice& device, long step, float lr, float clip_scale) {
  for (int u = 0; u < device.unit_count(); ++u) {
    for (const StepRange& p : device.unit_pieces(u)) {
      float* g = device.gradient(u, p);
      if (clip_scale != 1.0f) device.scale(g, p.size(), clip_scale);
      device.adamw(u, g, p, lr, step);
    }
    device.unit_done(u);
  }
}

}  // namespace agoq

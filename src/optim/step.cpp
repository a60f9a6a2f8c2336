#include "optim/step.h"

#include <cmath>

#include "core/error.h"

namespace agoq {

StepResult step_finish(StepEngine& engine, float lr, double loss_sum) {
  StepResult r;
  r.wait_s = engine.grads_reduce();
  const StepNorm norm = engine.norm_and_clip(loss_sum);
  engine.update(lr, norm.clip_scale);
  r.loss = norm.loss, r.grad_norm = norm.grad_norm;
  return r;
}

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

}  // namespace agoq

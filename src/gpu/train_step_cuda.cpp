#include "gpu/train_step_cuda.h"

#include <cmath>

#include "core/error.h"
#include "cuda/ops_cuda.h"
#include "opmath/adamw_math.h"

namespace agoq {

CudaTrainStep::CudaTrainStep(LlamaModel& model, CudaBackend& gpu, const AdamWConfig& adam, float clip,
                             uint64_t seed)
    : model_(model),
      gpu_(gpu),
      adam_(adam),
      clip_(clip),
      seed_(seed),
      n_(model_stage_param_count(model.config(), model.stage())) {
  AGOQ_CHECK(&model.backend() == &gpu && model.grads_flat(), "the GPU step needs a model on its backend with its own "
             "gradient buffer (internal)");
  AGOQ_CHECK(adam.state == OptimState::fp32, "--device cuda keeps AdamW's moments in fp32 (8-bit moments are not "
             "built on the GPU yet): use --optim-state fp32");
  moment1_ = gpu.buffer<float>(n_, MemCategory::optimizer, "adam.m");
  moment2_ = gpu.buffer<float>(n_, MemCategory::optimizer, "adam.v");
  const float* base = model.params_flat();
  for (const ParamTensor& t : model.params().named()) {
    const size_t at = size_t(t.data - base);
    runs_.push_back({at, at + t.numel(), t.decay});
  }
}

std::vector<MicroBatchRun> CudaTrainStep::step_begin(long step, int m) {
  step_ = step, m_ = m;
  gpu_.zero(model_.grads_flat(), n_);
  std::vector<MicroBatchRun> runs(m);
  for (int j = 0; j < m; ++j) runs[j].act_seed = dp_act_seed(seed_, step, uint64_t(j)), runs[j].grad_scale = 1.0f / m;
  return runs;
}

// DpOptimizer::step on one replica: the norm of the whole gradient, clipping, then AdamW run by run.
DpStepResult CudaTrainStep::step_end(float lr, double loss_sum) {
  float* g = model_.grads_flat();
  DpStepResult res;
  res.loss = loss_sum / double(m_);
  res.grad_norm = std::sqrt(cuda_grad_sum_squares(g, n_));
  if (!std::isfinite(res.loss) || !std::isfinite(res.grad_norm))
    fail("training diverged at step ", step_, ": ", std::isfinite(res.loss) ? "the gradient norm is " : "the loss is ",
         std::isfinite(res.loss) ? res.grad_norm : res.loss, " (loss ", res.loss, ", gradient norm ", res.grad_norm,
         ")");
  if (res.grad_norm > clip_) cuda_grad_scale(g, n_, float(clip_ / res.grad_norm));
  const AdamStepCoeffs k = adam_step_coeffs(adam_.beta1, adam_.beta2, adam_.eps, lr, step_);
  const float decay = 1.0f - lr * adam_.weight_decay;
  float* p = model_.params_flat();
  for (const AdamDecayRun& r : runs_)
    cuda_adamw_step(p + r.begin, moment1_.data() + r.begin, moment2_.data() + r.begin, g + r.begin, r.end - r.begin,
                    r.decay ? decay : 1.0f, k);
  gpu_.weights_changed();
  return res;
}

// ---- checkpoints ----

void CudaTrainStep::host_allocate() {
  if (host_params_.size() == n_) return;
  host_params_ = ParamSet(model_.config(), model_.stage(), MemCategory::workspace, "ckpt.host");
  host_m_ = Buffer<float>(n_, MemCategory::workspace, "ckpt.host");
  host_v_ = Buffer<float>(n_, MemCategory::workspace, "ckpt.host");
}

void CudaTrainStep::moments_gather() {
  host_allocate();
  gpu_.download(host_params_.data(), model_.params_flat(), n_ * sizeof(float));
  gpu_.download(host_m_.data(), moment1_.data(), n_ * sizeof(float));
  gpu_.download(host_v_.data(), moment2_.data(), n_ * sizeof(float));
}

void CudaTrainStep::moments_scatter() {
  gpu_.upload(model_.params_flat(), host_params_.data(), n_ * sizeof(float));
  gpu_.upload(moment1_.data(), host_m_.data(), n_ * sizeof(float));
  gpu_.upload(moment2_.data(), host_v_.data(), n_ * sizeof(float));
  gpu_.weights_changed();
}

void CudaTrainStep::moments_release() { host_params_ = ParamSet(), host_m_.reset(), host_v_.reset(); }

NamedTensors CudaTrainStep::weights_views() {
  host_allocate();
  NamedTensors out;
  for (const ParamTensor& t : host_params_.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

NamedTensors CudaTrainStep::moments_views() {
  host_allocate();
  NamedTensors out;
  for (const ParamTensor& t : host_params_.named()) {
    const size_t at = size_t(t.data - host_params_.data());
    out.push_back({"adam.m." + t.name, t.shape, host_m_.data() + at});
    out.push_back({"adam.v." + t.name, t.shape, host_v_.data() + at});
  }
  return out;
}

NamedTensors CudaTrainStep::moments_load_views(const MomentsForm& file) {
  AGOQ_CHECK(file.state == OptimState::fp32, "8-bit moments are loaded into fp32 ones on the GPU (internal)");
  return moments_views();
}

}  // namespace agoq

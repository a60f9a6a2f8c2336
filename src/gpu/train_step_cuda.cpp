#include "gpu/train_step_cuda.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda/ops_cuda.h"
#include "opmath/adamw_math.h"

namespace agoq {

CudaTrainStep::CudaTrainStep(LlamaModel& model, CudaBackend& gpu, std::unique_ptr<DeviceGradStore> q8_grads,
                             const AdamWConfig& adam, float clip, uint64_t seed)
    : model_(model),
      gpu_(gpu),
      q8_(std::move(q8_grads)),
      adam_(adam),
      clip_(clip),
      seed_(seed),
      n_(model_stage_param_count(model.config(), model.stage())) {
  AGOQ_CHECK(&model.backend() == &gpu && (q8_ || model.grads_flat()), "the GPU step needs a model on its "
             "backend with its own gradient buffer or the 8-bit store's (internal)");
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

std::vector<MicroBatchRun> CudaTrainStep::step_begin(long step, int m, double loss_tokens) {
  step_ = step, m_ = m, loss_tokens_ = loss_tokens;
  if (!q8_) gpu_.zero(model_.grads_flat(), n_);  // the 8-bit store's first micro-batch overwrites instead
  std::vector<MicroBatchRun> runs(m);
  for (int j = 0; j < m; ++j) {
    MicroBatchRun& r = runs[j];
    r.act_seed = dp_act_seed(seed_, step, uint64_t(j));
    r.grad_scale = loss_tokens > 0 ? 1.0f : 1.0f / m, r.loss_tokens = loss_tokens;
    if (!q8_) continue;
    const uint64_t grad_seed = dp_grad_seed(seed_, step, uint64_t(j));
    r.grads_ready = [this, first = j == 0, grad_seed](int layer) {
      q8_->unit_ready(q8_->unit_of_layer(layer), first, grad_seed);
    };
  }
  return runs;
}

// DpOptimizer::step on one replica: the norm of the whole gradient, clipping, then AdamW run by run (the 8-bit
// store: unit by unit, each dequantized into its scratch once for the norm and once for the update).
DpStepResult CudaTrainStep::step_end(float lr, double loss_sum) {
  DpStepResult res;
  res.loss = loss_tokens_ > 0 ? loss_sum : loss_sum / double(m_);  // optim/train_step.h
  double sum_squares = 0;
  if (!q8_) sum_squares = cuda_grad_sum_squares(model_.grads_flat(), n_);
  for (int u = 0; q8_ && u < q8_->unit_count(); ++u) {
    const ParamSegment& r = q8_->unit(u);
    sum_squares += cuda_grad_sum_squares(q8_->unit_fp32(u), r.end - r.begin);
  }
  res.grad_norm = std::sqrt(sum_squares);
  if (!std::isfinite(res.loss) || !std::isfinite(res.grad_norm))
    fail("training diverged at step ", step_, ": ", std::isfinite(res.loss) ? "the gradient norm is " : "the loss is ",
         std::isfinite(res.loss) ? res.grad_norm : res.loss, " (loss ", res.loss, ", gradient norm ", res.grad_norm,
         ")");
  const float scale = res.grad_norm > clip_ ? float(clip_ / res.grad_norm) : 1.0f;
  const AdamStepCoeffs k = adam_step_coeffs(adam_.beta1, adam_.beta2, adam_.eps, lr, step_);
  const float decay = 1.0f - lr * adam_.weight_decay;
  if (!q8_) {
    float* g = model_.grads_flat();
    if (scale != 1.0f) cuda_grad_scale(g, n_, scale);
    adam_range(g, 0, n_, decay, k);
  }
  for (int u = 0; q8_ && u < q8_->unit_count(); ++u) {
    const ParamSegment& r = q8_->unit(u);
    float* g = q8_->unit_fp32(u);
    if (scale != 1.0f) cuda_grad_scale(g, r.end - r.begin, scale);
    adam_range(g, r.begin, r.end, decay, k);
    q8_->unit_release(u);
  }
  gpu_.weights_changed();
  return res;
}

// AdamW on [begin, end) of the flat layout, run by run of its weight decay; g holds the gradient of [begin, end).
void CudaTrainStep::adam_range(const float* g, size_t begin, size_t end, float decay, const AdamStepCoeffs& k) {
  float* p = model_.params_flat();
  for (const AdamDecayRun& r : runs_) {
    const size_t a = std::max(r.begin, begin), b = std::min(r.end, end);
    if (a < b)
      cuda_adamw_step(p + a, moment1_.data() + a, moment2_.data() + a, g + (a - begin), b - a, r.decay ? decay : 1.0f,
                      k);
  }
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
  moments_release();  // as DpMoments::scatter: the host copies live only while a checkpoint is read or written
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

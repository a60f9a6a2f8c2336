#include "cuda_train/step_cuda.h"

#include <cmath>

#include "core/error.h"
#include "cuda/ops_cuda.h"
#include "opmath/adamw_math.h"
#include "optim/moments_schema.h"
#include "optim/step.h"

namespace agoq {

CudaStep::CudaStep(LlamaModel& model, CudaBackend& gpu, std::unique_ptr<CudaGradStore> q8_grads,
                   const AdamWConfig& adam, float clip, uint64_t seed)
    : model_(model),
      gpu_(gpu),
      q8_(std::move(q8_grads)),
      adam_(adam),
      clip_(clip),
      seed_(seed),
      n_(model_stage_param_count(model.config(), model.stage())) {
  AGOQ_CHECK(&model.backend() == &gpu && (q8_ || model.grads_flat()),
             "the GPU step needs a model on its "
             "backend with its own gradient buffer or the 8-bit store's (internal)");
  AGOQ_CHECK(adam.state == OptimState::fp32,
             "--device cuda keeps AdamW's moments in fp32 (8-bit moments are not "
             "built on the GPU yet): use --optim-state fp32");
  moment1_ = gpu.buffer<float>(n_, MemCategory::optimizer, "adam.m");
  moment2_ = gpu.buffer<float>(n_, MemCategory::optimizer, "adam.v");
  runs_ = adam_decay_runs(model.params(), 0, n_);
}

std::vector<MicroBatchRun> CudaStep::step_begin(long step, int m, double loss_tokens) {
  step_ = step, m_ = m, loss_tokens_ = loss_tokens;
  if (!q8_) gpu_.zero(model_.grads_flat(), n_);  // the 8-bit store's first micro-batch overwrites instead
  std::vector<MicroBatchRun> runs(m);
  for (int j = 0; j < m; ++j) {
    runs[j] = step_micro_batch(seed_, step, uint64_t(j), m, loss_tokens);
    runs[j].grad_first = j == 0;
  }
  return runs;
}

void CudaStep::part_done(const MicroBatchRun& run, int, int part) {
  if (q8_) q8_->unit_ready(model_grad_unit_of_layer(model_.stage(), part), run.grad_first, run.grad_seed);
}

// The norm of the whole gradient (the 8-bit store: unit by unit, each dequantized into its scratch once for the
// norm and once more for the update).
StepNorm CudaStep::norm_and_clip(double loss_sum) {
  StepNorm norm;
  norm.loss = step_loss(loss_sum, m_, loss_tokens_);
  double sum_squares = 0;
  if (!q8_) sum_squares = cuda_grad_sum_squares(model_.grads_flat(), n_);
  for (int u = 0; q8_ && u < q8_->unit_count(); ++u) {
    const ParamSegment& r = q8_->unit(u);
    sum_squares += cuda_grad_sum_squares(q8_->unit_fp32(u), r.end - r.begin);
  }
  norm.grad_norm = std::sqrt(sum_squares);
  norm.clip_scale = step_clip_scale(step_, norm.loss, norm.grad_norm, clip_);
  return norm;
}

// AdamW unit by unit from the fp32 gradient (without the 8-bit store one unit: the whole gradient, [0, n)).
void CudaStep::update(float lr, float clip_scale) {
  const AdamStepCoeffs k = adam_step_coeffs(adam_.beta1, adam_.beta2, adam_.eps, lr, step_);
  const float decay = 1.0f - lr * adam_.weight_decay;
  float* w = model_.params_flat();
  for (int u = 0; u < (q8_ ? q8_->unit_count() : 1); ++u) {
    const size_t begin = q8_ ? q8_->unit(u).begin : 0, end = q8_ ? q8_->unit(u).end : n_;
    float* g = q8_ ? q8_->unit_fp32(u) : model_.grads_flat();
    if (clip_scale != 1.0f) cuda_grad_scale(g, end - begin, clip_scale);
    adam_decay_runs_within(runs_, begin, end, [&](size_t a, size_t b, bool decays) {
      cuda_adamw_step(w + a, moment1_.data() + a, moment2_.data() + a, g + (a - begin), b - a, decays ? decay : 1.0f,
                      k);
    });
    if (q8_) q8_->unit_release(u);
  }
  gpu_.weights_changed();
}

// ---- checkpoints ----

void CudaStep::host_allocate() {
  if (host_params_.size() == n_) return;
  host_params_ = ParamSet(model_.config(), model_.stage(), MemCategory::workspace, "ckpt.host");
  host_m_ = Buffer<float>(n_, MemCategory::workspace, "ckpt.host");
  host_v_ = Buffer<float>(n_, MemCategory::workspace, "ckpt.host");
}

void CudaStep::moments_gather() {
  host_allocate();
  gpu_.download(host_params_.data(), model_.params_flat(), n_ * sizeof(float));
  gpu_.download(host_m_.data(), moment1_.data(), n_ * sizeof(float));
  gpu_.download(host_v_.data(), moment2_.data(), n_ * sizeof(float));
}

void CudaStep::moments_scatter() {
  gpu_.upload(model_.params_flat(), host_params_.data(), n_ * sizeof(float));
  gpu_.upload(moment1_.data(), host_m_.data(), n_ * sizeof(float));
  gpu_.upload(moment2_.data(), host_v_.data(), n_ * sizeof(float));
  gpu_.weights_changed();
  moments_release();  // as DpMoments::scatter: the host copies live only while a checkpoint is read or written
}

void CudaStep::moments_release() { host_params_ = ParamSet(), host_m_.reset(), host_v_.reset(); }

NamedTensors CudaStep::weights_views() {
  host_allocate();
  NamedTensors out;
  for (const ParamTensor& t : host_params_.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

NamedTensors CudaStep::moments_views() {
  host_allocate();
  MomentsPlace at;  // fp32: one flat buffer per moment
  at.m = {host_m_.data()}, at.v = {host_v_.data()};
  return agoq::moments_views(host_params_.named(), model_.stage(), {{0, n_}}, at);
}

NamedTensors CudaStep::moments_load_views(const MomentsForm& file) {
  AGOQ_CHECK(file.state == OptimState::fp32, "8-bit moments are loaded into fp32 ones on the GPU (internal)");
  return moments_views();
}

}  // namespace agoq

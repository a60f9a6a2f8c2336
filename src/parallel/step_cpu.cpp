#include "parallel/step_cpu.h"

namespace agoq {

namespace {
GradReduceOptions reduce_options(const CpuStepOptions& o) {
  GradReduceOptions r;
  r.reduce = o.reduce, r.zero = o.zero, r.bucket_bytes = o.bucket_bytes;
  // Under a pipeline (tensor parallelism) the main thread sends activations (all-reduces a layer's partial sums)
  // while the communication thread reduces: MPI must allow both.
  r.overlap = o.overlap && ((!o.stages && !o.tensor) || comm_thread_level() == CommThreads::multiple);
  return r;
}
}  // namespace

CpuStep::CpuStep(Communicator& comm, ParamSet& params, GradStore& grads, const CpuStepOptions& opts)
    : D_(comm.size()),
      rank_(comm.rank()),
      params_(params),
      seed_(opts.seed),
      store_(grads),
      units_(grad_units_sharded(grads.units(), D_, rank_, opts.zero, grads.block())),
      reducer_(comm, grads, units_, reduce_options(opts)),
      optimizer_(comm, params, units_, {opts.adam, opts.clip, opts.zero, opts.stages, opts.tensor}),
      moments_(comm, params, units_, optimizer_, opts.zero, {opts.adam.state, opts.adam.q8}) {}

NamedTensors CpuStep::weights_views() {
  NamedTensors out;
  for (const ParamTensor& t : params_.named()) out.push_back({t.name, t.shape, t.data});
  return out;
}

std::vector<MicroBatchRun> CpuStep::step_begin(long step, int m, double loss_tokens) {
  step_ = step, m_ = m, loss_tokens_ = loss_tokens;
  store_.step_begin();
  std::vector<MicroBatchRun> runs(m);
  for (int j = 0; j < m; ++j) {
    const uint64_t g = uint64_t(rank_) * uint64_t(m) + uint64_t(j);  // the global micro-batch index
    runs[j] =
        step_micro_batch(seed_, step, g, D_ * m, loss_tokens);  // the seeds a single process running all D * m uses
    runs[j].grad_first = j == 0;
  }
  return runs;
}

void CpuStep::part_done(const MicroBatchRun& run, int j, int part) {
  reducer_.unit_ready(model_grad_unit_of_layer(store_.stage(), part), run.grad_first, j == m_ - 1, run.grad_seed);
}

double CpuStep::grads_reduce() { return reducer_.reduce(); }

StepNorm CpuStep::norm_and_clip(double loss_sum) {
  return optimizer_.norm_and_clip(step_, loss_sum, D_ * m_, loss_tokens_, reducer_);
}

void CpuStep::update(float lr, float clip_scale) { optimizer_.update(step_, lr, clip_scale, reducer_); }

}  // namespace agoq

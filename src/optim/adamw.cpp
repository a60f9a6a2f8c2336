#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace agoq {

const char* optim_state_name(OptimState s) { return enum_name(kOptimStateNames, s); }

OptimState optim_state_parse(const std::string& s) { return enum_parse(kOptimStateNames, s, "--optim-state"); }

AdamW::AdamW(const ParamSet& layout, const AdamWConfig& cfg, size_t begin, size_t end)
    : cfg_(cfg), begin_(begin), end_(std::min(end, layout.size())) {
  AGOQ_CHECK(begin_ <= end_, "optimizer shard [", begin, ", ", end, ") is empty or inverted");
  runs_ = adam_decay_runs(layout, begin_, end_);
  if (q8()) {
    q8_ = AdamQ8State(end_ - begin_, cfg.q8, begin_);
  } else {
    m_ = Buffer<float>(end_ - begin_, MemCategory::optimizer, "adam.m");
    v_ = Buffer<float>(end_ - begin_, MemCategory::optimizer, "adam.v");
  }
}

void AdamW::step(float* params, const float* grads, float lr, long step, size_t from, size_t to) {
  AGOQ_CHECK(begin_ <= from && from <= to && to <= end_, "AdamW step of [", from, ", ", to, ") outside its [", begin_,
             ", ", end_, ") (internal)");
  const AdamStepCoeffs k = adam_step_coeffs(cfg_.beta1, cfg_.beta2, cfg_.eps, lr, step);
  const float decay_factor = 1.0f - lr * cfg_.weight_decay;
  if (q8()) {
    q8_.step(params + begin_, grads + begin_, k, decay_factor, runs_, step, from - begin_, to - begin_);
    return;
  }
  float* m = m_.data();
  float* v = v_.data();
  float* p = params + begin_;
  const float* gr = grads + begin_;
  adam_decay_runs_within(runs_, from - begin_, to - begin_, [&](size_t i0, size_t i1, bool decay) {
    // Locals, not the closure's references: GCC vectorizes no loop that reads a struct through one.
    const float factor = decay ? decay_factor : 1.0f;
    const AdamStepCoeffs kl = k;
    float *pl = p, *ml = m, *vl = v;
    const float* gl = gr;
#pragma omp parallel for simd schedule(static) if (i1 > i0 + 32768)
    for (size_t i = i0; i < i1; ++i) adamw_update(pl[i], ml[i], vl[i], gl[i], factor, kl);
  });
}

void AdamW::moments_load_fp32(const float* m, const float* v) {
  if (q8()) return q8_.load_fp32(m, v);
  std::copy(m, m + m_.size(), m_.data());
  std::copy(v, v + v_.size(), v_.data());
}

void AdamW::moments_store_fp32(float* m, float* v) const {
  if (q8()) return q8_.store_fp32(m, v);
  std::copy(m_.begin(), m_.end(), m);
  std::copy(v_.begin(), v_.end(), v);
}

std::vector<AdamDecayRun> adam_decay_runs(const ParamSet& layout, size_t begin, size_t end) {
  std::vector<AdamDecayRun> runs;
  for (const ParamTensor& t : layout.named()) {
    const size_t b = size_t(t.data - layout.data()), e = b + t.numel();
    const size_t cb = std::max(b, begin), ce = std::min(e, end);
    if (cb < ce) runs.push_back({cb - begin, ce - begin, t.decay});
  }
  return runs;
}

double grad_sum_squares(const float* g, size_t n) {
  constexpr size_t kChunk = 1 << 16;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b = c * kChunk, e = std::min(n, b + kChunk);
    double acc = 0;
    for (size_t i = b; i < e; ++i) acc += double(g[i]) * g[i];
    part[c] = acc;
  }
  double total = 0;
  for (double p : part) total += p;
  return total;
}

void grad_scale(float* g, size_t n, float factor) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) g[i] *= factor;
}

float lr_schedule(long step, float max_lr, float min_lr, long warmup, long total) {
  if (warmup > 0 && step <= warmup) return max_lr * float(step) / float(warmup);
  if (step >= total) return min_lr;
  const double progress = double(step - warmup) / double(std::max(1L, total - warmup));
  return min_lr + 0.5f * (max_lr - min_lr) * float(1.0 + std::cos(M_PI * progress));
}

}  // namespace agoq

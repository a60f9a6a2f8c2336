#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace agoq {

AdamW::AdamW(const ParamSet& layout, const AdamWConfig& cfg, size_t begin, size_t end)
    : cfg_(cfg), begin_(begin), end_(std::min(end, layout.size())) {
  AGOQ_CHECK(begin_ <= end_, "optimizer shard [", begin, ", ", end, ") is empty or inverted");
  for (const ParamTensor& t : layout.named()) {
    const size_t b = size_t(t.data - layout.data()), e = b + t.numel();
    const size_t cb = std::max(b, begin_), ce = std::min(e, end_);
    if (cb < ce) segments_.push_back({cb, ce, t.decay});
  }
  m_ = Buffer<float>(end_ - begin_, MemCategory::optimizer, "adam.m");
  v_ = Buffer<float>(end_ - begin_, MemCategory::optimizer, "adam.v");
}

void AdamW::step(float* params, const float* grads, float lr, long step) {
  const float b1 = cfg_.beta1, b2 = cfg_.beta2, eps = cfg_.eps;
  const float bc1 = 1.0f - std::pow(b1, float(step)), bc2 = 1.0f - std::pow(b2, float(step));
  const float step_size = lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  for (const Segment& s : segments_) {
    const float decay = s.decay ? 1.0f - lr * cfg_.weight_decay : 1.0f;
    float* m = m_.data() - begin_;
    float* v = v_.data() - begin_;
#pragma omp parallel for simd schedule(static) if (s.end - s.begin > 32768)
    for (size_t i = s.begin; i < s.end; ++i) {
      const float g = grads[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      params[i] = params[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  }
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

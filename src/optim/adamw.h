// AdamW with fp32 moments, global-norm clipping and the learning-rate schedule.
#pragma once
#include <cstddef>
#include <vector>

#include "core/memory.h"
#include "model/params.h"

namespace agoq {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; applied to matrices only (not norm weights)
};

class AdamW {
 public:
  // Moments for the elements [begin, end) of the flat parameter layout (the whole model unless sharded).
  AdamW(const ParamSet& layout, const AdamWConfig& cfg, size_t begin = 0, size_t end = size_t(-1));

  // One update of params[begin, end) from grads[begin, end) (both indexed in the flat layout); `step` is 1-based.
  void step(float* params, const float* grads, float lr, long step);

  Buffer<float>& m() { return m_; }
  Buffer<float>& v() { return v_; }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  struct Segment {
    size_t begin, end;  // flat range, clipped to [begin_, end_)
    bool decay;
  };
  AdamWConfig cfg_;
  size_t begin_, end_;
  std::vector<Segment> segments_;
  Buffer<float> m_, v_;
};

// sqrt(sum g^2), accumulated in double over fixed chunks in a fixed order (deterministic for any thread count).
double grad_sum_squares(const float* g, size_t n);
void grad_scale(float* g, size_t n, float factor);

// Linear warm-up to max_lr over `warmup` steps, then cosine decay to min_lr at `total` steps (1-based step).
float lr_schedule(long step, float max_lr, float min_lr, long warmup, long total);

}  // namespace agoq

// AdamW with fp32 or 8-bit moments (optim/adam_q8.h), global-norm clipping and the learning-rate schedule.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "arch/params.h"
#include "core/enum_names.h"
#include "core/memory.h"
#include "optim/adam_q8.h"

namespace agoq {

// How the moments are kept (`--optim-state`): fp32, or 8 bits per value with a scale per block.
enum class OptimState : uint8_t { fp32, q8 };
inline constexpr EnumName<OptimState> kOptimStateNames[] = {{OptimState::fp32, "fp32"}, {OptimState::q8, "q8"}};
const char* optim_state_name(OptimState s);
OptimState optim_state_parse(const std::string& s);  // "fp32" | "q8"; throws naming the flag

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; applied to matrices only (not norm weights)
  OptimState state = OptimState::fp32;
  AdamQ8Format q8;  // with state q8
};

class AdamW {
 public:
  // Moments for the elements [begin, end) of the flat parameter layout (the whole model unless sharded).
  AdamW(const ParamSet& layout, const AdamWConfig& cfg, size_t begin = 0, size_t end = size_t(-1));

  // One update of params[begin, end) from grads[begin, end) (both indexed in the flat layout); `step` is 1-based.
  void step(float* params, const float* grads, float lr, long step) {
    this->step(params, grads, lr, step, begin_, end_);
  }
  // The same update of a part [from, to) of [begin, end) only, for a caller that holds the gradient piece by piece
  // (q8 moments: `from` starts a block). Pieces covering [begin, end) give the bits of one whole step.
  void step(float* params, const float* grads, float lr, long step, size_t from, size_t to);

  bool q8() const { return cfg_.state == OptimState::q8; }
  // The moments as kept: fp32 buffers (fp32), or codes and scales (q8).
  Buffer<float>& m() { return m_; }
  Buffer<float>& v() { return v_; }
  AdamQ8State& q8_state() { return q8_; }
  // The moments of [begin, end) as fp32 values in or out, whatever the state (q8: quantized / decoded), for
  // checkpoints written or read with the other state.
  void moments_load_fp32(const float* m, const float* v);
  void moments_store_fp32(float* m, float* v) const;
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  AdamWConfig cfg_;
  size_t begin_, end_;
  std::vector<AdamDecayRun> runs_;  // tile [0, end_ - begin_): where weight decay applies
  Buffer<float> m_, v_;             // fp32
  AdamQ8State q8_;                  // q8
};

// Where weight decay applies in [begin, end) of a flat layout (matrices, not norms): runs tiling it in order,
// relative to begin.
std::vector<AdamDecayRun> adam_decay_runs(const ParamSet& layout, size_t begin, size_t end);
// fn(i0, i1, decay) for each run's part within [from, to) (indexed as the runs are).
template <class Fn>
void adam_decay_runs_within(const std::vector<AdamDecayRun>& runs, size_t from, size_t to, Fn&& fn) {
  for (const AdamDecayRun& r : runs) {
    const size_t a = std::max(r.begin, from), b = std::min(r.end, to);
    if (a < b) fn(a, b, r.decay);
  }
}

// sqrt(sum g^2), accumulated in double over fixed chunks in a fixed order (deterministic for any thread count).
double grad_sum_squares(const float* g, size_t n);
void grad_scale(float* g, size_t n, float factor);

// Linear warm-up to max_lr over `warmup` steps, then cosine decay to min_lr at `total` steps (1-based step).
float lr_schedule(long step, float max_lr, float min_lr, long warmup, long total);

}  // namespace agoq

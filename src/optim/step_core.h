// The optimizer step, written once for every device and grid (docs/parallel.md, "Loss, norm, clipping"). The
// engines around it (CpuStep for the CPU's ranks, CudaStep for one GPU) add only what is theirs: where
// the gradient lives and the sums over ranks.
//
//   1. each micro-batch's seeds and scale                    step_micro_batch
//   2. the step's loss and the gradient's squared norm       step_loss; the sums over the grid: the engine's
//   3. divergence check, then the clipping factor            step_clip_scale
//   4. per unit, per piece: the fp32 gradient, scaled,       step_apply over the engine's StepDevice
//      then AdamW over it; the unit's close (a scratch
//      released, a ZeRO shard all-gathered)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/llama.h"

namespace agoq {

// Global micro-batch g of a step counting micro_total micro-batches over the grid: its stochastic-rounding seeds
// (activations, 8-bit gradients; grad_first is the caller's), and its gradient's weight (1/micro_total, or 1 when the
// loss is per counted token over loss_tokens: the micro-batch's loss is already its sum over the whole step's count,
// optim/train_step.h).
MicroBatchRun step_micro_batch(uint64_t seed, long step, uint64_t g, int micro_total, double loss_tokens);
// The step's loss from the grid's summed micro-batch losses.
inline double step_loss(double loss_sum, int micro_total, double loss_tokens) {
  return loss_tokens > 0 ? loss_sum : loss_sum / double(micro_total);
}

// The factor the gradient is scaled by so its norm is at most `clip`. Throws Error "training diverged at step S:
// the loss is X ..." when the loss or the norm is not finite (a grid agrees on both, so every rank throws alike).
float step_clip_scale(long step, double loss, double grad_norm, float clip);

// A part [begin, end) of the flat parameter layout.
struct StepRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Where a step's reduced gradient is and how the device updates from it. Units are the gradient store's (the
// embedding, each layer, the head); a unit is read in pieces when its store dequantizes piece by piece.
class StepDevice {
 public:
  virtual ~StepDevice() = default;
  virtual int unit_count() const = 0;
  virtual std::vector<StepRange> unit_pieces(int u) = 0;  // this rank's part of unit u, in the flat layout
  // The fp32 gradient of piece p, at [0, p.size()) on the device; valid until the next call.
  virtual float* gradient(int u, StepRange p) = 0;
  virtual void scale(float* g, size_t n, float factor) = 0;
  // AdamW of the parameters p from g (the gradient of p, at [0, p.size())).
  virtual void adamw(int u, const float* g, StepRange p, float lr, long step) = 0;
  virtual void unit_done(int u) = 0;
};

// Step 4: every unit's pieces scaled by clip_scale (unless 1) and applied.
void step_apply(StepDevice& device, long step, float lr, float clip_scale);

}  // namespace agoq

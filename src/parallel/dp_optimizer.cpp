#include "parallel/dp_optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/step.h"

namespace agoq {

DpOptimizer::DpOptimizer(Communicator& comm, ParamSet& params, const std::vector<GradUnit>& units,
                         const DpOptimizerOptions& o)
    : comm_(comm), params_(params), units_(units), opts_(o), D_(comm.size()) {
  for (const GradUnit& u : units) {
    const size_t own = u.range.begin + u.own.begin;
    // 8-bit moments: blocks start on the shard, so shards must start on blocks for every grid to see one layout.
    AGOQ_CHECK(o.adam.state != OptimState::q8 || u.own.begin % size_t(o.adam.q8.block) == 0,
               "8-bit optimizer blocks of ", o.adam.q8.block, " values do not divide the ZeRO shards");
    adam_.push_back(std::make_unique<AdamW>(params, o.adam, own, own + u.own.size()));
  }
}

StepNorm DpOptimizer::norm_and_clip(long step, double loss_sum, int micro_total, double loss_tokens,
                                    GradReducer& reducer) {
  double loss_all = D_ > 1 ? comm_.allreduce_value(loss_sum) : loss_sum;
  double sum_squares = reducer.sum_squares();
  if (opts_.tensor && opts_.tensor->rank() != 0) sum_squares -= replicated_sum_squares(reducer);
  if (opts_.stages) {  // the last stage holds the loss; every stage its own parameters' gradients
    double v[2] = {loss_all, sum_squares};
    opts_.stages->allreduce_sum(v, 2);
    loss_all = v[0], sum_squares = v[1];
  }
  if (opts_.tensor) opts_.tensor->allreduce_sum(&sum_squares, 1);  // the loss is the same on every shard
  StepNorm norm;
  norm.loss = step_loss(loss_all, micro_total, loss_tokens);
  norm.grad_norm = std::sqrt(sum_squares);
  try {
    norm.clip_scale = step_clip_scale(step, norm.loss, norm.grad_norm, opts_.clip);
  } catch (const Error& e) {
    throw CommAgreedError(e.what());  // every rank of the grid computed the same loss and norm
  }
  return norm;
}

// AdamW unit by unit over the pieces the reducer hands out (an 8-bit unit is dequantized piece by piece), then
// with ZeRO-1 the all-gather of the unit's parameters from their shards.
void DpOptimizer::update(long step, float lr, float clip_scale, GradReducer& reducer) {
  for (size_t u = 0; u < units_.size(); ++u) {
    const GradUnit& unit = units_[u];
    for (const GradRange& p : reducer.pieces(int(u))) {
      float* g = reducer.reduced(int(u), p);  // indexed like the flat layout; only the piece [a, b) is valid
      const size_t a = unit.range.begin + p.begin, b = unit.range.begin + p.end;
      if (clip_scale != 1.0f) grad_scale(g + a, b - a, clip_scale);
      adam_[u]->step(params_.data(), g, lr, step, a, b);
    }
    if (opts_.zero && D_ > 1) params_allgather(unit);
  }
}

void DpOptimizer::params_allgather(const GradUnit& unit) {
  std::vector<size_t> bytes(D_), displs(D_);
  for (int k = 0; k < D_; ++k) bytes[k] = unit.counts[k] * sizeof(float), displs[k] = unit.displs[k] * sizeof(float);
  float* p = params_.data() + unit.range.begin;
  comm_.allgatherv(p + unit.own.begin, bytes[comm_.rank()], p, bytes.data(), displs.data());
}

double DpOptimizer::replicated_sum_squares(GradReducer& reducer) {
  double sum = 0;
  for (size_t ui = 0; ui < units_.size(); ++ui)
    for (const GradRange& p : reducer.pieces(int(ui))) {
      const size_t p0 = units_[ui].range.begin + p.begin, p1 = units_[ui].range.begin + p.end;
      const float* g = nullptr;
      for (const ParamTensor& t : params_.named()) {
        if (t.split_dim >= 0) continue;
        const size_t off = size_t(t.data - params_.data());
        const size_t a = std::max(off, p0), b = std::min(off + t.numel(), p1);
        if (a >= b) continue;
        if (!g) g = reducer.reduced(int(ui), p);  // q8: dequantized once per piece, for pieces with norms only
        for (size_t i = a; i < b; ++i) sum += double(g[i]) * g[i];
      }
    }
  return opts_.zero && D_ > 1 ? comm_.allreduce_value(sum) : sum;
}

}  // namespace agoq

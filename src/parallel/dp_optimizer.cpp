#include "parallel/dp_optimizer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace agoq {

namespace {
// Every rank computes the same value (after the loss all-reduce), so every rank fails alike and rank 0 alone says
// why (comm_run_guarded).
template <class... Parts>
[[noreturn]] void fail_agreed(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw CommAgreedError(os.str());
}
}  // namespace

DpOptimizer::DpOptimizer(Communicator& comm, ParamSet& params, const std::vector<GradUnit>& units,
                         const DpOptimizerOptions& o)
    : comm_(comm), params_(params), units_(units), opts_(o), D_(comm.size()), rank_(comm.rank()) {
  for (const GradUnit& u : units) {
    const size_t own = u.range.begin + u.own.begin;
    // 8-bit moments: blocks start on the shard, so shards must start on blocks for every grid to see one layout.
    AGOQ_CHECK(o.adam.state != OptimState::q8 || u.own.begin % size_t(o.adam.q8.block) == 0,
               "8-bit optimizer blocks of ", o.adam.q8.block, " values do not divide the ZeRO shards");
    adam_.push_back(std::make_unique<AdamW>(params, o.adam, own, own + u.own.size()));
  }
}

DpStepResult DpOptimizer::step(long step, float lr, double loss_sum, int n_micro, GradReducer& reducer) {
  DpStepResult res;
  double loss_all = D_ > 1 ? comm_.allreduce_value(loss_sum) : loss_sum;
  double sum_squares = reducer.sum_squares();
  if (opts_.tensor && opts_.tensor->rank() != 0) sum_squares -= replicated_sum_squares(reducer);
  if (opts_.stages) {  // the last stage holds the loss; every stage its own parameters' gradients
    double v[2] = {loss_all, sum_squares};
    opts_.stages->allreduce_sum(v, 2);
    loss_all = v[0], sum_squares = v[1];
  }
  if (opts_.tensor) opts_.tensor->allreduce_sum(&sum_squares, 1);  // the loss is the same on every shard
  res.loss = loss_all / double(n_micro);
  res.grad_norm = std::sqrt(sum_squares);
  if (!std::isfinite(res.loss) || !std::isfinite(res.grad_norm))
    fail_agreed("training diverged at step ", step, ": ",
                std::isfinite(res.loss) ? "the gradient norm is " : "the loss is ",
                std::isfinite(res.loss) ? res.grad_norm : res.loss, " (loss ", res.loss, ", gradient norm ",
                res.grad_norm, ")");
  const float scale = res.grad_norm > opts_.clip ? float(opts_.clip / res.grad_norm) : 1.0f;
  apply(step, lr, scale, reducer);
  return res;
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

void DpOptimizer::apply(long step, float lr, float scale, GradReducer& reducer) {
  float* params = params_.data();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const GradUnit& u = units_[ui];
    for (const GradRange& p : reducer.pieces(int(ui))) {
      float* g = reducer.reduced(int(ui), p);
      const size_t a = u.range.begin + p.begin;
      if (scale != 1.0f) grad_scale(g + a, p.size(), scale);
      adam_[ui]->step(params, g, lr, step, a, a + p.size());
    }
    if (!opts_.zero || D_ == 1) continue;
    std::vector<size_t> bytes(D_), displs(D_);
    for (int k = 0; k < D_; ++k) bytes[k] = u.counts[k] * sizeof(float), displs[k] = u.displs[k] * sizeof(float);
    float* p = params + u.range.begin;
    comm_.allgatherv(p + u.own.begin, bytes[rank_], p, bytes.data(), displs.data());
  }
}

}  // namespace agoq

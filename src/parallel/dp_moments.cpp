#include "parallel/dp_moments.h"

#include <cstring>

namespace agoq {

DpMoments::DpMoments(Communicator& comm, const ParamSet& params, const std::vector<GradUnit>& units,
                     DpOptimizer& optimizer, bool zero)
    : comm_(comm), params_(params), units_(units), optimizer_(optimizer), zero_(zero) {}

NamedTensors DpMoments::views() {
  NamedTensors out;
  const bool full = !full_m_.empty();
  if (zero_ && !full) return out;
  size_t ui = 0;
  for (const ParamTensor& t : params_.named()) {
    const size_t off = size_t(t.data - params_.data());
    while (off >= units_[ui].range.end) ++ui;  // named() walks the layout in order
    AdamW& adam = optimizer_.adam(int(ui));
    const size_t in_unit = off - units_[ui].range.begin;
    float* m = full ? full_m_.data() + off : adam.m().data() + in_unit;
    float* v = full ? full_v_.data() + off : adam.v().data() + in_unit;
    out.push_back({"adam.m." + t.name, t.shape, m});
    out.push_back({"adam.v." + t.name, t.shape, v});
  }
  return out;
}

void DpMoments::full_allocate() {
  // Checkpoint-time only; tagged so the run's peak shows it apart from the sharded optimizer state.
  full_m_ = Buffer<float>(params_.size(), MemCategory::workspace, "ckpt.moments");
  full_v_ = Buffer<float>(params_.size(), MemCategory::workspace, "ckpt.moments");
}

void DpMoments::gather() {
  if (!zero_) return;
  const int rank = comm_.rank();
  if (rank == 0) full_allocate();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const GradUnit& u = units_[ui];
    AdamW& adam = optimizer_.adam(int(ui));
    const size_t own = u.range.begin + u.own.begin, bytes = u.own.size() * sizeof(float);
    if (rank != 0) {
      comm_.send(adam.m().data(), bytes, 0, 1);
      comm_.send(adam.v().data(), bytes, 0, 2);
      continue;
    }
    std::memcpy(full_m_.data() + own, adam.m().data(), bytes);
    std::memcpy(full_v_.data() + own, adam.v().data(), bytes);
    for (int k = 1; k < comm_.size(); ++k) {
      const size_t at = u.range.begin + u.displs[k], b = u.counts[k] * sizeof(float);
      comm_.recv(full_m_.data() + at, b, k, 1);
      comm_.recv(full_v_.data() + at, b, k, 2);
    }
  }
}

void DpMoments::release() {
  full_m_.reset();
  full_v_.reset();
}

NamedTensors DpMoments::load_views() {
  if (zero_) full_allocate();
  return views();
}

void DpMoments::scatter() {
  if (!zero_) return;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const GradUnit& u = units_[ui];
    AdamW& adam = optimizer_.adam(int(ui));
    const size_t own = u.range.begin + u.own.begin, bytes = u.own.size() * sizeof(float);
    std::memcpy(adam.m().data(), full_m_.data() + own, bytes);
    std::memcpy(adam.v().data(), full_v_.data() + own, bytes);
  }
  release();
}

}  // namespace agoq

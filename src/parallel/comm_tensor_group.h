// The model's tensor-parallel collectives (model/tensor_group.h) over an MPI communicator of the T shards: in-place
// all-reduces (and sequence parallelism's all-gathers and reduce-scatters), timed, so the step breakdown can show
// how long the layers spent in them.
#pragma once
#include <chrono>
#include <vector>

#include "comm/communicator.h"
#include "model/tensor_group.h"

namespace agoq {

class CommTensorGroup : public TensorGroup {
 public:
  explicit CommTensorGroup(Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void sum(float* x, size_t n) override { reduce(x, n, CommOp::sum); }
  void max(float* x, size_t n) override { reduce(x, n, CommOp::max); }
  void all_gather(const float* part, float* whole, size_t n) override {
    timed([&] { comm_.allgather(part, whole, n * sizeof(float)); });
  }
  void reduce_scatter(const float* whole, float* part, size_t n) override {
    const std::vector<size_t> counts(size_t(comm_.size()), n);
    timed([&] { comm_.reduce_scatter(whole, part, counts.data(), CommDtype::f32, CommOp::sum); });
  }
  // Seconds spent in the collectives since the last call (waiting for the slowest shard included).
  double seconds_take() {
    const double s = seconds_;
    seconds_ = 0;
    return s;
  }

 private:
  void reduce(float* x, size_t n, CommOp op) {
    timed([&] { comm_.allreduce(x, x, n, CommDtype::f32, op); });
  }
  template <class Fn>
  void timed(Fn&& collective) {
    const auto t0 = std::chrono::steady_clock::now();
    collective();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Communicator& comm_;
  double seconds_ = 0;
};

}  // namespace agoq

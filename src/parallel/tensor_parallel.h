// The model's tensor-parallel collectives (model/tensor_group.h) over an MPI communicator of the T shards: in-place
// all-reduces, timed, so the step breakdown can show how long the layers spent in them.
#pragma once
#include <chrono>

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
  // Seconds spent in the collectives since the last call (waiting for the slowest shard included).
  double seconds_take() {
    const double s = seconds_;
    seconds_ = 0;
    return s;
  }

 private:
  void reduce(float* x, size_t n, CommOp op) {
    const auto t0 = std::chrono::steady_clock::now();
    comm_.allreduce(x, x, n, CommDtype::f32, op);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Communicator& comm_;
  double seconds_ = 0;
};

}  // namespace agoq

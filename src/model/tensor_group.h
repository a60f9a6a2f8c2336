// The collectives that join the tensor-parallel shards of a layer (Megatron's layout, docs/parallel.md). The model
// calls them at fixed points of its forward and backward; they are implemented above it, over MPI
// (parallel/comm_tensor_group.h), and handed to the model at construction like its gradient storage. Every rank of
// the group makes the same calls in the same order with the same sizes.
#pragma once
#include <cstddef>

namespace agoq {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // x (n floats) := the sum of every rank's x, in place.
  virtual void sum(float* x, size_t n) = 0;
  // x (n floats) := the elementwise maximum over the ranks, in place.
  virtual void max(float* x, size_t n) = 0;
  // Sequence parallelism's pair. whole (size() * n floats) := every rank's part (n floats) in rank order; part may
  // be whole + rank() * n (in place).
  virtual void all_gather(const float* part, float* whole, size_t n) = 0;
  // part (n floats) := the sum over the ranks of their whole[rank() * n, (rank() + 1) * n); part must not overlap
  // whole.
  virtual void reduce_scatter(const float* whole, float* part, size_t n) = 0;
};

}  // namespace agoq

// The collectives that join the tensor-parallel shards of a layer (Megatron's layout, docs/parallel.md). The model
// calls them at fixed points of its forward and backward; they are implemented above it, over MPI
// (parallel/tensor_parallel.h), and handed to the model at construction like its gradient storage. Every rank of
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
};

}  // namespace agoq

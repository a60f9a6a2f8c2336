// Softmax cross-entropy on the device: one block per row of logits, in three passes over the row as on the CPU
// (max, then exp(z − max) and its sum, then the loss and dloss_scale · (softmax − onehot)), the sum reduced in the
// block's fixed order. A target at or beyond V makes the row's loss NaN (see ops_cuda.h).
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"
#include "opmath/op_math.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

__global__ void crossentropy_kernel(float* logits, float* losses, const int* targets, int V, float dloss_scale) {
  const size_t row = blockIdx.x;
  float* z = logits + row * V;
  const int t = targets[row];
  if (t < 0) {  // ignored row
    for (int v = threadIdx.x; v < V; v += kThreads) z[v] = 0.f;
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, z[v]);
  m = block_max(m);
  const float target_logit = t < V ? z[t] : NAN;
  __syncthreads();  // every thread has read z[t] before it is overwritten
  float sum = 0.f;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    z[v] = op_exp(z[v] - m);
    sum += z[v];
  }
  sum = block_sum(sum);
  const float k = crossentropy_grad_factor(sum, dloss_scale);
  for (int v = threadIdx.x; v < V; v += kThreads) z[v] = z[v] * k - (v == t ? dloss_scale : 0.f);
  if (threadIdx.x == 0) losses[row] = crossentropy_loss(m, sum, target_logit);
}
}  // namespace

void cuda_crossentropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                        float dloss_scale, cudaStream_t s) {
  if (N <= 0) return;
  crossentropy_kernel<<<unsigned(N), kThreads, 0, s>>>(logits_to_dlogits, losses, targets, V, dloss_scale);
  launch_check("crossentropy_kernel");
}

}  // namespace agoq

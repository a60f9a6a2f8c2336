// RoPE on the device: one thread per rotated pair (row, head, i < hd/2), in place.
#include "cuda/kernel_util.cuh"
#include "cuda/ops_cuda.h"
#include "opmath/op_math.h"

namespace agoq {
namespace {
using namespace cuda_kernel;

__global__ void rope_kernel(float* x, const float* cos, const float* sin, size_t pairs, int T, int n_heads, int half,
                            float sign) {
  const size_t p = blockIdx.x * size_t(kThreads) + threadIdx.x;
  if (p >= pairs) return;
  const int i = int(p % half);
  const size_t head = p / half, row = head / n_heads;  // head: the row's head vector, counted over all rows
  const size_t t = row % T;
  float* x1 = x + head * 2 * half;
  const RopePair r = rope_rotate_pair(x1[i], x1[i + half], cos[t * half + i], sign * sin[t * half + i]);
  x1[i] = r.a, x1[i + half] = r.b;
}

void rope_run(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd, float sign,
              cudaStream_t s) {
  AGOQ_CHECK(hd % 2 == 0, "rope: head_dim ", hd, " is odd");
  const size_t pairs = size_t(N) * n_heads * (hd / 2);
  if (pairs == 0) return;
  rope_kernel<<<grid_for(pairs), kThreads, 0, s>>>(x, cos, sin, pairs, T, n_heads, hd / 2, sign);
  launch_check("rope_kernel");
}
}  // namespace

void cuda_rope_forward(float* x, const float* cos, const float* sin, int N, int T, int n_heads, int hd,
                       cudaStream_t s) {
  rope_run(x, cos, sin, N, T, n_heads, hd, 1.0f, s);
}

void cuda_rope_backward(float* dx, const float* cos, const float* sin, int N, int T, int n_heads, int hd,
                        cudaStream_t s) {
  rope_run(dx, cos, sin, N, T, n_heads, hd, -1.0f, s);
}

}  // namespace agoq

// Causal grouped-query attention on the device (document masking included: model/attention.h), exact and simple
// (docs/cuda.md): per block of query rows, the
// scores against the keys they may see are one batched GEMM, an fp32 softmax kernel turns them into probabilities,
// and a second GEMM applies them to the values. The scores of one query block exist at a time (H × Bq × T floats,
// never T × T per head of a layer); backward recomputes them from the saved log-sum-exp, as the CPU's flash kernel
// does. The contract is model/attention.h's: q (B, T, H, hd); k, v (B, T, Hkv, hd); o (B, T, H, hd); lse (B, H, T);
// scale 1/sqrt(hd); dq, dk, dv OVERWRITE (dk, dv summed over the heads of a group).
#pragma once
#include <cuda_runtime.h>

#include "cuda/device_buffer.h"
#include "cuda/matmul_cuda.h"

namespace agoq {

class CudaAttention {
 public:
  // Scratch for one query block (tracked, category workspace): 2 · H · query_block · T floats. Runs on mm's stream.
  CudaAttention(CudaMatmul& mm, int B, int T, int H, int Hkv, int hd, int query_block = 128);
  // doc_start: (B, T) document starts in device memory, or null (model/attention.h's document masking).
  void forward(float* o, float* lse, const float* q, const float* k, const float* v, const int32_t* doc_start);
  void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                const float* o, const float* lse, const int32_t* doc_start);
  size_t scratch_bytes() const { return scores_.bytes() + grads_.bytes(); }

 private:
  // scores_ (H, rows, keys) := scale · q·kᵀ of batch b's query rows [i0, i0 + rows) against keys [0, keys).
  void scores(int b, int i0, int rows, int keys, const float* q, const float* k);
  // out (rows of H heads, ld H·hd) (+)= P · v for the block: out_h = scores_h · v_g.
  void apply_values(int b, int i0, int rows, int keys, const float* v, float* out);

  CudaMatmul& mm_;
  int B_, T_, H_, Hkv_, hd_, bq_;
  cudaStream_t stream_;
  DeviceBuffer<float> scores_, grads_;  // probabilities, and their gradient in backward
};

}  // namespace agoq

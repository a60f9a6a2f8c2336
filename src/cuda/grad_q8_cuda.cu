// INT8 gradient kernels. Geometry: one thread block per gradient block of B values (any B in [1, 65536]); each
// thread owns the values j = threadIdx.x + k * blockDim.x of the block in both passes (so accumulation reads a code
// before the same thread overwrites it). Pass 1 reduces max |y| as integer bits (order-free: exact, and the same
// value the CPU kernels find) and the count of non-finite values; pass 2 encodes with the shared quant_math.h
// functions. Stochastic rounding draws each value's byte from the shared Philox layout.
#include "cuda/grad_q8_cuda.h"

#include <vector>

#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "quant/quant_math.h"

namespace agoq {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Block-wide max of the bits and sum of the non-finite counts; every thread gets the result.
struct BlockStats {
  uint32_t amax_bits;
  unsigned nonfinite;
};
__device__ BlockStats block_stats(uint32_t amax_bits, unsigned nonfinite) {
  __shared__ uint32_t s_max[kThreads / 32];
  __shared__ unsigned s_bad[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    amax_bits = max(amax_bits, __shfl_xor_sync(kFullMask, amax_bits, o));
    nonfinite += __shfl_xor_sync(kFullMask, nonfinite, o);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) s_max[warp] = amax_bits, s_bad[warp] = nonfinite;
  __syncthreads();
  BlockStats r{0, 0};
  for (int w = 0; w < kThreads / 32; ++w) r.amax_bits = max(r.amax_bits, s_max[w]), r.nonfinite += s_bad[w];
  __syncthreads();  // s_* may be reused by the next call
  return r;
}

// Adds the statistics of value y.
__device__ void add_value(float y, uint32_t& amax_bits, unsigned& nonfinite) {
  const uint32_t bits = float_bits(y) & 0x7FFFFFFFu;
  if (bits >= 0x7F800000u) ++nonfinite;
  else amax_bits = max(amax_bits, bits);
}

// Quantize (Acc = false: y = x) or accumulate (Acc = true: y = dequantized code + x) one block per thread block.
template <bool Acc, bool Stoch>
__global__ void blocks_kernel(const float* x, size_t n, int8_t* codes, float* scales, int B, QuantSeed seed,
                              uint64_t index_base, unsigned long long* bad) {
  const size_t b = blockIdx.x, j0 = b * size_t(B), m = n - j0 < size_t(B) ? n - j0 : size_t(B);
  const float old = Acc ? scales[b] : 0.f;
  auto y = [&](size_t j) { return Acc ? grad_q8_decode_add(codes[j0 + j], old, x[j0 + j]) : x[j0 + j]; };
  uint32_t amax_bits = 0;
  unsigned nonfinite = 0;
  for (size_t j = threadIdx.x; j < m; j += kThreads) add_value(y(j), amax_bits, nonfinite);
  const BlockStats st = block_stats(amax_bits, nonfinite);
  if (st.nonfinite) {  // as the CPU: zero codes, NaN scale, counted
    for (size_t j = threadIdx.x; j < m; j += kThreads) codes[j0 + j] = 0;
    if (threadIdx.x == 0) scales[b] = NAN, atomicAdd(bad, (unsigned long long)st.nonfinite);
    return;
  }
  const GradQ8BlockParams p = grad_q8_block_params(bits_float(st.amax_bits));
  for (size_t j = threadIdx.x; j < m; j += kThreads) {
    const float v = y(j);
    codes[j0 + j] = Stoch ? grad_q8_code_stochastic(v, p, quant_random_byte_at(seed, index_base + j0 + j))
                          : grad_q8_code_nearest(v, p);
  }
  if (threadIdx.x == 0) scales[b] = p.scale;
}

template <bool Add>
__global__ void dequantize_kernel(const int8_t* codes, const float* scales, size_t n, int B, float* out) {
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  const float s = scales[j / size_t(B)];
  out[j] = Add ? grad_q8_decode_add(codes[j], s, out[j]) : grad_q8_decode(codes[j], s);
}

// The reduce step: y = the nsrc sources' dequantized values summed in source order (then / divisor), to out_f32
// and/or requantized (nearest) into out_codes/out_scales.
__global__ void sum_requantize_kernel(const int8_t* const* codes, const float* const* scales, int nsrc, size_t n, int B,
                                      float divisor, float* out_f32, int8_t* out_codes, float* out_scales,
                                      unsigned long long* bad) {
  const size_t b = blockIdx.x, j0 = b * size_t(B), m = n - j0 < size_t(B) ? n - j0 : size_t(B);
  auto y = [&](size_t j) {
    float v = grad_q8_decode(codes[0][j0 + j], scales[0][b]);
    for (int r = 1; r < nsrc; ++r) v = grad_q8_decode_add(codes[r][j0 + j], scales[r][b], v);
    return grad_q8_sum_finish(v, divisor);
  };
  uint32_t amax_bits = 0;
  unsigned nonfinite = 0;
  for (size_t j = threadIdx.x; j < m; j += kThreads) {
    const float v = y(j);
    if (out_f32) out_f32[j0 + j] = v;
    add_value(v, amax_bits, nonfinite);
  }
  if (!out_codes) return;
  const BlockStats st = block_stats(amax_bits, nonfinite);
  if (st.nonfinite) {
    for (size_t j = threadIdx.x; j < m; j += kThreads) out_codes[j0 + j] = 0;
    if (threadIdx.x == 0) out_scales[b] = NAN, atomicAdd(bad, (unsigned long long)st.nonfinite);
    return;
  }
  const GradQ8BlockParams p = grad_q8_block_params(bits_float(st.amax_bits));
  for (size_t j = threadIdx.x; j < m; j += kThreads) out_codes[j0 + j] = grad_q8_code_nearest(y(j), p);
  if (threadIdx.x == 0) out_scales[b] = p.scale;
}

void check_block(int block) {
  AGOQ_CHECK(block >= 1 && block <= 65536, "grad_q8: block must be in [1, 65536], got ", block);
}

unsigned grid_blocks(size_t n, size_t per) {
  const size_t g = (n + per - 1) / per;
  AGOQ_CHECK(g <= 0x7FFFFFFFu, "CUDA grad_q8: too many blocks for one launch (", g, ")");
  return unsigned(g);
}

// The count of non-finite values of the calls on this process's one stream (tracked, allocated once).
unsigned long long* bad_counter() {
  static DeviceBuffer<unsigned long long> counter(1, MemCategory::workspace, "cuda.grad_q8_status");
  return counter.data();
}

size_t read_bad(unsigned long long* bad, cudaStream_t s) {
  AGOQ_CUDA_CHECK(cudaGetLastError());
  unsigned long long host = 0;
  AGOQ_CUDA_CHECK(cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, s));
  AGOQ_CUDA_CHECK(cudaStreamSynchronize(s));
  return size_t(host);
}

template <bool Acc>
size_t run_blocks(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o, cudaStream_t s) {
  check_block(o.block);
  if (n == 0) return 0;
  unsigned long long* bad = bad_counter();
  AGOQ_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
  const unsigned grid = grid_blocks(n, size_t(o.block));
  if (o.rounding == QuantRounding::stochastic)
    blocks_kernel<Acc, true><<<grid, kThreads, 0, s>>>(x, n, codes, scales, o.block, o.seed, o.index_base, bad);
  else blocks_kernel<Acc, false><<<grid, kThreads, 0, s>>>(x, n, codes, scales, o.block, o.seed, o.index_base, bad);
  return read_bad(bad, s);
}

template <bool Add>
void run_dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block, cudaStream_t s) {
  check_block(block);
  if (n == 0) return;
  dequantize_kernel<Add><<<grid_blocks(n, kThreads), kThreads, 0, s>>>(codes, scales, n, block, out);
  AGOQ_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t cuda_grad_q8_quantize(const float* x, size_t n, int8_t* codes, float* scales, const GradQ8Options& o,
                             cudaStream_t s) {
  return run_blocks<false>(x, n, codes, scales, o, s);
}

size_t cuda_grad_q8_accumulate(int8_t* codes, float* scales, const float* g, size_t n, const GradQ8Options& o,
                               cudaStream_t s) {
  return run_blocks<true>(g, n, codes, scales, o, s);
}

void cuda_grad_q8_dequantize(const int8_t* codes, const float* scales, size_t n, float* out, int block,
                             cudaStream_t s) {
  run_dequantize<false>(codes, scales, n, out, block, s);
}

void cuda_grad_q8_dequantize_add(const int8_t* codes, const float* scales, size_t n, float* out, int block,
                                 cudaStream_t s) {
  run_dequantize<true>(codes, scales, n, out, block, s);
}

size_t cuda_grad_q8_sum_requantize(const int8_t* const* codes, const float* const* scales, int nsrc, size_t n,
                                   float divisor, float* out_f32, int8_t* out_codes, float* out_scales, int block,
                                   cudaStream_t s) {
  check_block(block);
  AGOQ_CHECK(nsrc >= 1, "grad_q8_sum_requantize: needs at least one source");
  if (n == 0) return 0;
  // The source pointer tables: nsrc code pointers, then nsrc scale pointers.
  DeviceBuffer<const void*> table(2 * size_t(nsrc), MemCategory::workspace, "cuda.grad_q8_sources");
  std::vector<const void*> host(2 * size_t(nsrc));
  for (int r = 0; r < nsrc; ++r) host[r] = codes[r], host[nsrc + r] = scales[r];
  table.upload(host.data(), host.size());
  unsigned long long* bad = bad_counter();
  AGOQ_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
  sum_requantize_kernel<<<grid_blocks(n, size_t(block)), kThreads, 0, s>>>(
      reinterpret_cast<const int8_t* const*>(table.data()), reinterpret_cast<const float* const*>(table.data() + nsrc),
      nsrc, n, block, divisor, out_f32, out_codes, out_scales, bad);
  return read_bad(bad, s);
}

}  // namespace agoq

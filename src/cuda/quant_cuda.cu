// Activation quantization kernels. Geometry: one thread per *unit* of 8 consecutive values of a row, whose b-bit
// codes fill exactly b bytes, so no two threads write the same byte. A group of G values is G/8 adjacent lanes of
// one warp (rows are padded to a whole number of warps, so groups never straddle rows or warps); its min/max come
// from warp shuffles (order-free, hence exact), then every lane derives the same scale with the shared
// quant_group_params and encodes its 8 values with the shared quant_code_* functions.
#include "cuda/quant_cuda.h"

#include "core/error.h"
#include "cuda/cuda_check.h"
#include "quant/quant_math.h"

namespace agoq {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

struct StatusCounters {
  unsigned long long nonfinite, overflow_groups;
};

// Units of a row, rounded up to whole warps.
size_t padded_units(size_t cols) { return ((cols + 7) / 8 + 31) / 32 * 32; }

unsigned grid_for(size_t threads) {
  const size_t blocks = (threads + kThreads - 1) / kThreads;
  AGOQ_CHECK(blocks <= 0x7FFFFFFFu, "CUDA quantizer: tensor too large for one launch (", threads, " threads)");
  return unsigned(blocks);
}

// Element i's random byte, reusing the Philox word of the previous element when they share it (4 consecutive
// elements do), so 8 values cost 2 or 3 generator calls, not 8.
struct RandomWord {
  const QuantSeed& seed;
  uint64_t word_index = ~uint64_t(0);
  uint32_t word = 0;
  __device__ uint8_t byte(uint64_t i) {
    if (i >> 2 != word_index) word_index = i >> 2, word = quant_random_word_at(seed, i);
    return uint8_t(word >> (8 * (i & 3)));
  }
};

template <int B, bool Stoch>
__global__ void encode_int_kernel(const float* src, size_t row_count, size_t cols, size_t units, int G, bool sym,
                                  QuantView base, size_t row_begin, QuantSeed seed, StatusCounters* status) {
  const size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t i = id / units, u = id % units, c0 = u * 8;
  const int m = i < row_count && c0 < cols ? int(cols - c0 < 8 ? cols - c0 : 8) : 0;
  float v[8];
  float lo = INFINITY, hi = -INFINITY;
  unsigned nonfinite = 0;
  for (int k = 0; k < m; ++k) {
    v[k] = src[i * cols + c0 + k];
    nonfinite += !float_is_finite(v[k]);
    lo = fminf(lo, v[k]), hi = fmaxf(hi, v[k]);
  }
  // The group's statistics over its G/8 lanes (every lane of the warp takes part; idle lanes are neutral).
  const int lanes = G / 8;
  for (int o = lanes / 2; o > 0; o /= 2) {
    lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, o));
    nonfinite += __shfl_xor_sync(kFullMask, nonfinite, o);
  }
  const size_t g = u / size_t(lanes);
  if (m == 0 && !(i < row_count && g * size_t(G) < cols)) return;  // no value of this lane's group exists
  QuantGroupParams p{};
  const bool ok = nonfinite == 0 && quant_group_params(B, sym, lo + 0.f, hi + 0.f, p);
  const size_t r = row_begin + i, groups = (cols + size_t(G) - 1) / size_t(G);
  uint64_t w = 0;  // the unit's codes, code k at bits [k B, (k + 1) B); all zero for a group that cannot be stored
  if (ok) {
    const float qmax = float((1 << B) - 1);
    RandomWord rnd{seed};
    for (int k = 0; k < m; ++k) {
      const uint8_t q =
          Stoch ? quant_code_stochastic(v[k], p, qmax, rnd.byte(r * cols + c0 + k)) : quant_code_nearest(v[k], p, qmax);
      w |= uint64_t(q) << (k * B);
    }
  }
  uint8_t* codes = base.codes + r * ((cols * B + 7) / 8) + c0 / 8 * B;
  for (int k = 0; k < (m * B + 7) / 8; ++k) codes[k] = uint8_t(w >> (8 * k));
  if (u % size_t(lanes) != 0) return;  // the group's first lane writes its scale (and min) and counts
  base.scales[r * groups + g] = ok ? p.h : uint16_t(0x7E00);
  if (!sym) base.mins[r * groups + g] = ok ? p.offset : NAN;
  if (!ok) {
    atomicAdd(&status->nonfinite, (unsigned long long)nonfinite);
    if (nonfinite == 0) atomicAdd(&status->overflow_groups, 1ull);
  }
}

template <int B>
__global__ void decode_int_kernel(QuantConstView base, size_t row_begin, size_t row_count, size_t cols, size_t units,
                                  int G, bool sym, float* out) {
  const size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t i = id / units, u = id % units, c0 = u * 8;
  if (i >= row_count || c0 >= cols) return;
  const int m = int(cols - c0 < 8 ? cols - c0 : 8);
  const size_t r = row_begin + i, groups = (cols + size_t(G) - 1) / size_t(G), g = c0 / size_t(G);
  const uint8_t* codes = base.codes + r * ((cols * B + 7) / 8) + c0 / 8 * B;
  uint64_t w = 0;
  for (int k = 0; k < (m * B + 7) / 8; ++k) w |= uint64_t(codes[k]) << (8 * k);
  const float scale = f16_to_f32(base.scales[r * groups + g]);
  const float offset = quant_int_offset(B, sym, scale, sym ? 0.f : base.mins[r * groups + g]);
  for (int k = 0; k < m; ++k)
    out[i * cols + c0 + k] = quant_code_decode(uint32_t(w >> (k * B)) & ((1u << B) - 1), scale, offset);
}

// Keep formats, one value per thread; non-finite inputs are counted once per warp.
template <bool Bf16>
__global__ void encode_keep_kernel(const float* src, size_t n, uint8_t* dst, StatusCounters* status) {
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const float x = j < n ? src[j] : 0.f;
  if (j < n) {
    if (Bf16) reinterpret_cast<uint16_t*>(dst)[j] = f32_to_bf16(x);
    else reinterpret_cast<float*>(dst)[j] = x;
  }
  const unsigned bad = __popc(__ballot_sync(kFullMask, !float_is_finite(x)));
  if (bad && threadIdx.x % 32 == 0) atomicAdd(&status->nonfinite, (unsigned long long)bad);
}

__global__ void bf16_to_f32_kernel(const uint16_t* x, size_t n, float* out) {
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (j < n) out[j] = bf16_to_f32(x[j]);
}

__global__ void f32_to_bf16_kernel(const float* x, size_t n, uint16_t* out) {
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (j < n) out[j] = f32_to_bf16(x[j]);
}

// The status counters of the calls on this process's one stream (tracked, allocated once).
StatusCounters* status_counters() {
  static DeviceBuffer<StatusCounters> counters(1, MemCategory::workspace, "cuda.quant_status");
  return counters.data();
}

template <int B>
void launch_encode_int(const QuantFormat& f, const float* src, size_t row_begin, size_t row_count, size_t cols,
                       const QuantView& base, const QuantSeed& seed, StatusCounters* st, cudaStream_t s) {
  const size_t units = padded_units(cols);
  const unsigned grid = grid_for(units * row_count);
  if (f.rounding == QuantRounding::stochastic)
    encode_int_kernel<B, true>
        <<<grid, kThreads, 0, s>>>(src, row_count, cols, units, f.group, f.symmetric, base, row_begin, seed, st);
  else
    encode_int_kernel<B, false>
        <<<grid, kThreads, 0, s>>>(src, row_count, cols, units, f.group, f.symmetric, base, row_begin, seed, st);
}

template <int B>
void launch_decode_int(const QuantFormat& f, const QuantConstView& base, size_t row_begin, size_t row_count,
                       size_t cols, float* out, cudaStream_t s) {
  const size_t units = padded_units(cols);
  decode_int_kernel<B><<<grid_for(units * row_count), kThreads, 0, s>>>(base, row_begin, row_count, cols, units,
                                                                        f.group, f.symmetric, out);
}

}  // namespace

namespace {
void launch_encode(const QuantFormat& f, const float* src, size_t row_begin, size_t row_count, size_t cols,
                   const QuantView& base, const QuantSeed& seed, StatusCounters* st, cudaStream_t s) {
  if (f.kind == QuantKind::int_group) {
    switch (f.bits) {
      case 2: launch_encode_int<2>(f, src, row_begin, row_count, cols, base, seed, st, s); break;
      case 3: launch_encode_int<3>(f, src, row_begin, row_count, cols, base, seed, st, s); break;
      case 4: launch_encode_int<4>(f, src, row_begin, row_count, cols, base, seed, st, s); break;
      case 8: launch_encode_int<8>(f, src, row_begin, row_count, cols, base, seed, st, s); break;
    }
  } else {  // keep formats: rows are contiguous, so the rows are one run of values
    const size_t n = row_count * cols, width = f.kind == QuantKind::bf16 ? 2 : 4;
    uint8_t* dst = base.codes + row_begin * cols * width;
    if (f.kind == QuantKind::bf16) encode_keep_kernel<true><<<grid_for(n), kThreads, 0, s>>>(src, n, dst, st);
    else encode_keep_kernel<false><<<grid_for(n), kThreads, 0, s>>>(src, n, dst, st);
  }
  AGOQ_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

QuantStatus cuda_quant_encode_rows(const QuantFormat& f, const float* src, size_t row_begin, size_t row_count,
                                   size_t cols, const QuantView& base, const QuantSeed& seed, cudaStream_t s) {
  quant_format_check(f);
  if (row_count == 0 || cols == 0) return {};
  StatusCounters* st = status_counters();
  AGOQ_CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof(StatusCounters), s));
  launch_encode(f, src, row_begin, row_count, cols, base, seed, st, s);
  StatusCounters host{};
  AGOQ_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof host, cudaMemcpyDeviceToHost, s));
  AGOQ_CUDA_CHECK(cudaStreamSynchronize(s));
  return {size_t(host.nonfinite), size_t(host.overflow_groups)};
}

void cuda_quant_encode_rows_async(const QuantFormat& f, const float* src, size_t row_begin, size_t row_count,
                                  size_t cols, const QuantView& base, const QuantSeed& seed, cudaStream_t s) {
  quant_format_check(f);
  if (row_count == 0 || cols == 0) return;
  launch_encode(f, src, row_begin, row_count, cols, base, seed, status_counters(), s);  // counts nobody reads
}

void cuda_quant_decode_rows(const QuantFormat& f, const QuantConstView& base, size_t row_begin, size_t row_count,
                            size_t cols, float* out, cudaStream_t s) {
  quant_format_check(f);
  if (row_count == 0 || cols == 0) return;
  const size_t n = row_count * cols;
  switch (f.kind) {
    case QuantKind::fp32:
      AGOQ_CUDA_CHECK(cudaMemcpyAsync(out, base.codes + row_begin * cols * 4, n * 4, cudaMemcpyDeviceToDevice, s));
      return;
    case QuantKind::bf16:
      bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(
          reinterpret_cast<const uint16_t*>(base.codes) + row_begin * cols, n, out);
      break;
    case QuantKind::int_group:
      switch (f.bits) {
        case 2: launch_decode_int<2>(f, base, row_begin, row_count, cols, out, s); break;
        case 3: launch_decode_int<3>(f, base, row_begin, row_count, cols, out, s); break;
        case 4: launch_decode_int<4>(f, base, row_begin, row_count, cols, out, s); break;
        case 8: launch_decode_int<8>(f, base, row_begin, row_count, cols, out, s); break;
      }
      break;
  }
  AGOQ_CUDA_CHECK(cudaGetLastError());
}

void cuda_f32_to_bf16(const float* x, size_t n, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, out);
  AGOQ_CUDA_CHECK(cudaGetLastError());
}

void cuda_bf16_to_f32(const uint16_t* x, size_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, out);
  AGOQ_CUDA_CHECK(cudaGetLastError());
}

}  // namespace agoq

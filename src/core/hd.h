// Functions shared by the CPU kernels and the CUDA kernels are written once, marked AGOQ_HD: __host__ __device__
// under nvcc, plain inline under g++. They use only what both sides have: fixed-width integers, the C math
// functions that are correctly rounded on both (fmaf, rintf, fabsf, ceilf, IEEE division and sqrt) and the bit
// casts below -- no std:: containers, no exceptions.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define AGOQ_HD __host__ __device__ __forceinline__
#else
#define AGOQ_HD inline
#endif

namespace agoq {

AGOQ_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

AGOQ_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// NaN and finiteness from the bits, so fast-math flags on either compiler cannot fold the checks away.
AGOQ_HD bool float_is_nan(float x) { return (float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
AGOQ_HD bool float_is_finite(float x) { return (float_bits(x) & 0x7FFFFFFFu) < 0x7F800000u; }

}  // namespace agoq

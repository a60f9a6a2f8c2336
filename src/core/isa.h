// The instruction set the kernels are built for. AGOQ_AVX2 is 1 when the compiler targets AVX2 with FMA and F16C
// (CMake's AGOQ_ARCH_FLAGS), else 0 and every kernel takes its portable path, which gives the same bits.
// <immintrin.h> is not included here, nor in any public header: only .cpp files and the private *_simd.h /
// *_avx2.h headers they include use intrinsics (a CUDA build includes the public headers).
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AGOQ_AVX2 1
#else
#define AGOQ_AVX2 0
#endif

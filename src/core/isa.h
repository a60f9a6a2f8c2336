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

// AVX-512 (F, BW, VL, DQ) kernels are compiled inside AGOQ_AVX512_BEGIN ...
// AGOQ_AVX512_END (GCC's target pragma, which lambdas inside inherit, unlike a function attribute) and chosen at run
// time where the CPU has them: the binary as a whole stays AVX2, so it runs on an AVX2-only CPU. Other compilers build
// the AVX2 kernels only.
#if AGOQ_AVX2 && defined(__GNUC__) && !defined(__clang__)
#define AGOQ_AVX512 1
#define AGOQ_AVX512_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq\")")
#define AGOQ_AVX512_END _Pragma("GCC pop_options")
#else
#define AGOQ_AVX512 0
#define AGOQ_AVX512_BEGIN
#define AGOQ_AVX512_END
#endif

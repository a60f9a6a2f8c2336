// The quantization kernel variants a test runs (quant/simd.h): scalar, AVX2 and, where the CPU has it, AVX-512; on a
// CPU without AVX-512 its runs are skipped with a message.
#pragma once
#include <cstdio>
#include <ostream>
#include <vector>

#include "quant/simd.h"

namespace agoq {

enum class QuantKernels { avx512, avx2, scalar };

inline const char* quant_kernels_name(QuantKernels k) {
  return k == QuantKernels::avx512 ? "Avx512" : k == QuantKernels::avx2 ? "Avx2" : "Scalar";
}
inline std::ostream& operator<<(std::ostream& os, QuantKernels k) { return os << quant_kernels_name(k); }

// Whether this build and CPU can run k (prints why not, once per process, when it cannot run AVX-512).
inline bool quant_kernels_available(QuantKernels k) {
  if (k == QuantKernels::avx512 && !quant_cpu_has_avx512()) {
    static const bool said =
        (std::printf("[ SKIP     ] AVX-512 quantization kernels: not on this CPU or build\n"), true);
    return !said;
  }
  return k == QuantKernels::scalar || AGOQ_AVX2;
}

// The variants to run here: the SIMD ones first, the scalar twin last.
inline std::vector<QuantKernels> quant_kernels_here() {
  std::vector<QuantKernels> v;
  for (QuantKernels k : {QuantKernels::avx512, QuantKernels::avx2, QuantKernels::scalar})
    if (quant_kernels_available(k)) v.push_back(k);
  return v;
}
// The SIMD variants only (what a test compares with the scalar twin).
inline std::vector<QuantKernels> quant_simd_kernels_here() {
  std::vector<QuantKernels> v = quant_kernels_here();
  v.pop_back();
  return v;
}

inline void quant_use_kernels(QuantKernels k) {
  quant_set_simd(k != QuantKernels::scalar);
  quant_set_avx512(k == QuantKernels::avx512);
}
// Back to the process default: the best the CPU has.
inline void quant_use_default_kernels() { quant_use_kernels(QuantKernels::avx512); }

}  // namespace agoq

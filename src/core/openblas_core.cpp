#include "core/openblas_core.h"

#include <algorithm>
#include <array>
#include <string_view>

// Weak: the modules that multiply in fp32 link OpenBLAS; a binary without it (the GPU-only build) sees nullptr.
extern "C" char* openblas_get_corename(void) __attribute__((weak));

namespace agoq {

std::string openblas_core_name() { return openblas_get_corename ? std::string(openblas_get_corename()) : ""; }

bool openblas_core_has_avx2(const std::string& core) {
  // OpenBLAS 0.3.21's x86-64 kernel sets with AVX2 and FMA (its others are SSE or AVX only).
  constexpr std::array<std::string_view, 6> kAvx2Cores = {"Haswell",        "Zen",      "SkylakeX", "Cooperlake",
                                                          "SapphireRapids", "Excavator"};
  return std::find(kAvx2Cores.begin(), kAvx2Cores.end(), core) != kAvx2Cores.end();
}

const char* openblas_core_better() {
#if defined(__x86_64__)
  const std::string core = openblas_core_name();
  if (core.empty() || openblas_core_has_avx2(core)) return nullptr;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return nullptr;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return avx512 ? "SkylakeX" : "Haswell";
#else
  return nullptr;
#endif
}

}  // namespace agoq

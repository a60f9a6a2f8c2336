// OpenBLAS (Debian's is built DYNAMIC_ARCH) picks its kernels for the CPU when the library loads, and takes a CPU
// newer than it knows for a Prescott: Debian 12's 0.3.21 runs sgemm at 47 GFLOP/s instead of 291 on an Emerald
// Rapids Xeon (docs/dependencies.md). Its only switch is the environment variable OPENBLAS_CORETYPE, read at load, so
// agoq sets it and starts itself again (cli/main.cpp) where OpenBLAS's pick is below what the CPU runs.
#pragma once
#include <string>

namespace agoq {

// The kernels OpenBLAS runs ("SkylakeX", "Zen", ...); "" where this binary has no OpenBLAS (the GPU-only build).
std::string openblas_core_name();

// Whether OpenBLAS's kernels named `core` use AVX2 and FMA.
bool openblas_core_has_avx2(const std::string& core);

// The OPENBLAS_CORETYPE this CPU should run when OpenBLAS picked kernels without AVX2 on a CPU with AVX2 and FMA
// ("SkylakeX" with AVX-512 F/BW/DQ/VL, else "Haswell"); nullptr when its pick is fine or there is no OpenBLAS.
const char* openblas_core_better();

}  // namespace agoq

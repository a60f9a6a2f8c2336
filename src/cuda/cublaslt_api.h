// cuBLASLt, loaded when the first GEMM needs it (dlopen), not when agoq starts: the library is half a gigabyte,
// and merely loading it costs a process ~210 MB of resident memory, which every CPU-only run of agoq would pay
// (agoq bench capacity measures exactly that). The entries are the library's own functions, typed from
// <cublasLt.h>.
#pragma once
#include <cublasLt.h>

namespace agoq {

struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetStatusName) status_name;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
};

// The loaded library (libcublasLt.so.<major> of the toolkit built against, found on the loader's path); throws
// one line naming the library and dlerror's reason when it cannot be loaded.
const CublasLtApi& cublaslt();

}  // namespace agoq

#include "cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace agoq {
namespace {

#define AGOQ_STR2(x) #x
#define AGOQ_STR(x) AGOQ_STR2(x)
constexpr const char* kLibrary = "libcublasLt.so." AGOQ_STR(CUBLAS_VER_MAJOR);

template <class Fn>
void resolve(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  AGOQ_CHECK(fn, "cuBLASLt: ", kLibrary, " has no ", name);
}

CublasLtApi load() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);  // kept for the life of the process
  AGOQ_CHECK(lib, "cuBLASLt: cannot load ", kLibrary, ": ", dlerror());
  CublasLtApi a{};
  resolve(lib, a.create, "cublasLtCreate");
  resolve(lib, a.destroy, "cublasLtDestroy");
  resolve(lib, a.status_name, "cublasLtGetStatusName");
  resolve(lib, a.status_string, "cublasLtGetStatusString");
  resolve(lib, a.matmul, "cublasLtMatmul");
  resolve(lib, a.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(lib, a.desc_create, "cublasLtMatmulDescCreate");
  resolve(lib, a.desc_destroy, "cublasLtMatmulDescDestroy");
  resolve(lib, a.desc_set, "cublasLtMatmulDescSetAttribute");
  resolve(lib, a.pref_create, "cublasLtMatmulPreferenceCreate");
  resolve(lib, a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  resolve(lib, a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  resolve(lib, a.layout_create, "cublasLtMatrixLayoutCreate");
  resolve(lib, a.layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolve(lib, a.layout_set, "cublasLtMatrixLayoutSetAttribute");
  return a;
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = load();  // thread-safe once; a failed load throws again at the next call
  return api;
}

}  // namespace agoq

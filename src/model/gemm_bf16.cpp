#include "model/gemm_bf16.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/openblas_core.h"
#include "model/backend.h"
#include "model/tile_bf16.h"
#if AGOQ_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace agoq {

void f32_to_bf16_rows(uint16_t* y, const float* x, size_t n) {
  constexpr size_t kChunk = size_t(1) << 16;  // values per task: large calls split over the threads
  const long chunks = long((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i = size_t(c) * kChunk;
    const int len = int(std::min(kChunk, n - i));
    tile_bf16_pack_rows(y + i, 1, len, x + i, len, 1, len);  // AVX-512 where the CPU has BF16 (no count of NaNs)
  }
}

ComputeChoice model_compute_choose(ComputeMode mode, bool gpu) {
  if (gpu) {
    const bool bf16 = mode != ComputeMode::fp32;
    return {bf16 ? GemmPrecision::bf16 : GemmPrecision::fp32,
            std::string(bf16 ? "bf16" : "fp32") + (mode == ComputeMode::automatic ? ": the GPU's default" : ": asked")};
  }
  std::string isa;
  const bool native = gemm_bf16_supported(&isa);
  AGOQ_CHECK(mode != ComputeMode::bf16 || native, "--compute bf16: this CPU has no native bf16 products (", isa,
             "); use --compute fp32 or auto");
  const std::string blas = "; OpenBLAS's " + openblas_core_name() + " kernels";  // fp32's GEMMs (core/openblas_core.h)
  if (mode == ComputeMode::fp32) return {GemmPrecision::fp32, "fp32: asked (" + isa + ")" + blas};
  const std::string why = mode == ComputeMode::bf16 ? "asked" : "auto";
  return native ? ComputeChoice{GemmPrecision::bf16, "bf16: " + why + ", this CPU has " + isa}
                : ComputeChoice{GemmPrecision::fp32, "fp32: auto, this CPU has " + isa + blas};
}

#if AGOQ_HAVE_DNNL
namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "AMX-BF16";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX512-BF16";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX512-VNNI, no BF16";
    case dnnl::cpu_isa::avx512_core: return "AVX-512, no BF16";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2-VNNI, no BF16";
    case dnnl::cpu_isa::avx2: return "AVX2, no BF16";
    default: return "no AVX512-BF16 or AMX-BF16";
  }
}

}  // namespace

bool gemm_bf16_supported(std::string* why) {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (why) *why = isa_name(isa);
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// A product's shape, operand layouts and epilogue: the primitive made for it.
enum class Epilogue { none, accumulate, swish, times_to_bf16 };
using GemmKey = std::tuple<int, int, int, bool, int, bool, int, int, Epilogue>;

struct GemmBf16::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<GemmKey, dnnl::matmul> primitives;

  // C = A · B with epilogue e: C fp32 (bf16 for times_to_bf16, which multiplies by `factor`, M x N fp32 dense).
  void run(int M, int N, int K, const GemmOperand& A, const GemmOperand& B, void* C, int ldc, Epilogue e,
           const float* factor = nullptr);
};

namespace {
using dnnl::memory;
// Row-major strides of the product's view: a transposed operand is read down its columns.
memory::desc operand_desc(int rows, int cols, const GemmOperand& o) {
  const memory::dims strides = o.trans ? memory::dims{1, o.ld} : memory::dims{o.ld, 1};
  return memory::desc({rows, cols}, memory::data_type::bf16, strides);
}
dnnl::primitive_attr epilogue_attr(Epilogue e, const memory::desc& factor) {
  dnnl::post_ops ops;
  if (e == Epilogue::accumulate) ops.append_sum(1.0f);  // C += A·B: the sum post-op adds what C holds
  if (e == Epilogue::swish) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);  // x·σ(x)
  if (e == Epilogue::times_to_bf16) ops.append_binary(dnnl::algorithm::binary_mul, factor);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}
}  // namespace

void GemmBf16::State::run(int M, int N, int K, const GemmOperand& A, const GemmOperand& B, void* C, int ldc, Epilogue e,
                          const float* factor) {
  const memory::desc a = operand_desc(M, K, A), b = operand_desc(K, N, B);
  const memory::desc c({M, N}, e == Epilogue::times_to_bf16 ? memory::data_type::bf16 : memory::data_type::f32,
                       memory::dims{ldc, 1});
  const memory::desc f({M, N}, memory::data_type::f32, memory::dims{N, 1});
  const GemmKey key{M, N, K, A.trans, A.ld, B.trans, B.ld, ldc, e};
  auto it = primitives.find(key);
  if (it == primitives.end()) {
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), epilogue_attr(e, f), engine);
      it = primitives.emplace(key, dnnl::matmul(pd)).first;
    } catch (const dnnl::error& err) {
      fail("bf16 matmul ", M, "x", K, " by ", K, "x", N, ": oneDNN has no kernel for it here (", err.what(),
           "); run with --compute fp32");
    }
  }
  memory am(a, engine, const_cast<uint16_t*>(A.data)), bm(b, engine, const_cast<uint16_t*>(B.data)), cm(c, engine, C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (factor)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(f, engine, const_cast<float*>(factor)));
  it->second.execute(stream, args);
  stream.wait();
}

GemmBf16::GemmBf16() : s_(std::make_unique<State>()) {}
GemmBf16::~GemmBf16() = default;

void GemmBf16::multiply(int M, int N, int K, GemmOperand A, GemmOperand B, float* C, int ldc, bool accumulate) {
  s_->run(M, N, K, A, B, C, ldc, accumulate ? Epilogue::accumulate : Epilogue::none);
}

void GemmBf16::multiply_swiglu(int M, int N, int K, GemmOperand A, GemmOperand B_gate, GemmOperand B_up, float* gate,
                               uint16_t* S) {
  s_->run(M, N, K, A, B_gate, gate, N, Epilogue::swish);
  s_->run(M, N, K, A, B_up, S, N, Epilogue::times_to_bf16, gate);
}

#else  // a build without oneDNN (the GPU-only one): fp32 products only

bool gemm_bf16_supported(std::string* why) {
  if (why) *why = "this agoq was built without oneDNN";
  return false;
}
struct GemmBf16::State {};
GemmBf16::GemmBf16() = default;
GemmBf16::~GemmBf16() = default;
void GemmBf16::multiply(int, int, int, GemmOperand, GemmOperand, float*, int, bool) {
  fail("bf16 matmul: this agoq was built without oneDNN; run with --compute fp32");
}
void GemmBf16::multiply_swiglu(int, int, int, GemmOperand, GemmOperand, GemmOperand, float*, uint16_t*) {
  fail("bf16 matmul: this agoq was built without oneDNN; run with --compute fp32");
}

#endif

}  // namespace agoq

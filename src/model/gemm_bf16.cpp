#include "model/gemm_bf16.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"
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
  if (mode == ComputeMode::fp32) return {GemmPrecision::fp32, "fp32: asked (" + isa + ")"};
  const std::string why = mode == ComputeMode::bf16 ? "asked" : "auto";
  return native ? ComputeChoice{GemmPrecision::bf16, "bf16: " + why + ", this CPU has " + isa}
                : ComputeChoice{GemmPrecision::fp32, "fp32: auto, this CPU has " + isa};
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

// A product's shape and operand layouts: the primitive made for it.
using GemmKey = std::tuple<int, int, int, bool, int, bool, int, int, bool>;

struct GemmBf16::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<GemmKey, dnnl::matmul> primitives;
};

GemmBf16::GemmBf16() : s_(std::make_unique<State>()) {}
GemmBf16::~GemmBf16() = default;

void GemmBf16::multiply(int M, int N, int K, GemmOperand A, GemmOperand B, float* C, int ldc, bool accumulate) {
  using dnnl::memory;
  // Row-major strides of the product's view: a transposed operand is read down its columns.
  auto desc = [](int rows, int cols, const GemmOperand& o, memory::data_type t) {
    const memory::dims strides = o.trans ? memory::dims{1, o.ld} : memory::dims{o.ld, 1};
    return memory::desc({rows, cols}, t, strides);
  };
  const memory::desc a = desc(M, K, A, memory::data_type::bf16), b = desc(K, N, B, memory::data_type::bf16);
  const memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  const GemmKey key{M, N, K, A.trans, A.ld, B.trans, B.ld, ldc, accumulate};
  auto it = s_->primitives.find(key);
  if (it == s_->primitives.end()) {
    dnnl::primitive_attr attr;
    if (accumulate) {  // C += A·B: oneDNN's sum post-op adds the product to what C holds
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, s_->engine);
      it = s_->primitives.emplace(key, dnnl::matmul(pd)).first;
    } catch (const dnnl::error& e) {
      fail("bf16 matmul ", M, "x", K, " by ", K, "x", N, ": oneDNN has no kernel for it here (", e.what(),
           "); run with --compute fp32");
    }
  }
  memory am(a, s_->engine, const_cast<uint16_t*>(A.data)), bm(b, s_->engine, const_cast<uint16_t*>(B.data));
  memory cm(c, s_->engine, C);
  it->second.execute(s_->stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  s_->stream.wait();
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

#endif

}  // namespace agoq

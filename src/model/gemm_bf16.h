// bf16 matrix products on the CPU, through oneDNN (what PyTorch uses on CPUs; docs/dependencies.md): inputs rounded
// to bf16 (nearest even), products accumulated in fp32, fp32 outputs. oneDNN picks the kernel for the CPU it runs
// on (AMX-BF16, AVX512-BF16); gemm_bf16_supported() says whether that CPU has one, honouring the library's own ISA
// cap (ONEDNN_MAX_CPU_ISA=AVX2 makes a BF16 machine take the fp32 path, which the tests use).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/enum_names.h"

namespace agoq {

// The matrix products' inputs (`--compute`): fp32, or bf16 copies with fp32 accumulation (Megatron's mixed
// precision), on the CPU (model_backend_cpu_bf16; attention's tile products too) and the GPU
// (cuda_train/backend_cuda.h).
enum class GemmPrecision : uint8_t { fp32, bf16 };
inline constexpr EnumName<GemmPrecision> kGemmPrecisionNames[] = {{GemmPrecision::bf16, "bf16"},
                                                                  {GemmPrecision::fp32, "fp32"}};

// Whether this CPU multiplies bf16 natively (oneDNN's effective ISA is avx512_core_bf16 or above); `why` gets the
// ISA's name either way.
bool gemm_bf16_supported(std::string* why = nullptr);

// y[i] = x[i] rounded to bf16 (nearest, ties to even, quant/half.h's f32_to_bf16): the tile packing's kernel,
// OpenMP-parallel for large n.
void f32_to_bf16_rows(uint16_t* y, const float* x, size_t n);

// Bf16Weights::per_gemm rounds a weight of rows x cols (row-major) a block of this many rows at a time, so its
// scratch holds at most block_values values (2^24: 32 MiB) whatever the weight (a 128256-row lm_head is 16 blocks of
// 8192 rows at dim 2048); at least one row, at most the whole weight.
constexpr size_t kGemmBf16BlockValues = size_t(1) << 24;
inline size_t gemm_bf16_weight_block_rows(size_t rows, size_t cols, size_t block_values = kGemmBf16BlockValues) {
  return std::min(rows, std::max<size_t>(1, block_values / std::max<size_t>(cols, 1)));
}

// One row-major operand of a product: `rows` x `cols` as the product reads it, stored with leading dimension `ld`,
// transposed when `trans` (then stored as cols x rows).
struct GemmOperand {
  const uint16_t* data;
  bool trans;
  int ld;
};

// C (M x N, leading dimension ldc) = A (M x K) · B (K x N), or += when `accumulate`. Primitives are made once per
// shape and kept (the model's few shapes repeat every micro-batch).
class GemmBf16 {
 public:
  GemmBf16();
  ~GemmBf16();
  void multiply(int M, int N, int K, GemmOperand A, GemmOperand B, float* C, int ldc, bool accumulate);
  // The MLP's first half, fused into the two products' epilogues (oneDNN post-ops): gate (M x N, fp32) =
  // swish(A · B_gate), then S (M x N, bf16, the down projection's input) = bf16((A · B_up) ∘ gate). Dense outputs.
  void multiply_swiglu(int M, int N, int K, GemmOperand A, GemmOperand B_gate, GemmOperand B_up, float* gate,
                       uint16_t* S);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace agoq

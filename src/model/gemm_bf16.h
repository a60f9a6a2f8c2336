// bf16 matrix products on the CPU, through oneDNN (what PyTorch uses on CPUs; docs/dependencies.md): inputs rounded
// to bf16 (nearest even), products accumulated in fp32, fp32 outputs. oneDNN picks the kernel for the CPU it runs
// on (AMX-BF16, AVX512-BF16); gemm_bf16_supported() says whether that CPU has one, honouring the library's own ISA
// cap (ONEDNN_MAX_CPU_ISA=AVX2 makes a BF16 machine take the fp32 path, which the tests use).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace agoq {

// Whether this CPU multiplies bf16 natively (oneDNN's effective ISA is avx512_core_bf16 or above); `why` gets the
// ISA's name either way.
bool gemm_bf16_supported(std::string* why = nullptr);

// y[i] = x[i] rounded to bf16 (nearest, ties to even): quant/keep.h's encoder, OpenMP-parallel for large n.
void f32_to_bf16_rows(uint16_t* y, const float* x, size_t n);

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

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace agoq

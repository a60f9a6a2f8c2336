// The device benchmarks (`agoq bench <what> --device cuda`), compiled only when the CUDA backend is built. Each
// prints a table, or JSON records with --json, like its CPU twin.
#pragma once
#include <string>

namespace agoq {

struct BenchQuantCudaOptions {
  double mib = 64;
  int reps = 9;
  bool json = false;
  std::string filter;
};
// Quantize/dequantize throughput of every format on the GPU against a device-to-device copy of the same fp32
// bytes, timed alternately in the same run (CUDA events).
void bench_quant_cuda(const BenchQuantCudaOptions& o);

// The model's ops on the GPU at a LLaMA layer's shapes (default: llama-8b, 2 sequences of 4096 tokens): TFLOP/s
// and MFU of the GEMMs (fp32 and bf16 inputs) and of the attention, GB/s of the memory-bound ops against a
// device-to-device copy timed alternately with them.
struct BenchOpsCudaOptions {
  int reps = 5;
  bool json = false;
  int B = 2, T = 4096, dim = 4096, heads = 32, kv_heads = 8, ffn = 14336;
  double peak_tflops = 989;  // bf16 dense peak of an H100/H200 SXM, for MFU
};
void bench_ops_cuda(const BenchOpsCudaOptions& o);

}  // namespace agoq

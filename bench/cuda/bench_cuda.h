// The device benchmarks (`agoq bench <what> --device cuda`), compiled only when the CUDA backend is built. Each
// prints a table, or JSON records with --json, like its CPU twin.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

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

// Whole training steps on the GPU (`agoq bench train|act --device cuda`), built where the GPU model is
// (AGOQ_HAVE_GPU_MODEL): per activation policy (and gradient store), step time, tokens/s and MFU against peak_tflops,
// saved-activation bytes per token per layer and the device's peak memory, each next to the bf16 store's in the same
// run. Default: the 1B-class model of the issue and of scripts/gpu_torch_reference.py (dim 2048, 16 layers, seq 2048).
struct BenchTrainCudaOptions {
  std::vector<std::string> policies = {"baseline-bf16", "agoq", "agoq+q8"};  // +q8: the 8-bit gradient store
  int dim = 2048, layers = 16, heads = 16, kv_heads = 16, ffn = 5632, vocab = 32000;
  int B = 4, T = 2048, steps = 6, warmup = 2;
  std::string gemm = "bf16";
  double peak_tflops = 989;
  bool json = false;
};
void bench_train_cuda(const BenchTrainCudaOptions& o);
// The flags above, shared by `bench train` and `bench act` (and the GPU-only binary's twins).
void bench_train_cuda_flags(CLI::App& c, BenchTrainCudaOptions& o);

}  // namespace agoq

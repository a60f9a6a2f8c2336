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

}  // namespace agoq

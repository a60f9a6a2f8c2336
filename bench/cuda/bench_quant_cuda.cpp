// `agoq bench quant --device cuda`: every storage format's quantize and dequantize on the GPU, next to a
// device-to-device copy of the same fp32 tensor timed alternately with it. GB/s = (bytes read + written) / time,
// median of --reps (CUDA events on the one stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_quant_formats.h"
#include "bench/cuda/bench_cuda.h"
#include "bench/cuda/bench_cuda_util.h"
#include "core/rng.h"
#include "cuda/cuda_check.h"
#include "cuda/grad_q8_cuda.h"
#include "cuda/quant_cuda.h"

namespace agoq {
namespace {

struct Record {
  std::string format, direction;
  double bits_per_value, gbps, copy_gbps, ms;
};

}  // namespace

void bench_quant_cuda(const BenchQuantCudaOptions& o) {
  const CudaDeviceInfo dev = cuda_device_open();
  const size_t cols = 4096, rows = std::max<size_t>(1, size_t(o.mib * (1 << 20) / 4 / cols)), n = rows * cols;
  const double in_bytes = double(n) * 4;
  DeviceBuffer<float> src(n, MemCategory::workspace, "bench.quant"), out(n, MemCategory::workspace, "bench.quant");
  {
    std::vector<float> h(n);
    Rng rng(1);
    for (size_t i = 0; i < n; ++i) h[i] = rng.uniform() * 4.f - 2.f + (i % 97 == 0 ? 5.f : 0.f);
    src.upload(h.data(), n);
  }
  std::vector<Record> recs;
  auto add = [&](const std::string& fmt, const char* dir, double bytes, double bpv, const std::function<void()>& fn) {
    if (fmt.find(o.filter) == std::string::npos) return;
    fn();  // warm-up
    std::vector<float> t, tc;
    for (int r = 0; r < o.reps; ++r) {
      tc.push_back(bench_cuda_ms(
          [&] { AGOQ_CUDA_CHECK(cudaMemcpyAsync(out.data(), src.data(), n * 4, cudaMemcpyDeviceToDevice)); }));
      t.push_back(bench_cuda_ms(fn));
    }
    const double ms = bench_median(t), copy_ms = bench_median(tc);
    recs.push_back({fmt, dir, bpv, bytes / ms / 1e6, 2 * in_bytes / copy_ms / 1e6, ms});
  };

  for (const QuantFormat& f : bench_quant_formats()) {
    DeviceQuantTensor t(f, rows, cols, MemCategory::workspace, "bench.quant");
    const double q = double(t.bytes()), bpv = quant_bits_per_value(f);
    uint64_t step = 0;
    add(quant_format_name(f), "quantize", in_bytes + q, bpv, [&] {
      cuda_quant_encode_rows(f, src.data(), 0, rows, cols, t.view(), {++step, 1});
    });
    add(quant_format_name(f), "dequantize", q + in_bytes, bpv,
        [&] { cuda_quant_decode_rows(f, t.view(), 0, rows, cols, out.data()); });
  }
  {
    const int block = 256;
    DeviceBuffer<int8_t> codes(n, MemCategory::workspace, "bench.quant");
    DeviceBuffer<float> scales(grad_q8_blocks(n, block), MemCategory::workspace, "bench.quant");
    const double q = double(n) + 4.0 * double(scales.size()), bpv = 8 + 32.0 / block;
    for (auto r : {QuantRounding::nearest, QuantRounding::stochastic}) {
      GradQ8Options opt;
      opt.block = block, opt.rounding = r;
      const std::string name = std::string("grad_q8.b256.") + (r == QuantRounding::nearest ? "nearest" : "stochastic");
      add(name, "quantize", in_bytes + q, bpv, [&] {
        ++opt.seed.seed;
        cuda_grad_q8_quantize(src.data(), n, codes.data(), scales.data(), opt);
      });
      add(name, "accumulate", in_bytes + 2 * q, bpv, [&] {
        ++opt.seed.seed;
        cuda_grad_q8_accumulate(codes.data(), scales.data(), src.data(), n, opt);
      });
    }
    add("grad_q8.b256", "dequantize", q + in_bytes, bpv,
        [&] { cuda_grad_q8_dequantize(codes.data(), scales.data(), n, out.data(), block); });
  }

  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Record& r : recs)
      j.push_back({{"device", dev.name},
                   {"format", r.format},
                   {"direction", r.direction},
                   {"gbps", r.gbps},
                   {"copy_gbps", r.copy_gbps},
                   {"ratio", r.gbps / r.copy_gbps},
                   {"ms", r.ms},
                   {"bits_per_value", r.bits_per_value},
                   {"mib_fp32", o.mib}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("quantization throughput on %s (sm_%d%d): %.0f MiB fp32 (%zu x %zu), median of %d\n", dev.name.c_str(),
              dev.sm_major, dev.sm_minor, o.mib, rows, cols, o.reps);
  std::printf(
      "GB/s = (bytes read + written) / time; copy = the same fp32 tensor copied device to device, "
      "alternating with each kernel\n\n");
  std::printf("%-26s %-12s %8s %9s %9s %7s %8s\n", "format", "direction", "bits/val", "GB/s", "copy", "ratio", "ms");
  for (const Record& r : recs)
    std::printf("%-26s %-12s %8.3f %9.1f %9.1f %7.2f %8.3f\n", r.format.c_str(), r.direction.c_str(), r.bits_per_value,
                r.gbps, r.copy_gbps, r.gbps / r.copy_gbps, r.ms);
}

}  // namespace agoq

// `agoq bench quant`: throughput of every storage format's quantize and dequantize on 64 MiB of fp32, next to a
// memcpy of the same 64 MiB measured in the same run. GB/s = (bytes read + bytes written) / time, best of --reps.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_quant_formats.h"
#if AGOQ_HAVE_CUDA
#include "bench/cuda/bench_cuda.h"
#endif
#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "quant/grad_q8.h"
#include "quant/simd.h"
#include "quant/tensor.h"

namespace agoq {
namespace {

constexpr size_t kSlices = 16;

struct Options {
  double mib = 64;
  int reps = 9;
  bool json = false, scalar = false, avx2 = false;
  int threads = 0;     // 0: OpenMP's default
  std::string filter;  // only formats whose name contains this
  std::string device = "cpu";
};

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// memcpy split over the OpenMP threads, as the kernels are.
void parallel_memcpy(float* dst, const float* src, size_t n) {
#pragma omp parallel
  {
    const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
    const size_t b = n * t / nt, e = n * (t + 1) / nt;
    std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
  }
}

struct Record {
  std::string format, direction;
  double gbps, memcpy_gbps, seconds, bytes, bits_per_value;
};

void run(const Options& o) {
  quant_set_simd(!o.scalar);
  quant_set_avx512(!o.avx2);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const size_t cols = 4096, rows = std::max<size_t>(1, size_t(o.mib * (1 << 20) / 4 / cols)), n = rows * cols;
  Buffer<float> src(n, MemCategory::workspace, "bench.quant"), out(n, MemCategory::workspace, "bench.quant");
  {
    Rng rng(1);
    for (size_t i = 0; i < n; ++i) src[i] = rng.uniform() * 4.f - 2.f + (i % 97 == 0 ? 5.f : 0.f);
  }
  const double in_bytes = double(n) * 4;
  std::vector<Record> recs;
  // A shared machine preempts long runs, so the 64 MiB are timed as kSlices consecutive slices: each sweep runs
  // the kernel slice by slice over the whole input (so no slice is still in cache from the previous sweep), each
  // slice keeps its best time over the sweeps, and the total is the sum. The memcpy is timed the same way, one
  // memcpy sweep before each kernel sweep, so both see the same conditions.
  auto add = [&](const std::string& fmt, const char* dir, double bytes, double bpv,
                 const std::function<void(size_t, size_t)>& fn /* rows [r0, r1) */) {
    if (fmt.find(o.filter) == std::string::npos) return;
    std::vector<double> best(kSlices, 1e30), best_copy(kSlices, 1e30);
    for (int r = 0; r < o.reps; ++r) {
      for (size_t k = 0; k < kSlices; ++k) {
        const size_t r0 = rows * k / kSlices, r1 = rows * (k + 1) / kSlices;
        best_copy[k] = std::min(best_copy[k], seconds([&] {
                                  parallel_memcpy(out.data() + r0 * cols, src.data() + r0 * cols, (r1 - r0) * cols);
                                }));
      }
      for (size_t k = 0; k < kSlices; ++k)
        best[k] = std::min(best[k], seconds([&] { fn(rows * k / kSlices, rows * (k + 1) / kSlices); }));
    }
    double t = 0, tc = 0;
    for (size_t k = 0; k < kSlices; ++k) t += best[k], tc += best_copy[k];
    recs.push_back({fmt, dir, bytes / t / 1e9, 2 * in_bytes / tc / 1e9, t, bytes, bpv});
  };

  for (const QuantFormat& f : bench_quant_formats()) {
    QuantizedTensor t(f, rows, cols, MemCategory::workspace, "bench.quant");
    const double q = double(t.bytes()), bpv = quant_bits_per_value(f);
    uint64_t step = 0;
    add(quant_format_name(f), "quantize", in_bytes + q, bpv, [&](size_t r0, size_t r1) {
      quant_encode_rows(f, src.data() + r0 * cols, r0, r1 - r0, cols, t.view(), {++step, 1});
    });
    add(quant_format_name(f), "dequantize", q + in_bytes, bpv,
        [&](size_t r0, size_t r1) { quant_decode_rows(t, r0, r1 - r0, out.data() + r0 * cols); });
  }
  {
    const int block = 256;
    GradQ8Buffer g(n, block, MemCategory::workspace, "bench.quant");
    const double q = double(n) + 4.0 * double(g.scales.size()), bpv = 8 + 32.0 / block;
    // A slice of rows is a contiguous range of whole blocks (cols is a multiple of the block).
    auto grad = [&](const std::string& name, const char* dir, double bytes, auto&& fn) {
      add(name, dir, bytes, bpv, [&](size_t r0, size_t r1) {
        const size_t j = r0 * cols, m = (r1 - r0) * cols;
        fn(j, m, g.codes.data() + j, g.scales.data() + j / block);
      });
    };
    for (auto r : {QuantRounding::nearest, QuantRounding::stochastic}) {
      GradQ8Options opt;
      opt.block = block, opt.rounding = r;
      const std::string name = std::string("grad_q8.b256.") + (r == QuantRounding::nearest ? "nearest" : "stochastic");
      grad(name, "quantize", in_bytes + q, [&](size_t j, size_t m, int8_t* c, float* s) {
        ++opt.seed.seed, opt.index_base = j;
        grad_q8_quantize(src.data() + j, m, c, s, opt);
      });
      if (r == QuantRounding::nearest)
        grad(name, "dequantize", q + in_bytes,
             [&](size_t j, size_t m, int8_t* c, float* s) { grad_q8_dequantize(c, s, m, out.data() + j, block); });
      grad(name, "accumulate", in_bytes + 2 * q, [&](size_t j, size_t m, int8_t* c, float* s) {
        ++opt.seed.seed, opt.index_base = j;
        grad_q8_accumulate(c, s, src.data() + j, m, opt);
      });
    }
    grad("grad_q8.b256", "dequantize_add", q + 2 * in_bytes,
         [&](size_t j, size_t m, int8_t* c, float* s) { grad_q8_dequantize_add(c, s, m, out.data() + j, block); });
  }

  const int threads = omp_get_max_threads();
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Record& r : recs)
      j.push_back({{"format", r.format},
                   {"direction", r.direction},
                   {"gbps", r.gbps},
                   {"memcpy_gbps", r.memcpy_gbps},
                   {"ratio", r.gbps / r.memcpy_gbps},
                   {"ms", r.seconds * 1e3},
                   {"bytes", r.bytes},
                   {"bits_per_value", r.bits_per_value},
                   {"mib_fp32", o.mib},
                   {"threads", threads},
                   {"simd", quant_simd_enabled()},
                   {"kernels", quant_kernels_name()}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("quantization throughput: %.0f MiB fp32 (%zu x %zu), %d threads, %s kernels, %zu slices x best of %d\n",
              o.mib, rows, cols, threads, quant_kernels_name(), kSlices, o.reps);
  std::printf(
      "GB/s = (bytes read + written) / time; memcpy = the same %.0f MiB copied, alternating with each kernel\n\n",
      o.mib);
  std::printf("%-26s %-15s %8s %8s %8s %8s %8s\n", "format", "direction", "bits/val", "GB/s", "memcpy", "ratio", "ms");
  for (const Record& r : recs)
    std::printf("%-26s %-15s %8.3f %8.2f %8.2f %8.2f %8.2f\n", r.format.c_str(), r.direction.c_str(), r.bits_per_value,
                r.gbps, r.memcpy_gbps, r.gbps / r.memcpy_gbps, r.seconds * 1e3);
}

const CliCommand kQuant("bench", 10, [](CLI::App& bench) {
  static Options o;
  CLI::App* cmd = bench.add_subcommand("quant", "quantize/dequantize throughput of each storage format vs memcpy");
  cmd->add_option("--mib", o.mib, "fp32 input size in MiB")->check(CLI::Range(1.0, 65536.0))->capture_default_str();
  cmd->add_option("--reps", o.reps, "repetitions (the best is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "print JSON records instead of a table");
  cmd->add_flag("--scalar", o.scalar, "use the portable scalar kernels instead of AVX-512 or AVX2");
  cmd->add_flag("--avx2", o.avx2, "use the AVX2 kernels even where the CPU has AVX-512");
  cmd->add_option("--threads", o.threads, "OpenMP threads for the kernels and the memcpy (default: all)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--filter", o.filter, "only formats whose name contains this (e.g. stochastic)");
  cmd->add_option("--device", o.device, "cpu, or cuda (the GPU kernels against a device-to-device copy)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([] {
    if (o.device == "cpu") return run(o);
#if AGOQ_HAVE_CUDA
    BenchQuantCudaOptions c;
    c.mib = o.mib, c.reps = o.reps, c.json = o.json, c.filter = o.filter;
    bench_quant_cuda(c);
#else
    fail("--device cuda: this agoq was built without the CUDA backend (no nvcc at configure time, or -DAGOQ_CUDA=OFF)");
#endif
  });
});

}  // namespace
}  // namespace agoq

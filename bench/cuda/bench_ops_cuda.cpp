// `agoq bench ops --device cuda`: the model's ops on the GPU at one LLaMA layer's shapes. GEMMs and attention as
// TFLOP/s and MFU (against --peak-tflops, the bf16 dense peak); the memory-bound ops as GB/s (every array read or
// written once) next to a device-to-device copy of the same bytes timed alternately with them. Median of --reps
// (CUDA events on the one stream), after one warm-up.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/cuda/bench_cuda.h"
#include "bench/cuda/bench_cuda_util.h"
#include "core/rng.h"
#include "cuda/attention_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/matmul_cuda.h"
#include "cuda/ops_cuda.h"
#include "cuda/quant_cuda.h"
#include "opmath/op_flops.h"

namespace agoq {
namespace {

struct Row {
  std::string op;
  double ms = 0, tflops = 0, gbps = 0, copy_gbps = 0;
};

DeviceBuffer<float> random_device(size_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> h(n);
  Rng rng(seed);
  for (float& x : h) x = (rng.uniform() - 0.5f) * 2.f * scale;
  DeviceBuffer<float> d(n, MemCategory::workspace, "bench.ops");
  d.upload(h.data(), n);
  return d;
}

}  // namespace

void bench_ops_cuda(const BenchOpsCudaOptions& o) {
  const CudaDeviceInfo dev = cuda_device_open();
  const int N = o.B * o.T, C = o.dim, F = o.ffn, hd = o.dim / o.heads, Ckv = o.kv_heads * hd;
  std::vector<Row> rows;
  DeviceBuffer<float> copy_src(size_t(N) * F, MemCategory::workspace, "bench.ops"),
      copy_dst(size_t(N) * F, MemCategory::workspace, "bench.ops");
  auto add_flops = [&](const std::string& op, double flops, const std::function<void()>& fn) {
    fn();  // warm-up
    std::vector<float> t;
    for (int r = 0; r < o.reps; ++r) t.push_back(bench_cuda_ms(fn));
    const double ms = bench_median(t);
    rows.push_back({op, ms, flops / ms / 1e9, 0, 0});
  };
  auto add_bytes = [&](const std::string& op, double bytes, const std::function<void()>& fn) {
    const size_t copy = std::min(copy_src.bytes(), size_t(bytes / 2));
    std::vector<float> t, tc;
    fn();
    for (int r = 0; r < o.reps; ++r) {
      tc.push_back(bench_cuda_ms(
          [&] { AGOQ_CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), copy_src.data(), copy, cudaMemcpyDeviceToDevice)); }));
      t.push_back(bench_cuda_ms(fn));
    }
    const double ms = bench_median(t), copy_ms = bench_median(tc);
    rows.push_back({op, ms, 0, bytes / ms / 1e6, 2.0 * double(copy) / copy_ms / 1e6});
  };

  CudaMatmul mm;
  {  // the layer's GEMMs, forward and backward (din and dw), with fp32 and with bf16 inputs
    struct Gemm {
      const char* name;
      int in, out;
    };
    const Gemm gemms[] = {{"qkv", C, C + 2 * Ckv}, {"o", C, C}, {"gate+up", C, 2 * F}, {"down", F, C}};
    const int widest = std::max(F, C + 2 * Ckv);
    DeviceBuffer<float> x = random_device(size_t(N) * std::max(2 * F, widest), 1),
                        w = random_device(size_t(2 * F) * std::max(C, F), 2, 0.02f),
                        y(size_t(N) * std::max(2 * F, widest), MemCategory::workspace, "bench.ops"),
                        dw(w.size(), MemCategory::workspace, "bench.ops");
    DeviceBuffer<uint16_t> xh(x.size(), MemCategory::workspace, "bench.ops"),
        wh(w.size(), MemCategory::workspace, "bench.ops"), yh(y.size(), MemCategory::workspace, "bench.ops");
    cuda_f32_to_bf16(x.data(), x.size(), xh.data());
    cuda_f32_to_bf16(w.data(), w.size(), wh.data());
    cuda_f32_to_bf16(x.data(), y.size(), yh.data());
    for (const Gemm& g : gemms)
      for (CudaDtype t : {CudaDtype::bf16, CudaDtype::f32}) {
        const bool bf = t == CudaDtype::bf16;
        const void *in = bf ? (const void*)xh.data() : x.data(), *wp = bf ? (const void*)wh.data() : w.data(),
                   *dout = bf ? (const void*)yh.data() : x.data();
        const double flops = 2.0 * N * g.in * g.out;
        const std::string name = std::string("matmul ") + g.name + (bf ? " bf16" : " fp32");
        add_flops(name + " fwd", flops, [&] { mm.forward(y.data(), in, wp, t, N, g.in, g.out); });
        add_flops(name + " bwd", 2 * flops, [&] { mm.backward(y.data(), dw.data(), dout, in, wp, t, N, g.in, g.out); });
      }
  }
  {  // causal attention, its FLOPs as model/attention.h counts them
    const size_t nq = size_t(N) * C, nkv = size_t(N) * Ckv;
    DeviceBuffer<float> q = random_device(nq, 3), k = random_device(nkv, 4), v = random_device(nkv, 5),
                        out(nq, MemCategory::workspace, "bench.ops"), dout = random_device(nq, 6),
                        lse(size_t(o.B) * o.heads * o.T, MemCategory::workspace, "bench.ops"),
                        dq(nq, MemCategory::workspace, "bench.ops"), dk(nkv, MemCategory::workspace, "bench.ops"),
                        dv(nkv, MemCategory::workspace, "bench.ops");
    CudaAttention attn(mm, o.B, o.T, o.heads, o.kv_heads, hd);
    add_flops("attention fwd", attention_forward_flops(o.B, o.heads, o.T, hd),
              [&] { attn.forward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr); });
    add_flops("attention bwd", attention_backward_flops(o.B, o.heads, o.T, hd), [&] {
      attn.backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                    nullptr);
    });
  }
  {  // memory-bound ops
    const size_t nc = size_t(N) * C, nf = size_t(N) * F, nmax = std::max(nc, nf);
    DeviceBuffer<float> x = random_device(nmax, 7), y = random_device(nmax, 8),
                        z(nmax, MemCategory::workspace, "bench.ops"), z2(nmax, MemCategory::workspace, "bench.ops"),
                        w = random_device(C, 9), dw(C, MemCategory::workspace, "bench.ops"),
                        rstd(N, MemCategory::workspace, "bench.ops");
    add_bytes("rmsnorm fwd", 8.0 * nc,
              [&] { cuda_rmsnorm_forward(z.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f); });
    add_bytes("rmsnorm bwd", 16.0 * nc,
              [&] { cuda_rmsnorm_backward(z.data(), dw.data(), y.data(), x.data(), w.data(), rstd.data(), N, C); });
    add_bytes("swiglu fwd", 12.0 * nf, [&] { cuda_swiglu_forward(z.data(), x.data(), y.data(), nf); });
    add_bytes("swiglu bwd", 20.0 * nf,
              [&] { cuda_swiglu_backward(z.data(), z2.data(), x.data(), y.data(), x.data(), nf); });
    std::vector<float> cos_h(size_t(o.T) * hd / 2, 0.5f), sin_h(cos_h.size(), 0.5f);
    DeviceBuffer<float> cs(cos_h.size(), MemCategory::workspace, "bench.ops"),
        sn(sin_h.size(), MemCategory::workspace, "bench.ops");
    cs.upload(cos_h.data(), cos_h.size()), sn.upload(sin_h.data(), sin_h.size());
    add_bytes("rope fwd (q)", 8.0 * nc,
              [&] { cuda_rope_forward(x.data(), cs.data(), sn.data(), N, o.T, o.heads, hd); });
    add_bytes("residual add", 12.0 * nc, [&] { cuda_residual_add(z.data(), x.data(), y.data(), nc); });
    DeviceBuffer<float> m(nmax, MemCategory::workspace, "bench.ops"), vv(nmax, MemCategory::workspace, "bench.ops");
    const AdamStepCoeffs k = adam_step_coeffs(0.9f, 0.95f, 1e-8f, 1e-4f, 10);
    add_bytes("adamw step (fp32 moments)", 28.0 * nf,
              [&] { cuda_adamw_step(z.data(), m.data(), vv.data(), x.data(), nf, 0.99f, k); });
  }

  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json e = {{"device", dev.name}, {"op", r.op}, {"ms", r.ms}, {"tokens", N}, {"dim", C}};
      if (r.tflops > 0) e["tflops"] = r.tflops, e["mfu"] = r.tflops / o.peak_tflops;
      if (r.gbps > 0) e["gbytes_per_s"] = r.gbps, e["copy_gbytes_per_s"] = r.copy_gbps;
      j.push_back(e);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "agoq bench ops on %s (sm_%d%d): %d tokens (batch %d x seq %d), dim %d, %d/%d heads, ffn %d; "
      "median of %d; MFU against %.0f TFLOP/s\n\n",
      dev.name.c_str(), dev.sm_major, dev.sm_minor, N, o.B, o.T, C, o.heads, o.kv_heads, F, o.reps, o.peak_tflops);
  std::printf("  %-34s %10s %9s %6s %9s %9s\n", "op", "ms", "TFLOP/s", "MFU", "GB/s", "copy GB/s");
  for (const Row& r : rows) {
    std::printf("  %-34s %10.3f", r.op.c_str(), r.ms);
    if (r.tflops > 0) std::printf(" %9.1f %5.1f%%\n", r.tflops, 100 * r.tflops / o.peak_tflops);
    else std::printf(" %9s %6s %9.0f %9.0f\n", "", "", r.gbps, r.copy_gbps);
  }
}

}  // namespace agoq

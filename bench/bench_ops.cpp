// `agoq bench ops`: speed of each model op on the reference shapes (N = 2048 tokens: batch 8 × seq 256, dim 256,
// 8 heads of 32, ffn 688, vocab 4096), as GFLOP/s for the matmuls and the attention and GB/s (bytes read +
// written once) for the memory-bound ops. Each number is the best of --reps timed runs after one warm-up.
// On a shared, loaded machine wall time mostly measures the neighbours: --cpu-time times the process's CPU time
// instead, which is meaningful with OMP_NUM_THREADS=1 (with more threads it also counts OpenMP spin-waiting).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/ops.h"
#include "opmath/op_flops.h"
#if AGOQ_HAVE_CUDA
#include "bench/cuda/bench_cuda.h"
#endif

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string device = "cpu";
  bool json = false;
  bool cpu_time = false;
  int reps = 10;
  int B = 8, T = 256, dim = 256, heads = 8, kv_heads = 8, ffn = 688, vocab = 4096;
  double peak_tflops = 989;  // --device cuda: the bf16 dense peak for MFU
};

double now_seconds(bool cpu_time) {
  if (!cpu_time) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Best time of fn over reps runs (after one warm-up), in seconds: wall time, or process CPU time.
double best_seconds(int reps, bool cpu_time, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_seconds(cpu_time);
    fn();
    best = std::min(best, now_seconds(cpu_time) - t0);
  }
  return best;
}

Buffer<float> random_buffer(size_t n, uint64_t seed, float scale = 1.0f) {
  Buffer<float> b(n, MemCategory::workspace);
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) b[i] = (rng.uniform() - 0.5f) * 2.0f * scale;
  return b;
}

struct Row {
  std::string op;
  double ms, gflops, gbytes;  // gflops or gbytes is 0 when it does not apply
};

void bench_ops_run(const Args& a) {
  std::vector<Row> rows;
  const int N = a.B * a.T, reps = a.reps;
  auto add_flops = [&](const std::string& op, double flops, const std::function<void()>& fn) {
    const double s = best_seconds(reps, a.cpu_time, fn);
    rows.push_back({op, s * 1e3, flops / s / 1e9, 0});
  };
  auto add_bytes = [&](const std::string& op, double bytes, const std::function<void()>& fn) {
    const double s = best_seconds(reps, a.cpu_time, fn);
    rows.push_back({op, s * 1e3, 0, bytes / s / 1e9});
  };

  {  // the machine's practical fp32 peak: a large square sgemm
    const int n = 1536;
    auto x = random_buffer(size_t(n) * n, 1), y = random_buffer(size_t(n) * n, 2);
    Buffer<float> z(size_t(n) * n, MemCategory::workspace);
    add_flops("sgemm 1536^3 (peak)", 2.0 * n * n * n, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f, z.data(),
                  n);
    });
  }

  // matmuls: forward, and backward (din and dw, twice the forward's FLOPs)
  const std::pair<int, int> shapes[] = {{a.dim, a.dim}, {a.dim, a.ffn}, {a.ffn, a.dim}, {a.dim, a.vocab}};
  for (const auto& shape : shapes) {
    const int in_dim = shape.first, out_dim = shape.second;  // not a structured binding: clang 14 cannot capture one
    auto in = random_buffer(size_t(N) * in_dim, 3), w = random_buffer(size_t(out_dim) * in_dim, 4, 0.05f);
    auto dout = random_buffer(size_t(N) * out_dim, 5);
    Buffer<float> out(size_t(N) * out_dim, MemCategory::workspace), din(size_t(N) * in_dim, MemCategory::workspace),
        dw(size_t(out_dim) * in_dim, MemCategory::workspace);
    const double flops = 2.0 * N * in_dim * out_dim;
    const std::string name =
        "matmul " + std::to_string(N) + "x" + std::to_string(in_dim) + "->" + std::to_string(out_dim);
    add_flops(name + " fwd", flops, [&] { matmul_forward(out.data(), in.data(), w.data(), N, in_dim, out_dim); });
    add_flops(name + " bwd", 2 * flops,
              [&] { matmul_backward(din.data(), dw.data(), dout.data(), in.data(), w.data(), N, in_dim, out_dim); });
  }

  {  // attention, causal FLOPs (model/attention.h)
    const int hd = a.dim / a.heads;
    std::vector<int> kv_list = {a.kv_heads};  // the configured heads, and a grouped-query variant
    if (a.heads % 4 == 0 && a.heads / 4 != a.kv_heads) kv_list.push_back(a.heads / 4);
    for (int kvh : kv_list) {
      const size_t nq = size_t(N) * a.heads * hd, nk = size_t(N) * kvh * hd;
      auto q = random_buffer(nq, 6), k = random_buffer(nk, 7), v = random_buffer(nk, 8), dout = random_buffer(nq, 9);
      Buffer<float> o(nq, MemCategory::workspace), lse(size_t(a.B) * a.heads * a.T, MemCategory::workspace),
          dq(nq, MemCategory::workspace), dk(nk, MemCategory::workspace), dv(nk, MemCategory::workspace);
      const double fwd = attention_forward_flops(a.B, a.heads, a.T, hd);
      const double bwd = attention_backward_flops(a.B, a.heads, a.T, hd);
      const std::string name = "attention B" + std::to_string(a.B) + " T" + std::to_string(a.T) + " H" +
                               std::to_string(a.heads) + "/" + std::to_string(kvh) + " hd" + std::to_string(hd);
      auto f = [&] {
        attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), a.B, a.T, a.heads, kvh, hd);
      };
      auto b = [&] {
        attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), o.data(),
                           lse.data(), a.B, a.T, a.heads, kvh, hd);
      };
      add_flops(name + " fwd", fwd, f);
      add_flops(name + " bwd", bwd, b);
      add_flops(name + " fwd+bwd", fwd + bwd, [&] { f(), b(); });
    }
  }

  {  // memory-bound ops, bytes = every array read or written once
    const size_t nc = size_t(N) * a.dim, nf = size_t(N) * a.ffn;
    auto x = random_buffer(nc, 10), w = random_buffer(a.dim, 11), dout = random_buffer(nc, 12);
    Buffer<float> out(nc, MemCategory::workspace), rstd(N, MemCategory::workspace), dx(nc, MemCategory::workspace),
        dw(a.dim, MemCategory::workspace);
    add_bytes("rmsnorm fwd", 8.0 * nc,
              [&] { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, a.dim, 1e-5f); });
    add_bytes("rmsnorm bwd", 16.0 * nc,
              [&] { rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, a.dim); });
    std::vector<float> cos(size_t(a.T) * (a.dim / a.heads / 2)), sin(cos.size());
    rope_init_tables(cos.data(), sin.data(), a.T, a.dim / a.heads, 10000.0f);
    add_bytes("rope fwd (q)", 8.0 * nc,
              [&] { rope_forward(out.data(), cos.data(), sin.data(), N, a.T, a.heads, a.dim / a.heads); });
    add_bytes("residual_add", 12.0 * nc, [&] { residual_add(out.data(), x.data(), dout.data(), nc); });

    auto g = random_buffer(nf, 13, 3.0f), u = random_buffer(nf, 14), dh = random_buffer(nf, 15);
    Buffer<float> h(nf, MemCategory::workspace), dg(nf, MemCategory::workspace), du(nf, MemCategory::workspace);
    add_bytes("swiglu fwd", 12.0 * nf, [&] { swiglu_forward(h.data(), g.data(), u.data(), nf); });
    add_bytes("swiglu bwd", 20.0 * nf,
              [&] { swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), nf); });

    const int rows_ce = 512;  // the model calls it on chunks of rows
    auto logits = random_buffer(size_t(rows_ce) * a.vocab, 16, 4.0f);
    Buffer<float> work(logits.size(), MemCategory::workspace), losses(rows_ce, MemCategory::workspace);
    std::vector<int> targets(rows_ce);
    for (int i = 0; i < rows_ce; ++i) targets[i] = (i * 131) % a.vocab;
    add_bytes("crossentropy " + std::to_string(rows_ce) + "x" + std::to_string(a.vocab), 8.0 * logits.size(), [&] {
      std::copy(logits.begin(), logits.end(), work.begin());
      crossentropy_forward_backward(work.data(), losses.data(), targets.data(), rows_ce, a.vocab, 1.0f);
    });

    std::vector<int> tokens(N);
    for (int i = 0; i < N; ++i) tokens[i] = (i * 977) % a.vocab;
    Buffer<float> table(size_t(a.vocab) * a.dim, MemCategory::workspace);
    add_bytes("embedding bwd", 12.0 * nc,
              [&] { embedding_backward(table.data(), dout.data(), tokens.data(), N, a.dim); });
  }

  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json e = {{"op", r.op}, {"ms", r.ms}};
      if (r.gflops > 0) e["gflops"] = r.gflops;
      if (r.gbytes > 0) e["gbytes_per_s"] = r.gbytes;
      j.push_back(e);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("agoq bench ops: N=%d (batch %d x seq %d), %d threads, best %s of %d\n", N, a.B, a.T,
              omp_get_max_threads(), a.cpu_time ? "CPU time" : "wall time", reps);
  std::printf("  %-40s %10s %10s %10s\n", "op", "ms", "GFLOP/s", "GB/s");
  for (const Row& r : rows) {
    std::printf("  %-40s %10.3f", r.op.c_str(), r.ms);
    r.gflops > 0 ? std::printf(" %10.1f %10s\n", r.gflops, "") : std::printf(" %10s %10.1f\n", "", r.gbytes);
  }
}

const CliCommand kBenchOps("bench", 30, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand("ops", "GFLOP/s (matmul, attention) and GB/s (the rest) of each model op");
  c->add_flag("--json", args->json, "print one JSON array");
  c->add_flag("--cpu-time", args->cpu_time, "time process CPU time instead of wall time (use with OMP_NUM_THREADS=1)");
  c->add_option("--reps", args->reps, "timed runs per op (the best is reported)")
      ->capture_default_str()
      ->check(cli_at_least(1));
  c->add_option("--batch", args->B, "batch size")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--seq", args->T, "sequence length")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--dim", args->dim, "model dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--heads", args->heads, "attention heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--kv-heads", args->kv_heads, "key/value heads")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--ffn", args->ffn, "feed-forward dimension")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--vocab", args->vocab, "vocabulary size")->capture_default_str()->check(cli_at_least(1));
  c->add_option("--device", args->device, "cpu, or cuda (a llama-8b layer's shapes unless given; docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_option("--peak-tflops", args->peak_tflops, "--device cuda: the GPU's bf16 dense peak, for MFU")
      ->capture_default_str();
  c->callback([args, c] {
    if (args->device == "cpu") return bench_ops_run(*args);
#if AGOQ_HAVE_CUDA
    BenchOpsCudaOptions g;  // the GPU's defaults, overridden by the shape flags given
    auto given = [&](const char* flag, int& into, int value) {
      if (c->count(flag)) into = value;
    };
    given("--batch", g.B, args->B), given("--seq", g.T, args->T), given("--dim", g.dim, args->dim);
    given("--heads", g.heads, args->heads), given("--kv-heads", g.kv_heads, args->kv_heads);
    given("--ffn", g.ffn, args->ffn), given("--reps", g.reps, args->reps);
    g.json = args->json, g.peak_tflops = args->peak_tflops;
    bench_ops_cuda(g);
#else
    fail("--device cuda: this agoq was built without the CUDA backend (no nvcc at configure time, or -DAGOQ_CUDA=OFF)");
#endif
  });
});

}  // namespace
}  // namespace agoq

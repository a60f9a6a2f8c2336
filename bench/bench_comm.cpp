// `agoq bench comm`: fp32 MPI_Allreduce against allreduce_q8 on 1, 16, 64 and 256 MiB of fp32 gradients, with
// allreduce_q8's time split into its phases, pipelined in chunks of --chunk-kib and, for comparison, in one chunk
// (its passes and exchanges in turn). Run it under mpirun (mpirun -np 2 agoq bench comm, or across hosts:
// scripts/multihost-bench.sh); only rank 0 prints. Times are medians over --reps runs, each started and ended by a
// barrier; the three alternate within each repetition.
// Then the end-to-end part: data-parallel training steps of a small LLaMA (parallel/step_cpu.h) in four
// configurations: fp32 grad store + MPI all-reduce and fp32 store + allreduce_q8 (both reduced in buckets while
// backward runs), and the q8 grad store + allreduce_q8, its units reduced while backward runs or, for comparison,
// after backward: step time, the communication that backward did not hide, and peak memory per rank by category,
// all measured in the same run (alternating rounds, so all see the same load).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cli/commands.h"
#include "comm/allreduce_q8.h"
#include "comm/communicator.h"
#include "core/memory.h"
#include "core/memory_json.h"
#include "core/rng.h"
#include "model/llama.h"
#include "parallel/step_cpu.h"
#include "train/forward_backward.h"

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int> sizes_mib{1, 16, 64, 256};
  int reps = 5;
  int block = 256;
  int chunk_kib = 4096;  // allreduce_q8's pipeline chunk (CommQ8Options::chunk_bytes)
  bool json = false;
  int e2e_steps = 3;  // timed steps per configuration and round; 0 skips the end-to-end part
  int e2e_dim = 256, e2e_layers = 4, e2e_vocab = 4096, e2e_batch = 4, e2e_seq = 64, e2e_accum = 2;
  bool e2e_only = false;
};

LlamaConfig e2e_config(const Args& a) {
  LlamaConfig cfg;
  cfg.dim = a.e2e_dim, cfg.n_layers = a.e2e_layers, cfg.n_heads = 8, cfg.n_kv_heads = 4;
  cfg.ffn_dim = (a.e2e_dim * 8 / 3 + 63) / 64 * 64, cfg.vocab_size = a.e2e_vocab, cfg.max_seq_len = a.e2e_seq;
  return cfg;
}

// The number of distinct host names among the ranks (collective).
int bench_host_count(Communicator& comm) {
  char name[64] = {};
  gethostname(name, sizeof name - 1);
  std::vector<char> all(sizeof name * size_t(comm.size()));
  comm.allgather(name, all.data(), sizeof name);
  std::set<std::string> hosts;
  for (int r = 0; r < comm.size(); ++r) hosts.insert(std::string(all.data() + r * sizeof name));
  return int(hosts.size());
}

// ---- end to end: data-parallel training steps ----

struct E2eResult {
  std::string name;
  std::vector<double> step_ms, wait_ms;
  std::vector<MemSnapshot> peak;  // per rank, each category's own peak over the training steps
};

// Builds the model and engine of one configuration, runs `steps` timed steps (after one warm-up step), and on the
// first round records every rank's peak memory by category.
void bench_e2e_round(Communicator& comm, const Args& a, const CpuStepOptions& o, E2eResult& res, bool record_memory) {
  const LlamaConfig cfg = e2e_config(a);
  const int B = a.e2e_batch, T = a.e2e_seq, m = a.e2e_accum;
  GradStore grads(cfg, model_stage_whole(cfg), o.store);
  LlamaModel model(cfg, B, T, ActPolicy::parse("fp32", cfg.n_layers), model_stage_whole(cfg), 1, grads.model_storage());
  model.init_weights(7);
  CpuStep dp(comm, model.params(), grads, o);
  std::vector<int32_t> in(size_t(m) * B * T), tgt(in.size());
  Rng rng(11, uint64_t(comm.rank()));
  auto fill = [&] {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
  };
  MemoryTracker::global().reset_peaks();  // from here: training only (set-up transients excluded, as in train)
  for (int s = 0; s <= a.e2e_steps; ++s) {
    fill();
    comm.barrier();
    const auto t0 = Clock::now();
    const std::vector<MicroBatchRun> runs = dp.step_begin(s + 1, m);
    const StepResult r = step_finish(dp, 1e-3f, train_forward_backward(dp, model, in.data(), tgt.data(), B, T, runs));
    comm.barrier();
    if (s == 0) continue;  // warm-up: first touches, workspace growth
    res.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    res.wait_ms.push_back(1e3 * r.wait_s);
  }
  if (!record_memory) return;
  const MemSnapshot mine = MemoryTracker::global().peak_per_category();
  std::vector<MemSnapshot> all(comm.size());
  comm.allgather(&mine, all.data(), sizeof(MemSnapshot));
  res.peak = all;
}

std::vector<E2eResult> bench_e2e(Communicator& comm, const Args& a) {
  const struct {
    const char* name;
    GradStoreKind store;
    GradReduce reduce;
    bool overlap;
  } configs[] = {{"fp32 grads + MPI all-reduce", GradStoreKind::fp32, GradReduce::fp32, true},
                 {"fp32 grads + allreduce_q8", GradStoreKind::fp32, GradReduce::q8, true},
                 {"q8 grads + allreduce_q8", GradStoreKind::q8, GradReduce::q8, true},
                 {"q8 grads + allreduce_q8, after", GradStoreKind::q8, GradReduce::q8, false}};
  std::vector<E2eResult> res;
  std::vector<CpuStepOptions> opts;
  for (const auto& c : configs) {
    res.push_back({c.name, {}, {}, {}});
    opts.emplace_back();
    opts.back().store.kind = c.store, opts.back().reduce = c.reduce, opts.back().overlap = c.overlap;
  }
  for (int round = 0; round < 2; ++round)
    for (size_t c = 0; c < res.size(); ++c) bench_e2e_round(comm, a, opts[c], res[c], round == 0);
  return res;
}

struct Row {
  int mib;
  double mpi, q8, q8_one_chunk, quantize, alltoall, reduce, allgather, dequantize;  // ms; phases: pipelined
  bool same_bits;  // the pipelined result equals the one-chunk result on every rank
};

Row bench_comm_size(Communicator& comm, CommQ8Workspace& ws, int mib, const Args& a) {
  const size_t n = size_t(mib) << 18;  // fp32 values in mib MiB
  Buffer<float> in(n, MemCategory::communication, "bench.comm"), out(n, MemCategory::communication, "bench.comm");
  Rng rng(17, uint64_t(comm.rank()));
  for (size_t i = 0; i < n; ++i) in[i] = rng.normal() * 1e-3f;
  CommQ8Options o, one;
  o.block = one.block = a.block;
  o.chunk_bytes = size_t(a.chunk_kib) << 10, one.chunk_bytes = 0;
  auto timed = [&](auto&& op) {
    comm.barrier();
    const auto t0 = Clock::now();
    op();
    comm.barrier();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::vector<double> mpi, q8, q8_one, ph[5];
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1 warms up (page faults, workspace growth)
    const double t_mpi = timed([&] { comm.allreduce(in.data(), out.data(), n, CommDtype::f32, CommOp::sum); });
    const double t_one = timed([&] { comm_allreduce_q8(comm, ws, in.data(), out.data(), n, one); });
    const double t_q8 = timed([&] { comm_allreduce_q8(comm, ws, in.data(), out.data(), n, o); });
    if (rep < 0) continue;
    mpi.push_back(t_mpi), q8.push_back(t_q8), q8_one.push_back(t_one);
    const CommQ8Times& t = ws.times;
    const double p[5] = {t.quantize, t.alltoall, t.reduce, t.allgather, t.dequantize};
    for (int k = 0; k < 5; ++k) ph[k].push_back(1e3 * p[k]);
  }
  Buffer<float> out_one(n, MemCategory::communication, "bench.comm");
  comm_allreduce_q8(comm, ws, in.data(), out_one.data(), n, one);
  comm_allreduce_q8(comm, ws, in.data(), out.data(), n, o);
  const bool same = std::memcmp(out_one.data(), out.data(), n * sizeof(float)) == 0;
  const bool same_everywhere = comm.allreduce_value<int32_t>(same ? 1 : 0, CommOp::min) == 1;
  return {mib,
          bench_median(mpi),
          bench_median(q8),
          bench_median(q8_one),
          bench_median(ph[0]),
          bench_median(ph[1]),
          bench_median(ph[2]),
          bench_median(ph[3]),
          bench_median(ph[4]),
          same_everywhere};
}

nlohmann::json e2e_json(const Args& a, const std::vector<E2eResult>& e2e) {
  nlohmann::json j;
  const LlamaConfig cfg = e2e_config(a);
  j["model"] = {{"dim", a.e2e_dim},
                {"layers", a.e2e_layers},
                {"vocab", a.e2e_vocab},
                {"batch", a.e2e_batch},
                {"seq", a.e2e_seq},
                {"accum", a.e2e_accum},
                {"steps", 2 * a.e2e_steps},
                {"params", cfg.param_count()},
                {"grad_mib", double(cfg.param_count()) * 4 / (1 << 20)}};
  for (const E2eResult& r : e2e) {
    nlohmann::json c = {
        {"name", r.name}, {"step_ms", bench_median(r.step_ms)}, {"exposed_comm_ms", bench_median(r.wait_ms)}};
    for (size_t k = 0; k < r.peak.size(); ++k) {
      nlohmann::json p = mem_bytes_json(r.peak[k].bytes);
      p["rank"] = k;
      p["sum"] = r.peak[k].total();
      c["peak_bytes"].push_back(p);
    }
    j["configs"].push_back(c);
  }
  for (size_t c = 1; c < e2e.size(); ++c)
    j["configs"][c]["speedup_vs_fp32"] = bench_median(e2e[0].step_ms) / bench_median(e2e[c].step_ms);
  return j;
}

void e2e_print(const Args& a, int N, const std::vector<E2eResult>& e2e) {
  const LlamaConfig cfg = e2e_config(a);
  std::printf(
      "\nend to end: data-parallel training step on %d ranks, LLaMA dim %d x %d layers, vocab %d (%.1f MiB of "
      "fp32 gradients), %d micro-batches of %dx%d per rank; median of %d steps\n",
      N, a.e2e_dim, a.e2e_layers, a.e2e_vocab, double(cfg.param_count()) * 4 / (1 << 20), a.e2e_accum, a.e2e_batch,
      a.e2e_seq, 2 * a.e2e_steps);
  std::printf("%-30s %10s %17s %8s\n", "configuration", "step ms", "exposed comm ms", "speedup");
  for (const E2eResult& r : e2e)
    std::printf("%-30s %10.1f %17.1f %7.2fx\n", r.name.c_str(), bench_median(r.step_ms), bench_median(r.wait_ms),
                bench_median(e2e[0].step_ms) / bench_median(r.step_ms));
  std::printf("(\", after\": the same q8 reduction run after backward instead of overlapping it)\n");
  std::printf("peak memory per rank by category (each category's own peak during the steps):\n%-30s %5s", "", "rank");
  for (int i = 0; i < kMemCategoryCount; ++i) std::printf(" %13s", mem_category_name(MemCategory(i)));
  std::printf(" %13s\n", "sum");
  for (const E2eResult& r : e2e)
    for (size_t k = 0; k < r.peak.size(); ++k) {
      std::printf("%-30s %5zu", r.name.c_str(), k);
      for (int i = 0; i < kMemCategoryCount; ++i) std::printf(" %13s", format_bytes(r.peak[k].bytes[i]).c_str());
      std::printf(" %13s\n", format_bytes(r.peak[k].total()).c_str());
    }
}

void bench_comm_run(const Args& a) {
  Communicator& comm = comm_world();
  try {
    AGOQ_CHECK(a.reps >= 1, "bench comm: --reps must be at least 1");
    AGOQ_CHECK(a.chunk_kib >= 0, "bench comm: --chunk-kib must be 0 or more, got ", a.chunk_kib);
    for (int s : a.sizes_mib) AGOQ_CHECK(s >= 1 && s <= 4096, "bench comm: sizes are MiB in [1, 4096], got ", s);
    AGOQ_CHECK(!a.e2e_only || a.e2e_steps > 0, "bench comm: --e2e-only needs --e2e-steps of at least 1");
    const int hosts = bench_host_count(comm);
    std::vector<Row> rows;
    if (!a.e2e_only) {
      CommQ8Workspace ws;  // freed before the end-to-end part measures memory
      for (int mib : a.sizes_mib) rows.push_back(bench_comm_size(comm, ws, mib, a));
    }
    const std::vector<E2eResult> e2e = a.e2e_steps > 0 ? bench_e2e(comm, a) : std::vector<E2eResult>{};
    if (comm.rank() != 0) return;
    const int N = comm.size();
    if (a.json) {
      nlohmann::json j;
      j["ranks"] = N, j["hosts"] = hosts, j["block"] = a.block, j["chunk_kib"] = a.chunk_kib, j["reps"] = a.reps;
      j["results"] = nlohmann::json::array();
      for (const Row& r : rows)
        j["results"].push_back({{"size_mib", r.mib},
                                {"ranks", N},
                                {"hosts", hosts},
                                {"mpi_ms", r.mpi},
                                {"q8_ms", r.q8},
                                {"q8_one_chunk_ms", r.q8_one_chunk},
                                {"quantize_ms", r.quantize},
                                {"alltoall_ms", r.alltoall},
                                {"reduce_ms", r.reduce},
                                {"allgather_ms", r.allgather},
                                {"dequantize_ms", r.dequantize},
                                {"speedup", r.q8 > 0 ? r.mpi / r.q8 : 0.0},
                                {"speedup_one_chunk", r.q8_one_chunk > 0 ? r.mpi / r.q8_one_chunk : 0.0},
                                {"same_bits", r.same_bits}});
      if (!e2e.empty()) j["e2e"] = e2e_json(a, e2e);
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    if (a.e2e_only) return e2e_print(a, N, e2e);
    std::printf(
        "all-reduce of fp32 gradients, N = %d ranks on %d hosts, q8 block %d, chunks of %d KiB, median of %d "
        "(phases of the pipelined q8, rank 0: passes, and the exchanges' waits)\n",
        N, hosts, a.block, a.chunk_kib, a.reps);
    std::printf("%8s %10s %10s %9s %9s %9s %9s %9s %8s %12s %8s %10s\n", "size", "MPI ms", "q8 ms", "quant", "a2a",
                "reduce", "allgath", "dequant", "speedup", "1-chunk ms", "speedup", "same bits");
    for (const Row& r : rows)
      std::printf("%4d MiB %10.2f %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2fx %12.2f %7.2fx %10s\n", r.mib, r.mpi, r.q8,
                  r.quantize, r.alltoall, r.reduce, r.allgather, r.dequantize, r.q8 > 0 ? r.mpi / r.q8 : 0.0,
                  r.q8_one_chunk, r.q8_one_chunk > 0 ? r.mpi / r.q8_one_chunk : 0.0, r.same_bits ? "yes" : "NO");
    if (N == 1) std::printf("(one rank: both are copies; run under mpirun -np 2 or more)\n");
    if (!e2e.empty()) e2e_print(a, N, e2e);
  } catch (...) {
    comm_fail(comm, std::current_exception());
  }
}

const CliCommand kComm("bench", 40, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "comm", "fp32 MPI_Allreduce vs allreduce_q8, and DP training steps fp32 vs q8 (run under mpirun -np N)");
  c->add_option("--sizes", args->sizes_mib, "gradient sizes in MiB of fp32")->delimiter(',');
  c->add_option("--reps", args->reps, "timed repetitions per size (median)")
      ->check(cli_at_least(1))
      ->capture_default_str();
  c->add_option("--block", args->block, "values per q8 scale")->check(cli_at_least(1))->capture_default_str();
  c->add_option("--chunk-kib", args->chunk_kib, "allreduce_q8's pipeline chunk in KiB of fp32 (0: one chunk)")
      ->check(cli_at_least(0))
      ->capture_default_str();
  c->add_flag("--json", args->json, "print JSON");
  c->add_option("--e2e-steps", args->e2e_steps, "end-to-end DP training: timed steps per config and round (0: skip)")
      ->check(cli_at_least(0))
      ->capture_default_str();
  c->add_option("--e2e-dim", args->e2e_dim, "end-to-end model: hidden size")
      ->check(cli_at_least(1))
      ->capture_default_str();
  c->add_option("--e2e-layers", args->e2e_layers, "end-to-end model: layers")
      ->check(cli_at_least(1))
      ->capture_default_str();
  c->add_option("--e2e-vocab", args->e2e_vocab, "end-to-end model: vocabulary size")
      ->check(cli_at_least(1))
      ->capture_default_str();
  c->add_option("--e2e-accum", args->e2e_accum, "end-to-end: micro-batches per rank and step")
      ->check(cli_at_least(1))
      ->capture_default_str();
  c->add_flag("--e2e-only", args->e2e_only, "only the end-to-end part (no all-reduce sizes)");
  c->callback([args] { bench_comm_run(*args); });
});

}  // namespace
}  // namespace agoq

// `agoq bench comm`: fp32 MPI_Allreduce against allreduce_q8 on 1, 16, 64 and 256 MiB of fp32 gradients, with
// allreduce_q8's time split into its phases. Run it under mpirun (mpirun -np 2 agoq bench comm); only rank 0
// prints. Times are medians over --reps runs, each started and ended by a barrier.
#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "comm/allreduce_q8.h"
#include "comm/communicator.h"
#include "core/memory.h"
#include "core/rng.h"

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Args {
  std::vector<int> sizes_mib{1, 16, 64, 256};
  int reps = 5;
  int block = 256;
  bool json = false;
};

struct Row {
  int mib;
  double mpi, q8, quantize, alltoall, reduce, allgather, dequantize;  // ms
};

Row bench_comm_size(Communicator& comm, CommQ8Workspace& ws, int mib, const Args& a) {
  const size_t n = size_t(mib) << 18;  // fp32 values in mib MiB
  Buffer<float> in(n, MemCategory::communication, "bench.comm"), out(n, MemCategory::communication, "bench.comm");
  Rng rng(17, uint64_t(comm.rank()));
  for (size_t i = 0; i < n; ++i) in[i] = rng.normal() * 1e-3f;
  CommQ8Options o;
  o.block = a.block;
  auto timed = [&](auto&& op) {
    comm.barrier();
    const auto t0 = Clock::now();
    op();
    comm.barrier();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::vector<double> mpi, q8, ph[5];
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1 warms up (page faults, workspace growth)
    const double t_mpi = timed([&] { comm.allreduce(in.data(), out.data(), n, CommDtype::f32, CommOp::sum); });
    const double t_q8 = timed([&] { comm_allreduce_q8(comm, ws, in.data(), out.data(), n, o); });
    if (rep < 0) continue;
    mpi.push_back(t_mpi), q8.push_back(t_q8);
    const CommQ8Times& t = ws.times;
    const double p[5] = {t.quantize, t.alltoall, t.reduce, t.allgather, t.dequantize};
    for (int k = 0; k < 5; ++k) ph[k].push_back(1e3 * p[k]);
  }
  return {mib, median(mpi), median(q8), median(ph[0]), median(ph[1]), median(ph[2]), median(ph[3]), median(ph[4])};
}

void bench_comm_run(const Args& a) {
  Communicator& comm = comm_world();
  comm_run_guarded(comm, [&] {
    AGOQ_CHECK(a.reps >= 1, "bench comm: --reps must be at least 1");
    for (int s : a.sizes_mib) AGOQ_CHECK(s >= 1 && s <= 4096, "bench comm: sizes are MiB in [1, 4096], got ", s);
    CommQ8Workspace ws;
    std::vector<Row> rows;
    for (int mib : a.sizes_mib) rows.push_back(bench_comm_size(comm, ws, mib, a));
    if (comm.rank() != 0) return;
    const int N = comm.size();
    if (a.json) {
      nlohmann::json j;
      j["ranks"] = N, j["block"] = a.block, j["reps"] = a.reps;
      for (const Row& r : rows)
        j["results"].push_back({{"mib", r.mib}, {"ranks", N}, {"mpi_ms", r.mpi}, {"q8_ms", r.q8},
                                {"quantize_ms", r.quantize}, {"alltoall_ms", r.alltoall}, {"reduce_ms", r.reduce},
                                {"allgather_ms", r.allgather}, {"dequantize_ms", r.dequantize},
                                {"speedup", r.q8 > 0 ? r.mpi / r.q8 : 0.0}});
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("all-reduce of fp32 gradients, N = %d ranks, q8 block %d, median of %d (phases: rank 0)\n", N,
                a.block, a.reps);
    std::printf("%8s %10s %10s %9s %9s %9s %9s %9s %8s\n", "size", "MPI ms", "q8 ms", "quant", "a2a", "reduce",
                "allgath", "dequant", "speedup");
    for (const Row& r : rows)
      std::printf("%4d MiB %10.2f %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2fx\n", r.mib, r.mpi, r.q8, r.quantize,
                  r.alltoall, r.reduce, r.allgather, r.dequantize, r.q8 > 0 ? r.mpi / r.q8 : 0.0);
    if (N == 1) std::printf("(one rank: both are copies; run under mpirun -np 2 or more)\n");
  });
}

const CliCommand kComm("bench", 40, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand("comm", "fp32 MPI_Allreduce vs allreduce_q8 (run under mpirun -np N)");
  c->add_option("--sizes", args->sizes_mib, "gradient sizes in MiB of fp32")->delimiter(',');
  c->add_option("--reps", args->reps, "timed repetitions per size (median)");
  c->add_option("--block", args->block, "values per q8 scale");
  c->add_flag("--json", args->json, "print JSON");
  c->callback([args] { bench_comm_run(*args); });
});

}  // namespace
}  // namespace agoq

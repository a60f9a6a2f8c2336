// `agoq bench tp` (under mpirun -np N, N even, e.g. 4): the same global batch of m micro-batches per step on the
// same N ranks as tensor x data parallelism (TP 2 x DP N/2), pipeline x data parallelism (PP 2 x DP N/2) and data
// parallelism alone (DP N), fp32 everything; the TP grid also with sequence parallelism (SP) and with AGoQ's
// activations, q8 gradients and q8 all-reduce. Prints step time, tokens/s, the time in tensor-parallel collectives
// and the data-parallel wait per step, and every rank's peak memory by category. Configurations alternate round by
// round, so they see the same machine load.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "cli/commands.h"
#include "comm/communicator.h"
#include "core/memory.h"
#include "core/memory_json.h"
#include "core/rng.h"
#include "model/llama.h"
#include "parallel/comm_tensor_group.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"
#include "parallel/step_cpu.h"
#include "train/forward_backward.h"

namespace agoq {
namespace {

using Clock = std::chrono::steady_clock;

using Args = BenchGridArgs;

struct Config {
  std::string name;
  int tp, pp;
  bool sp;    // sequence parallelism on the TP ranks
  bool agoq;  // agoq activations, q8 gradient store and all-reduce; else fp32 everything
  std::vector<double> step_ms, tp_ms, dp_wait_ms;
  std::vector<MemSnapshot> peak;  // per world rank, each category's own peak over the steps
};

// One configuration: set-up, one warm-up step, `steps` timed steps (rank 0's TP and DP waits); the memory of the
// first round is recorded.
void bench_tp_round(Communicator& world, const Args& a, Config& c, bool record_memory) {
  const LlamaConfig cfg = bench_grid_model(a);
  const ParallelGrid grid = parallel_grid_make(world, c.pp, c.tp);
  const int m = a.micro / grid.D, B = a.batch, T = a.seq;
  const ModelStage stage =
      model_stage_shard(cfg, model_stages_split(cfg, grid.P)[grid.stage], grid.T, grid.tp_rank, c.sp);
  CpuStepOptions o;
  o.stages = grid.pipe, o.tensor = grid.tp;
  if (c.agoq) o.store.kind = GradStoreKind::q8, o.reduce = GradReduce::q8;
  GradStore grads(cfg, stage, o.store);
  std::unique_ptr<CommTensorGroup> group = grid.tp ? std::make_unique<CommTensorGroup>(*grid.tp) : nullptr;
  LlamaModel model(cfg, B, T, ActPolicy::parse(c.agoq ? "agoq" : "fp32", cfg.n_layers), stage,
                   pipeline_in_flight(grid.P, grid.stage, m), grads.model_storage(), group.get());
  model.init_weights(7);
  CpuStep dp(*grid.dp, model.params(), grads, o);
  std::unique_ptr<Pipeline> pipe = grid.P > 1 ? std::make_unique<Pipeline>(*grid.pipe, model, B, T) : nullptr;
  std::vector<int32_t> in(size_t(m) * B * T), tgt(in.size());
  Rng rng(11, uint64_t(grid.replica));  // every shard and stage of a replica trains on the same tokens
  MemoryTracker::global().reset_peaks();
  for (int s = 0; s <= a.steps; ++s) {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
    world.barrier();
    if (group) group->seconds_take();
    const auto t0 = Clock::now();
    const std::vector<MicroBatchRun> runs = dp.step_begin(s + 1, m);
    const StepResult r = step_finish(dp, 1e-3f,
                                     pipe ? pipe->run(in.data(), tgt.data(), B, T, runs, &dp)
                                          : train_forward_backward(dp, model, in.data(), tgt.data(), B, T, runs));
    world.barrier();
    if (s == 0) continue;
    c.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    c.tp_ms.push_back(group ? group->seconds_take() * 1e3 : 0.0);
    c.dp_wait_ms.push_back(r.wait_s * 1e3);
  }
  if (!record_memory) return;
  const MemSnapshot mine = MemoryTracker::global().peak_per_category();
  c.peak.resize(world.size());
  world.allgather(&mine, c.peak.data(), sizeof(MemSnapshot));
}

void bench_tp_print(const Args& a, int N, const std::vector<Config>& cfgs) {
  const double tokens = double(a.micro) * a.batch * a.seq;
  if (a.json) {
    nlohmann::json j = {{"ranks", N},
                        {"model",
                         {{"dim", a.dim},
                          {"layers", a.layers},
                          {"vocab", a.vocab},
                          {"batch", a.batch},
                          {"seq", a.seq},
                          {"micro_batches", a.micro}}}};
    for (const Config& c : cfgs) {
      nlohmann::json r = {{"name", c.name},
                          {"tp", c.tp},
                          {"pp", c.pp},
                          {"sp", c.sp},
                          {"agoq", c.agoq},
                          {"step_ms", bench_median(c.step_ms)},
                          {"tokens_per_s", tokens / bench_median(c.step_ms) * 1e3},
                          {"tp_comm_ms", bench_median(c.tp_ms)},
                          {"dp_wait_ms", bench_median(c.dp_wait_ms)}};
      for (const MemSnapshot& p : c.peak) r["peak_per_rank"].push_back(mem_bytes_json(p.bytes));
      j["results"].push_back(r);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("one step = %d micro-batches of %dx%d tokens on %d ranks (dim %d, %d layers, vocab %d); median of %d\n",
              a.micro, a.batch, a.seq, N, a.dim, a.layers, a.vocab, a.steps * a.rounds);
  std::printf(
      "communication (rank 0): TP comm = time in the layers' collectives, DP wait = the gradient\n"
      "reduction not hidden behind backward\n\n");
  const double base = bench_median(cfgs.back().step_ms);
  std::printf("%-34s %9s %10s %8s %11s %11s\n", "configuration", "step ms", "tokens/s", "vs DP", "TP comm ms",
              "DP wait ms");
  for (const Config& c : cfgs) {
    const double ms = bench_median(c.step_ms);
    std::printf("%-34s %9.1f %10.0f %7.2fx %11.1f %11.1f\n", c.name.c_str(), ms, tokens / ms * 1e3, base / ms,
                bench_median(c.tp_ms), bench_median(c.dp_wait_ms));
  }
  std::vector<std::string> names;
  std::vector<std::vector<MemSnapshot>> peaks;
  for (const Config& c : cfgs) names.push_back(c.name), peaks.push_back(c.peak);
  bench_print_rank_memory(names, peaks);
}

void bench_tp_run(const Args& a) {
  Communicator& world = comm_world();
  try {
    const int N = world.size();
    AGOQ_CHECK(N >= 2 && N % 2 == 0, "bench tp: run it under mpirun -np N with an even N >= 2 (e.g. 4)");
    AGOQ_CHECK(a.micro >= N && a.micro % N == 0, "bench tp: --micro (", a.micro, ") must be a multiple of the ranks (",
               N, ") so data parallelism gets whole micro-batches");
    AGOQ_CHECK(a.layers >= 2, "bench tp: --layers (", a.layers, ") must be at least 2 (two pipeline stages)");
    AGOQ_CHECK(a.steps >= 1 && a.rounds >= 1, "bench tp: --steps and --rounds must be >= 1");
    const std::string dp = std::to_string(N / 2);
    const std::string tp = "TP 2 x DP " + dp;
    std::vector<Config> cfgs = {{tp + ", fp32", 2, 1, false, false, {}, {}, {}, {}},
                                {tp + " + SP, fp32", 2, 1, true, false, {}, {}, {}, {}},
                                {tp + ", agoq + q8", 2, 1, false, true, {}, {}, {}, {}},
                                {tp + " + SP, agoq + q8", 2, 1, true, true, {}, {}, {}, {}},
                                {"PP 2 x DP " + dp + ", fp32", 1, 2, false, false, {}, {}, {}, {}},
                                {"DP " + std::to_string(N) + ", fp32", 1, 1, false, false, {}, {}, {}, {}}};
    for (int round = 0; round < a.rounds; ++round)
      for (Config& c : cfgs) bench_tp_round(world, a, c, round == 0);
    if (world.rank() == 0) bench_tp_print(a, N, cfgs);
  } catch (...) {
    comm_fail(world, std::current_exception());
  }
}

const CliCommand kTp("bench", 46, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "tp",
      "tensor x data vs pipeline x data vs data parallelism on the same ranks: step time, communication and "
      "memory per rank (mpirun -np 4)");
  bench_grid_args_add(*c, *args);
  c->callback([args] { bench_tp_run(*args); });
});

}  // namespace
}  // namespace agoq

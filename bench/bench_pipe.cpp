// `agoq bench pipe` (under mpirun -np N): the same global batch of m micro-batches per step trained two ways on the
// same N ranks — data parallelism (N replicas, m / N micro-batches each) and a 1F1B pipeline (N stages, all m
// micro-batches) — and, for the pipeline, with fp32 and AGoQ activations. Prints step time, tokens/s, the ideal 1F1B
// efficiency m / (m + N - 1), and every rank's peak memory by category: a pipeline trades the bubble for holding
// 1/N of the weights, gradients and optimizer states, and AGoQ shrinks what the first stages hold in flight.
// Configurations alternate round by round, so they see the same machine load.
#include <algorithm>
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
  int pp;           // 1: data parallel over all ranks
  std::string act;  // activation policy
  std::vector<double> step_ms;
  std::vector<MemSnapshot> peak;  // per world rank, each category's own peak over the steps
};

// One configuration: set-up, one warm-up step, `steps` timed steps; the memory of the first round is recorded.
void bench_pipe_round(Communicator& world, const Args& a, Config& c, bool record_memory) {
  const LlamaConfig cfg = bench_grid_model(a);
  const ParallelGrid grid = parallel_grid_make(world, c.pp);
  const int m = a.micro / grid.D, B = a.batch, T = a.seq;
  const std::vector<ModelStage> stages = model_stages_split(cfg, grid.P);
  CpuStepOptions o;
  o.stages = grid.pipe;
  GradStore grads(cfg, stages[grid.stage], o.store);
  LlamaModel model(cfg, B, T, ActPolicy::parse(c.act, cfg.n_layers), stages[grid.stage],
                   pipeline_in_flight(grid.P, grid.stage, m), grads.model_storage());
  model.init_weights(7);
  CpuStep dp(*grid.dp, model.params(), grads, o);
  std::unique_ptr<Pipeline> pipe = grid.P > 1 ? std::make_unique<Pipeline>(*grid.pipe, model, B, T) : nullptr;
  std::vector<int32_t> in(size_t(m) * B * T), tgt(in.size());
  Rng rng(11, uint64_t(grid.replica));  // every stage of a replica trains on the same tokens
  MemoryTracker::global().reset_peaks();
  for (int s = 0; s <= a.steps; ++s) {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = int32_t(rng.below(cfg.vocab_size)), tgt[i] = int32_t(rng.below(cfg.vocab_size));
    world.barrier();
    const auto t0 = Clock::now();
    const std::vector<MicroBatchRun> runs = dp.step_begin(s + 1, m);
    step_finish(dp, 1e-3f,
                pipe ? pipe->run(in.data(), tgt.data(), B, T, runs, &dp)
                     : train_forward_backward(dp, model, in.data(), tgt.data(), B, T, runs));
    world.barrier();
    if (s > 0) c.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (!record_memory) return;
  const MemSnapshot mine = MemoryTracker::global().peak_per_category();
  c.peak.resize(world.size());
  world.allgather(&mine, c.peak.data(), sizeof(MemSnapshot));
}

void bench_pipe_run(const Args& a) {
  Communicator& world = comm_world();
  try {
    const int N = world.size();
    AGOQ_CHECK(N >= 2, "bench pipe: run it under mpirun -np N with N >= 2 (a pipeline needs ranks)");
    AGOQ_CHECK(a.micro >= N && a.micro % N == 0, "bench pipe: --micro (", a.micro,
               ") must be a multiple of the ranks (", N, ") so data parallelism gets whole micro-batches");
    AGOQ_CHECK(a.layers >= N, "bench pipe: --layers (", a.layers, ") must be at least the ranks (", N, ")");
    AGOQ_CHECK(a.steps >= 1 && a.rounds >= 1, "bench pipe: --steps and --rounds must be >= 1");
    std::vector<Config> cfgs = {{"data parallel, fp32 activations", 1, "fp32", {}, {}},
                                {"1F1B pipeline, fp32 activations", N, "fp32", {}, {}},
                                {"1F1B pipeline, agoq activations", N, "agoq", {}, {}}};
    for (int round = 0; round < a.rounds; ++round)
      for (Config& c : cfgs) bench_pipe_round(world, a, c, round == 0);
    if (world.rank() != 0) return;
    const double tokens = double(a.micro) * a.batch * a.seq, ideal = double(a.micro) / (a.micro + N - 1);
    if (a.json) {
      nlohmann::json j = {{"ranks", N},
                          {"ideal_1f1b_efficiency", ideal},
                          {"model",
                           {{"dim", a.dim},
                            {"layers", a.layers},
                            {"vocab", a.vocab},
                            {"batch", a.batch},
                            {"seq", a.seq},
                            {"micro_batches", a.micro}}}};
      for (const Config& c : cfgs) {
        nlohmann::json r = {{"name", c.name},
                            {"pp", c.pp},
                            {"act_policy", c.act},
                            {"step_ms", bench_median(c.step_ms)},
                            {"tokens_per_s", tokens / bench_median(c.step_ms) * 1e3}};
        for (const MemSnapshot& p : c.peak) r["peak_per_rank"].push_back(mem_bytes_json(p.bytes));
        j["results"].push_back(r);
      }
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("one step = %d micro-batches of %dx%d tokens on %d ranks (dim %d, %d layers, vocab %d); median of %d\n",
                a.micro, a.batch, a.seq, N, a.dim, a.layers, a.vocab, a.steps * a.rounds);
    std::printf("ideal 1F1B efficiency m / (m + P - 1) = %.2f\n\n", ideal);
    const double base = bench_median(cfgs[0].step_ms);
    std::printf("%-34s %9s %10s %9s\n", "configuration", "step ms", "tokens/s", "vs DP");
    for (const Config& c : cfgs) {
      const double ms = bench_median(c.step_ms);
      std::printf("%-34s %9.1f %10.0f %8.2fx\n", c.name.c_str(), ms, tokens / ms * 1e3, base / ms);
    }
    std::vector<std::string> names;
    std::vector<std::vector<MemSnapshot>> peaks;
    for (const Config& c : cfgs) names.push_back(c.name), peaks.push_back(c.peak);
    bench_print_rank_memory(names, peaks);
  } catch (...) {
    comm_fail(world, std::current_exception());
  }
}

const CliCommand kPipe("bench", 45, [](CLI::App& bench) {
  auto args = std::make_shared<Args>();
  CLI::App* c = bench.add_subcommand(
      "pipe", "data parallelism vs a 1F1B pipeline on the same ranks: step time and memory per rank (mpirun -np N)");
  bench_grid_args_add(*c, *args);
  c->callback([args] { bench_pipe_run(*args); });
});

}  // namespace
}  // namespace agoq

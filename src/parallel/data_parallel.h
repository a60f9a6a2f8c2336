// The data-parallel engine the trainer calls (docs/parallel.md): one optimizer step of D = comm.size() replicas,
// each running m micro-batches. Gradients are kept in fp32 or in 8 bits (GradStoreQ8), reduced by MPI's fp32
// all-reduce or AGoQ's allreduce_q8 (fp32 store: in 4 MiB buckets on a communication thread while backward runs),
// optionally with ZeRO-1 (AdamW state sharded over the ranks, reduce-scatter, all-gather of parameters).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/allreduce_q8.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "model/llama.h"
#include "parallel/grad_store.h"
#include "model/hf.h"
#include "optim/adamw.h"

namespace agoq {

enum class GradStoreKind : uint8_t { fp32, q8 };
enum class AllreduceKind : uint8_t { mpi, q8 };

struct DpOptions {
  GradStoreKind grad_store = GradStoreKind::fp32;
  AllreduceKind allreduce = AllreduceKind::mpi;
  bool zero = false;        // ZeRO-1
  int block = 256;          // q8 block (grad store and all-reduce)
  QuantRounding rounding = QuantRounding::stochastic;  // of the q8 grad store's accumulation
  size_t bucket_bytes = 4 << 20;
  bool overlap = true;      // fp32 store without ZeRO: reduce buckets while backward runs
  AdamWConfig adam;
  float clip = 1.0f;
  // Pipeline parallelism: the ranks holding the other stages of this replica (null: the model is whole). The loss
  // and the gradient norm are summed over them too, so every rank of the grid sees the same values.
  Communicator* stages = nullptr;
  uint64_t seed = 1337;     // stochastic rounding streams (activations, q8 gradients)
};
GradStoreKind grad_store_parse(const std::string& s);
AllreduceKind allreduce_parse(const std::string& s);

struct DpStepResult {
  double loss = 0;       // mean over all ranks' micro-batches
  double grad_norm = 0;  // global norm of the reduced gradient, before clipping
  double wait_s = 0;     // communication not hidden behind backward
};

class DataParallel {
 public:
  DataParallel(Communicator& comm, LlamaModel& model, const DpOptions& opts);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One step: m micro-batches of (B, T) tokens on this rank (inputs/targets back to back). Micro-batch j of rank r
  // is global micro-batch r * m + j: its activation rounding seed is the one a single process running all D * m
  // would use. Collective.
  DpStepResult step(long step, float lr, const int32_t* inputs, const int32_t* targets, int m, int B, int T);
  // The same step with the m micro-batches run by `micro_batches` (a pipeline schedule): it calls
  // micro_forward_begin(j) before micro-batch j's forward and micro_backward_begin(j) before its backward, runs the
  // backwards in order j = 0 .. m-1, and returns the sum of its micro-batches' losses (0 without the head).
  DpStepResult step(long step, float lr, int m, const std::function<double()>& micro_batches);
  void micro_forward_begin(int j);
  void micro_backward_begin(int j);

  // Adam moments under the checkpoint names "adam.m.<param>" / "adam.v.<param>". Without ZeRO they point into the
  // optimizer; with ZeRO, moments_gather (collective) first collects the shards into full-size buffers on rank 0
  // (elsewhere the views are empty).
  NamedTensors moments_views();
  void moments_gather();
  void moments_release();
  // Resume: moments_load_views() gives views to load a checkpoint's moments into (full-size buffers with ZeRO,
  // released by moments_scatter(), which hands every rank its part).
  NamedTensors moments_load_views();
  void moments_scatter();

 private:
  struct Unit {
    GradRange range;         // in the flat layout
    CommShard shard;         // this rank's optimizer part, relative to range.begin (all of it without ZeRO)
    std::vector<size_t> counts;  // every rank's shard size (ZeRO)
    std::vector<size_t> displs;
    size_t shard_at = 0;     // offset of this unit's shard in grad_shard_
    std::unique_ptr<AdamW> adam;
  };
  void on_grads_ready(int layer, bool first_micro, bool last_micro, uint64_t micro_seed);
  void reduce_unit(int u, float* g);  // full-unit fp32 gradient g -> reduced (shard or whole)
  double reduced_sum_squares();
  void apply(long step, float lr, float scale);

  Communicator& comm_;
  LlamaModel& model_;
  long step_ = 0;  // of the step running
  int m_ = 1;
  DpOptions opts_;
  int D_, rank_;
  std::vector<Unit> units_;
  std::unique_ptr<GradStoreQ8> q8_;           // q8 store
  std::unique_ptr<GradBuckets> buckets_;      // fp32 store without ZeRO
  CommQ8Workspace ws_;
  Buffer<float> grad_shard_;                  // ZeRO: this rank's reduced gradient shards, unit after unit
  Buffer<float> full_m_, full_v_;             // ZeRO checkpoints: gathered / loaded moments
};

}  // namespace agoq

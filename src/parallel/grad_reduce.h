// Summing a stage's gradients over its D data-parallel ranks (docs/parallel.md). Without ZeRO the reduction runs on
// a communication thread while backward computes the last micro-batch: the fp32 store's GradBuckets in place, and
// with the q8 store + allreduce_q8 each unit's 8-bit codes, all-reduced in place as soon as the unit is final
// (comm/comm_jobs.h). Otherwise every unit is reduced after the last micro-batch, last layers first: back into the
// 8-bit store (q8 store + MPI all-reduce), or reduce-scattered into this rank's fp32 shard (ZeRO-1).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/allreduce_q8.h"
#include "comm/comm_jobs.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "parallel/grad_store.h"

namespace agoq {

// A gradient unit and the part of it each rank's optimizer owns: under ZeRO-1 comm_shard_range's partition on the
// q8 block (so every unit is one collective); without, this rank owns all of it.
struct GradUnit {
  GradRange range;                     // in the flat layout
  CommShard own;                       // this rank's part, relative to range.begin
  std::vector<size_t> counts, displs;  // every rank's part (ZeRO-1 only)
};
std::vector<GradUnit> grad_units_sharded(const std::vector<GradRange>& units, int D, int rank, bool zero, int block);

struct GradReduceOptions {
  GradReduce reduce = GradReduce::fp32;
  bool zero = false;
  size_t bucket_bytes = 4 << 20;
  bool overlap = true;  // without ZeRO: reduce on a communication thread while backward runs (false: the reference)
};

// The allreduce_q8 workspace (MemCategory::communication) a GradReducer holds on data-parallel rank `rank` of D:
// the largest of its 8-bit calls (ZeRO-1's reduce-scatter of every piece, the q8 store's in-place all-reduce of
// every unit, or the fp32 store's buckets), reserved at construction. `pieces`: grad_store_pieces of the store.
CommQ8WorkspaceBytes grad_reduce_workspace_bytes(const std::vector<GradUnit>& units,
                                                 const std::vector<std::vector<GradRange>>& pieces, bool store_q8,
                                                 int block, const GradReduceOptions& o, int D, int rank, bool one_host);

class GradReducer {
 public:
  GradReducer(Communicator& comm, GradStore& store, const std::vector<GradUnit>& units, const GradReduceOptions& o);

  // Unit u's gradient of a micro-batch is final: into the store, and (last micro-batch) to the reduction.
  void unit_ready(int u, bool first_micro, bool last_micro, uint64_t seed);
  // After the last micro-batch: every unit summed over the ranks. Returns the seconds it waited (communication
  // that backward did not hide).
  double reduce();
  // Sum of squares of the whole reduced gradient (ZeRO: the shards' sums all-reduced).
  double sum_squares();
  // The parts of unit u's own part that reduced() gives one at a time, relative to the unit: the ZeRO shard, else
  // the store's pieces (GradStore::pieces).
  std::vector<GradRange> pieces(int u) const;
  // The reduced gradient of piece p of unit u, indexed in the flat layout as AdamW reads it; only the piece is
  // valid (q8 store: dequantized into its scratch, valid until the next call).
  float* reduced(int u, GradRange p);

 private:
  void reduce_piece(int u, GradRange p, float* g);  // fp32 gradient g of a piece -> reduced (shard or whole)
  void reduce_unit_codes(int u);                    // q8 store + allreduce_q8: unit u's codes summed in place

  Communicator& comm_;
  GradStore& store_;
  const std::vector<GradUnit>& units_;
  GradReduceOptions opts_;
  int D_;
  std::vector<size_t> shard_at_;  // ZeRO: offset of each unit's shard in grad_shard_
  Buffer<float> grad_shard_;      // ZeRO: this rank's reduced gradient shards, unit after unit
  CommQ8Workspace ws_;
  std::unique_ptr<GradBuckets> buckets_;  // fp32 store without ZeRO
  std::unique_ptr<CommJobs> unit_jobs_;   // q8 store + allreduce_q8 without ZeRO: job j reduces unit U-1-j
};

}  // namespace agoq

// The precision-preserving 8-bit all-reduce of AGoQ (docs/comm.md): all-to-all of INT8 shards, a full-precision
// local sum in fixed rank order, one requantization, all-gather. Every value is quantized at most twice whatever the
// number of ranks. The gradient format is quant/grad_q8.h's (INT8 symmetric, one fp32 scale per block of B values).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/memory.h"

namespace agoq {

// How data-parallel gradients are summed over ranks (`--allreduce mpi|q8`): fp32 MPI collectives (all-reduce,
// reduce-scatter), or this file's INT8 reduction. Buckets, ZeRO-1 and the q8 gradient store all take this one choice.
enum class GradReduce : uint8_t { fp32, q8 };

struct CommQ8Options {
  int block = 256;                   // B: values per scale
  bool average = false;              // divide the sum by the number of ranks
  size_t fallback_bytes = 64 << 10;  // tensors of fewer fp32 bytes go through a plain fp32 all-reduce (exact)
  // Pipelining: a tensor of more fp32 bytes is reduced in chunks of about this size, each chunk's passes overlapping
  // the other chunks' exchanges (the same bits as one chunk). 0: one chunk, the passes and exchanges in turn.
  size_t chunk_bytes = 4 << 20;
  // Ranks on one host exchange by memory copies on their own cores, with nothing to overlap: there a call runs in
  // one chunk unless this is set (tests).
  bool pipeline_one_host = false;
};

// [begin, end) of one rank's shard.
struct CommShard {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Shard `rank` of `nranks` over n values: the ceil(n / B) blocks are dealt out as evenly as possible (the first
// ranks get one more), so every boundary is a multiple of B and only the last shard may end in a short block.
// The sharded optimizer (ZeRO-1) uses this same partition.
CommShard comm_shard_range(size_t n, int nranks, int rank, int block = 256);

// Byte layout of the N messages of one call (or of one chunk of it): message k carries shard k as its codes
// (64-byte padded) followed by its fp32 block scales. The same layout serves the all-to-all (message k goes to
// rank k) and the all-gather (message k comes from rank k).
struct CommQ8Plan {
  size_t n = 0;
  size_t whole = 0, offset = 0;  // a piece [offset, offset + n) of a tensor of `whole` values (comm_q8_plan_piece)
  int nranks = 1, block = 256;
  std::vector<CommShard> shards;
  std::vector<size_t> msg_offset, msg_bytes;  // per shard
  size_t total_bytes = 0;
  size_t scales_offset(int k) const;  // within message k
};
CommQ8Plan comm_q8_plan(size_t n, int nranks, int block);
// comm_q8_plan(n, nranks, block)'s total_bytes and msg_bytes[0] without the per-rank lists, in constant time (the
// planner asks for a million ranks).
struct CommQ8PlanBytes {
  size_t total = 0, first_message = 0;
};
CommQ8PlanBytes comm_q8_plan_bytes(size_t n, int nranks, int block);
// The plan of a piece [offset, offset + n) of a tensor of `whole` values (offset on a block): the whole tensor's
// shards clipped to the piece, relative to it (some ranks' may be empty).
CommQ8Plan comm_q8_plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block);
// The pipeline's chunks of a plan: each shard of `base` cut into `chunks` runs of whole blocks (dealt out as
// comm_shard_range deals blocks), chunk c's shard k being the c-th run of base's shard k, in base's coordinates.
// So every chunk's exchange is balanced over the ranks like the whole one, and every block is reduced by the rank
// that owns it in `base`: the chunks together give base's bits.
std::vector<CommQ8Plan> comm_q8_plan_chunks(const CommQ8Plan& base, int chunks);
// How many chunks a call over `base` runs in for opts.chunk_bytes (1 up to that size, or when it is 0).
int comm_q8_chunk_count(const CommQ8Plan& base, size_t chunk_bytes);

// The workspace one call over `base` takes on rank `me` (CommQ8Workspace's two buffers): every chunk's messages
// (msgs) and the copies of its shards it receives (recv). Ranks on one host run a call in one chunk unless
// o.pipeline_one_host. Owners of a workspace reserve the largest of their calls with it; the memory model counts it.
struct CommQ8WorkspaceBytes {
  size_t msgs = 0, recv = 0;
  void grow_to(const CommQ8WorkspaceBytes& b) { msgs = std::max(msgs, b.msgs), recv = std::max(recv, b.recv); }
  size_t total() const { return msgs + recv; }
};
int comm_q8_call_chunks(const CommQ8Plan& base, bool one_host, const CommQ8Options& o);
CommQ8WorkspaceBytes comm_q8_workspace_bytes(const CommQ8Plan& base, int me, bool one_host, const CommQ8Options& o);
// Below o.fallback_bytes a tensor of `whole` values takes the exact fp32 path (no workspace), in the calls that have
// one (comm_allreduce_q8, the reduce-scatters).
inline bool comm_q8_falls_back(size_t whole, const CommQ8Options& o) {
  return whole * sizeof(float) < o.fallback_bytes;
}

// Seconds spent in each phase of the last call (the all-to-all and all-gather include waiting for slower ranks).
// In a call of several chunks the exchanges run while the passes compute: quantize, reduce and dequantize are the
// passes' time, all-to-all and all-gather only the time spent waiting for them (what the passes did not hide).
struct CommQ8Times {
  double quantize = 0, alltoall = 0, reduce = 0, allgather = 0, dequantize = 0;
  double total() const { return quantize + alltoall + reduce + allgather + dequantize; }
};

// Persistent buffers of the collective (MemCategory::communication). They grow to the largest call and are reused,
// so a training loop allocates once. Not thread-safe: one workspace per thread that calls the collective.
class CommQ8Workspace {
 public:
  const CommQ8Plan& plan(size_t n, int nranks, int block) { return plan_piece(n, 0, n, nranks, block); }
  const CommQ8Plan& plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block);  // cached
  const std::vector<CommQ8Plan>& plan_chunks(const CommQ8Plan& base, int chunks);              // cached
  uint8_t* msgs(size_t bytes);  // send (all-to-all) = receive (all-gather) buffer
  uint8_t* recv(size_t bytes);  // all-to-all receive buffer
  void reserve(const CommQ8WorkspaceBytes& b) { msgs(b.msgs), recv(b.recv); }
  CommQ8Times times;

 private:
  CommQ8Plan plan_, chunks_base_;
  std::vector<CommQ8Plan> chunks_;
  Buffer<uint8_t> msgs_, recv_;
};

// ---- the collective ----

// out = sum (or mean) over ranks of in, n values on every rank; in == out is allowed. With one rank out = in
// exactly; below opts.fallback_bytes an exact fp32 all-reduce. Deterministic: the same inputs give the same bits.
void comm_allreduce_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, float* out, size_t n,
                       const CommQ8Options& opts = {});
// The same reduction, kept in 8 bits for a caller that stores 8-bit gradients: codes[0..n) and
// scales[0..grad_q8_blocks(n, B)) in the grad_q8 layout of the whole tensor (shard boundaries are block
// boundaries). No fp32 fallback here: small tensors take the same path.
void comm_allreduce_q8_codes(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n, int8_t* codes,
                             float* scales, const CommQ8Options& opts = {});
// The same reduction on a gradient that is already in 8 bits (the q8 gradient store's): codes[0..n) and
// scales[0..grad_q8_blocks(n, B)) in the grad_q8 layout are the input and receive the result. Step 1 only packs
// the codes and scales into the messages, so the exchange starts at once. The same bits as
// comm_allreduce_q8_codes on their dequantized values, for every block of normal floats (requantizing such a block
// gives back its codes and scale: tests/comm).
void comm_allreduce_q8_codes_inplace(Communicator& comm, CommQ8Workspace& ws, int8_t* codes, float* scales, size_t n,
                                     const CommQ8Options& opts = {});
// Steps 1-3 only, for the sharded optimizer: out_shard (comm_shard_range(n, N, rank).size() values) receives this
// rank's reduced fp32 shard (quantized once); returns its range. Below the fallback size, an exact fp32
// reduce-scatter.
CommShard comm_reduce_scatter_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n, float* out_shard,
                                 const CommQ8Options& opts = {});
// The same reduce-scatter of a tensor of `whole` values, one piece [offset, offset + n) of it at a time (offset on
// a block): each rank receives its whole-tensor shard clipped to the piece (returned, relative to the piece), with
// the bits one call over the whole tensor gives it (the fallback is chosen by `whole`). For a caller that never
// holds the whole tensor in fp32.
CommShard comm_reduce_scatter_q8_piece(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t whole,
                                       size_t offset, size_t n, float* out_shard, const CommQ8Options& opts = {});

// ---- the steps (the collective above is these plus the two exchanges; tests also run them for logical ranks) ----

// Step 1: quantizes each shard of in[0..n) into its message in msgs (plan.total_bytes); shard `self`'s message
// goes to self_msg instead when given (the collective writes it straight into its own receive slot).
void comm_q8_quantize_shards(const CommQ8Plan& plan, const float* in, uint8_t* msgs, int self = -1,
                             uint8_t* self_msg = nullptr);
// Step 1 for shard k alone, into its message msg (the pipeline's unit of work between two looks at the network).
void comm_q8_quantize_shard(const CommQ8Plan& plan, int k, const float* in, uint8_t* msg);
// Step 1 from 8-bit input: copies the shards of codes[0..n) / scales (the whole tensor's grad_q8 layout) into their
// messages, like comm_q8_quantize_shards without the quantization.
void comm_q8_pack_shards(const CommQ8Plan& plan, const int8_t* codes, const float* scales, uint8_t* msgs, int self = -1,
                         uint8_t* self_msg = nullptr);
void comm_q8_pack_shard(const CommQ8Plan& plan, int k, const int8_t* codes, const float* scales, uint8_t* msg);
// Step 3: `received` holds N messages of shard k (from ranks 0..N-1, plan.msg_bytes[k] each, back to back). Sums
// them in rank order in fp32 (divides by N if average) and requantizes in one pass, block by block, writing the fp32
// shard to out_f32 and/or its requantized message to out_msg (either may be null; without out_f32 the fp32 sum
// never reaches memory).
void comm_q8_reduce_shard(const CommQ8Plan& plan, int k, const uint8_t* received, bool average, float* out_f32,
                          uint8_t* out_msg);
// Step 4: dequantizes all N messages of msgs into out[0..n).
void comm_q8_dequantize_shards(const CommQ8Plan& plan, const uint8_t* msgs, float* out);
void comm_q8_dequantize_shard(const CommQ8Plan& plan, int k, const uint8_t* msg, float* out);  // message k alone
// Step 4, 8-bit output: copies the messages' codes and scales into the whole tensor's grad_q8 layout.
void comm_q8_unpack_shards(const CommQ8Plan& plan, const uint8_t* msgs, int8_t* codes, float* scales);
void comm_q8_unpack_shard(const CommQ8Plan& plan, int k, const uint8_t* msg, int8_t* codes, float* scales);

}  // namespace agoq

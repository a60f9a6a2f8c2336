// allreduce_q8, as a recipe. N ranks each hold n fp32 gradients; shard k is comm_shard_range(n, N, k).
//
//   step 1  quantize: each shard of the local gradient -> INT8 codes + one fp32 scale per block (message k);
//           a gradient already in 8 bits (the q8 store's) is only packed into the messages
//   step 2  all-to-all: message k goes to rank k; rank k now holds shard k from every rank
//   step 3  reduce: dequantize the N copies of shard k and sum them in fp32, in rank order 0..N-1 (deterministic),
//           divide by N if averaging, requantize once -> this rank's reduced message
//   step 4  all-gather the reduced messages; dequantize all of them (or keep the codes)
//
// A value is rounded twice at most (step 1 and step 3), so the error does not grow with N (docs/comm.md derives the
// bound). Each step is one pass over memory: step 3 dequantizes, sums and requantizes one block at a time in
// registers / L1 (grad_q8_sum_requantize), so the reduced fp32 shard is never written out.
#include "comm/allreduce_q8.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "quant/grad_q8.h"

namespace agoq {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kStreamBytes = size_t(16) << 20;  // outputs from this size are written with streaming stores

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point& t0) {
  const auto t1 = Clock::now();
  const double s = std::chrono::duration<double>(t1 - t0).count();
  t0 = t1;
  return s;
}

const int8_t* msg_codes(const uint8_t* msg) { return reinterpret_cast<const int8_t*>(msg); }
const float* msg_scales(const CommQ8Plan& p, int k, const uint8_t* msg) {
  return reinterpret_cast<const float*>(msg + p.scales_offset(k));
}

void check_options(const CommQ8Options& o) {
  AGOQ_CHECK(o.block >= 1 && o.block <= 65536, "allreduce_q8: block must be in [1, 65536], got ", o.block);
}

// Steps 1-3 shared by the entry points: leaves this rank's reduced shard in out_f32 and/or its message in the msgs
// buffer (at the rank's own offset, ready for the in-place all-gather). step1(msgs, own_slot) writes every outgoing
// message, our own shard's straight into its receive slot: quantized from fp32, or packed from 8-bit codes.
template <class Step1>
void q8_reduce_to_owner(Communicator& comm, CommQ8Workspace& ws, const CommQ8Plan& p, Step1&& step1, bool average,
                        float* out_f32, bool keep_msg) {
  const int N = p.nranks, me = comm.rank();
  uint8_t* msgs = ws.msgs(p.total_bytes);
  uint8_t* recv = ws.recv(p.msg_bytes[me] * size_t(N));
  auto t = Clock::now();

  // Step 1: every shard into its outgoing message.
  step1(msgs, recv + size_t(me) * p.msg_bytes[me]);
  ws.times.quantize = seconds_since(t);

  // Step 2: all-to-all. From every rank r we receive message `me` (same size from all) at r * msg_bytes[me];
  // the message to ourselves is already in place (zero bytes through MPI).
  const size_t nr = static_cast<size_t>(N);
  std::vector<size_t> sbytes = p.msg_bytes, rbytes(nr, p.msg_bytes[me]), rdispl(nr);
  for (int r = 0; r < N; ++r) rdispl[r] = size_t(r) * p.msg_bytes[me];
  sbytes[me] = rbytes[me] = 0;
  comm.alltoallv(msgs, sbytes.data(), p.msg_offset.data(), recv, rbytes.data(), rdispl.data());
  ws.times.alltoall = seconds_since(t);

  // Step 3: sum the N copies of our shard in rank order; requantize straight into our slot of msgs.
  comm_q8_reduce_shard(p, me, recv, average, out_f32, keep_msg ? msgs + p.msg_offset[me] : nullptr);
  ws.times.reduce = seconds_since(t);
}

// Step 1 from fp32 values.
auto q8_quantizing(const CommQ8Plan& p, const float* in, int me) {
  return [&p, in, me](uint8_t* msgs, uint8_t* own_slot) { comm_q8_quantize_shards(p, in, msgs, me, own_slot); };
}

void q8_allgather(Communicator& comm, CommQ8Workspace& ws, const CommQ8Plan& p) {
  auto t = Clock::now();
  uint8_t* msgs = ws.msgs(p.total_bytes);
  const int me = comm.rank();
  comm.allgatherv(msgs + p.msg_offset[me], p.msg_bytes[me], msgs, p.msg_bytes.data(), p.msg_offset.data());
  ws.times.allgather = seconds_since(t);
}

// Exact path for one rank and for small tensors.
void fp32_allreduce(Communicator& comm, const float* in, float* out, size_t n, bool average) {
  if (in != out && n) std::memcpy(out, in, n * sizeof(float));
  if (comm.size() == 1) return;
  comm.allreduce(out, out, n, CommDtype::f32, CommOp::sum);
  if (average)
    for (size_t i = 0; i < n; ++i) out[i] /= float(comm.size());
}

}  // namespace

// ---- partition and layout ----

CommShard comm_shard_range(size_t n, int nranks, int rank, int block) {
  AGOQ_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "shard: rank ", rank, " of ", nranks);
  const size_t nb = grad_q8_blocks(n, block), per = nb / size_t(nranks), extra = nb % size_t(nranks);
  const size_t r = size_t(rank);
  const size_t b0 = r * per + std::min(r, extra), b1 = b0 + per + (r < extra ? 1 : 0);
  return {std::min(n, b0 * size_t(block)), std::min(n, b1 * size_t(block))};
}

size_t CommQ8Plan::scales_offset(int k) const { return round_up(shards[k].size(), kAlign); }

CommQ8Plan comm_q8_plan(size_t n, int nranks, int block) { return comm_q8_plan_piece(n, 0, n, nranks, block); }

CommQ8Plan comm_q8_plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block) {
  AGOQ_CHECK(offset % size_t(block) == 0 && offset + n <= whole, "allreduce_q8: piece [", offset, ", ", offset + n,
             ") of ", whole, " values does not start a block of ", block, " (internal)");
  CommQ8Plan p;
  p.n = n, p.whole = whole, p.offset = offset, p.nranks = nranks, p.block = block;
  for (int k = 0; k < nranks; ++k) {
    const CommShard w = comm_shard_range(whole, nranks, k, block);
    const size_t b = std::clamp(w.begin, offset, offset + n), e = std::clamp(w.end, offset, offset + n);
    p.shards.push_back({b - offset, e - offset});
    const size_t len = p.shards.back().size();
    p.msg_offset.push_back(p.total_bytes);
    p.msg_bytes.push_back(round_up(len, kAlign) + round_up(grad_q8_blocks(len, block) * sizeof(float), kAlign));
    p.total_bytes += p.msg_bytes.back();
  }
  return p;
}

const CommQ8Plan& CommQ8Workspace::plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block) {
  if (plan_.shards.empty() || plan_.n != n || plan_.whole != whole || plan_.offset != offset ||
      plan_.nranks != nranks || plan_.block != block)
    plan_ = comm_q8_plan_piece(whole, offset, n, nranks, block);
  return plan_;
}
uint8_t* CommQ8Workspace::msgs(size_t bytes) {
  if (msgs_.size() < bytes) msgs_ = Buffer<uint8_t>(bytes, MemCategory::communication, "comm.q8");
  return msgs_.data();
}
uint8_t* CommQ8Workspace::recv(size_t bytes) {
  if (recv_.size() < bytes) recv_ = Buffer<uint8_t>(bytes, MemCategory::communication, "comm.q8");
  return recv_.data();
}

// ---- the steps ----

void comm_q8_quantize_shards(const CommQ8Plan& p, const float* in, uint8_t* msgs, int self, uint8_t* self_msg) {
  GradQ8Options q;
  q.block = p.block;
  q.stream = p.n * sizeof(float) >= kStreamBytes;  // the codes of a large input go past the cache anyway
  for (int k = 0; k < p.nranks; ++k) {
    uint8_t* m = k == self && self_msg ? self_msg : msgs + p.msg_offset[k];
    const CommShard s = p.shards[k];
    grad_q8_quantize(in + s.begin, s.size(), reinterpret_cast<int8_t*>(m),
                     reinterpret_cast<float*>(m + p.scales_offset(k)), q);
  }
}

void comm_q8_reduce_shard(const CommQ8Plan& p, int k, const uint8_t* received, bool average, float* out_f32,
                          uint8_t* out_msg) {
  // One pass per block: the N copies are dequantized and summed in rank order (the same bits on every run and
  // every backend), divided, and requantized while the block is in registers / L1.
  const int N = p.nranks;
  std::vector<const int8_t*> codes(static_cast<size_t>(N));
  std::vector<const float*> scales(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) {
    const uint8_t* src = received + size_t(r) * p.msg_bytes[k];
    codes[r] = msg_codes(src), scales[r] = msg_scales(p, k, src);
  }
  grad_q8_sum_requantize(codes.data(), scales.data(), N, p.shards[k].size(), average ? float(N) : 1.f, out_f32,
                         out_msg ? reinterpret_cast<int8_t*>(out_msg) : nullptr,
                         out_msg ? reinterpret_cast<float*>(out_msg + p.scales_offset(k)) : nullptr, p.block);
}

void comm_q8_dequantize_shards(const CommQ8Plan& p, const uint8_t* msgs, float* out) {
  // A large output goes past the cache anyway: streaming stores skip reading every line before writing it.
  const bool stream = p.n * sizeof(float) >= kStreamBytes;
  for (int k = 0; k < p.nranks; ++k) {
    const uint8_t* m = msgs + p.msg_offset[k];
    const CommShard s = p.shards[k];
    if (stream) grad_q8_dequantize_stream(msg_codes(m), msg_scales(p, k, m), s.size(), out + s.begin, p.block);
    else grad_q8_dequantize(msg_codes(m), msg_scales(p, k, m), s.size(), out + s.begin, p.block);
  }
}

void comm_q8_pack_shards(const CommQ8Plan& p, const int8_t* codes, const float* scales, uint8_t* msgs, int self,
                         uint8_t* self_msg) {
  for (int k = 0; k < p.nranks; ++k) {
    uint8_t* m = k == self && self_msg ? self_msg : msgs + p.msg_offset[k];
    const CommShard s = p.shards[k];
    if (!s.size()) continue;
    std::memcpy(m, codes + s.begin, s.size());
    std::memcpy(m + p.scales_offset(k), scales + s.begin / size_t(p.block),
                grad_q8_blocks(s.size(), p.block) * sizeof(float));
  }
}

void comm_q8_unpack_shards(const CommQ8Plan& p, const uint8_t* msgs, int8_t* codes, float* scales) {
  for (int k = 0; k < p.nranks; ++k) {
    const uint8_t* m = msgs + p.msg_offset[k];
    const CommShard s = p.shards[k];
    if (!s.size()) continue;
    std::memcpy(codes + s.begin, m, s.size());
    std::memcpy(scales + s.begin / size_t(p.block), msg_scales(p, k, m),
                grad_q8_blocks(s.size(), p.block) * sizeof(float));
  }
}

// ---- the collectives ----

void comm_allreduce_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, float* out, size_t n,
                       const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  if (comm.size() == 1 || n * sizeof(float) < o.fallback_bytes) return fp32_allreduce(comm, in, out, n, o.average);
  const CommQ8Plan& p = ws.plan(n, comm.size(), o.block);
  q8_reduce_to_owner(comm, ws, p, q8_quantizing(p, in, comm.rank()), o.average, nullptr, true);  // steps 1-3
  q8_allgather(comm, ws, p);                                                                     // step 4
  auto t = Clock::now();
  comm_q8_dequantize_shards(p, ws.msgs(p.total_bytes), out);
  ws.times.dequantize = seconds_since(t);
}

void comm_allreduce_q8_codes(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n, int8_t* codes,
                             float* scales, const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  const CommQ8Plan& p = ws.plan(n, comm.size(), o.block);
  if (comm.size() == 1) {  // one rank: nothing to sum, quantize once
    GradQ8Options q;
    q.block = o.block;
    grad_q8_quantize(in, n, codes, scales, q);
    return;
  }
  q8_reduce_to_owner(comm, ws, p, q8_quantizing(p, in, comm.rank()), o.average, nullptr, true);
  q8_allgather(comm, ws, p);
  auto t = Clock::now();
  comm_q8_unpack_shards(p, ws.msgs(p.total_bytes), codes, scales);
  ws.times.dequantize = seconds_since(t);
}

void comm_allreduce_q8_codes_inplace(Communicator& comm, CommQ8Workspace& ws, int8_t* codes, float* scales,
                                     size_t n, const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  const int N = comm.size(), me = comm.rank();
  if (N == 1) return;  // the sum of one
  const CommQ8Plan& p = ws.plan(n, N, o.block);
  auto packing = [&](uint8_t* msgs, uint8_t* own_slot) { comm_q8_pack_shards(p, codes, scales, msgs, me, own_slot); };
  q8_reduce_to_owner(comm, ws, p, packing, o.average, nullptr, true);
  q8_allgather(comm, ws, p);
  auto t = Clock::now();
  comm_q8_unpack_shards(p, ws.msgs(p.total_bytes), codes, scales);
  ws.times.dequantize = seconds_since(t);
}

CommShard comm_reduce_scatter_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n,
                                 float* out_shard, const CommQ8Options& o) {
  return comm_reduce_scatter_q8_piece(comm, ws, in, n, 0, n, out_shard, o);
}

CommShard comm_reduce_scatter_q8_piece(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t whole,
                                       size_t offset, size_t n, float* out_shard, const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  const int N = comm.size(), me = comm.rank();
  const CommQ8Plan& p = ws.plan_piece(whole, offset, n, N, o.block);
  const CommShard mine = p.shards[me];
  if (N == 1) {
    if (n && in != out_shard) std::memcpy(out_shard, in, n * sizeof(float));
    return mine;
  }
  if (whole * sizeof(float) < o.fallback_bytes) {  // exact fp32 reduce-scatter over the same partition
    std::vector<size_t> counts(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) counts[r] = p.shards[r].size();
    comm.reduce_scatter(in, out_shard, counts.data(), CommDtype::f32, CommOp::sum);
    if (o.average)
      for (size_t i = 0; i < mine.size(); ++i) out_shard[i] /= float(N);
    return mine;
  }
  q8_reduce_to_owner(comm, ws, p, q8_quantizing(p, in, me), o.average, out_shard, /*keep_msg=*/false);
  return mine;
}

}  // namespace agoq

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
//
// Pipelined (tensors above opts.chunk_bytes): C chunks, chunk c holding the c-th run of blocks of every shard, so
// each chunk's exchange is balanced like the whole one and each block is still reduced by its shard's owner. One
// thread computes; the network works meanwhile:
//
//   for t = 0 .. C+1:
//     step 1 of chunk t, start its all-to-all          (chunk t-1's all-to-all and t-2's all-gather in flight)
//     wait for chunk t-1's all-to-all, step 3, start its all-gather
//     wait for chunk t-2's all-gather, step 4
//
// The exchanges are non-blocking collectives, started in this fixed order on every rank. Between two shards'
// passes the thread tests them: Open MPI's TCP transport moves bytes only inside MPI calls. No block crosses a
// chunk and every block takes the same steps, so the result is bit for bit that of one chunk.
#include "comm/allreduce_q8.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

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

// Message k's bytes and place for the plan's shards.
void plan_messages(CommQ8Plan& p) {
  p.msg_offset.clear(), p.msg_bytes.clear(), p.total_bytes = 0;
  for (const CommShard& s : p.shards) {
    p.msg_offset.push_back(p.total_bytes);
    const size_t scale_bytes = grad_q8_blocks(s.size(), p.block) * sizeof(float);
    p.msg_bytes.push_back(round_up(s.size(), kAlign) + round_up(scale_bytes, kAlign));
    p.total_bytes += p.msg_bytes.back();
  }
}
bool same_plan(const CommQ8Plan& a, const CommQ8Plan& b) {
  return a.n == b.n && a.whole == b.whole && a.offset == b.offset && a.nranks == b.nranks && a.block == b.block;
}

void check_options(const CommQ8Options& o) {
  AGOQ_CHECK(o.block >= 1 && o.block <= 65536, "allreduce_q8: block must be in [1, 65536], got ", o.block);
}

// The passes an entry point runs around the exchanges, for shard k of a chunk's plan p: step 1 into message msg,
// and step 4 from it.
using Q8Step1 = std::function<void(const CommQ8Plan& p, int k, uint8_t* msg)>;
using Q8Step4 = std::function<void(const CommQ8Plan& p, int k, const uint8_t* msg)>;

// One chunk's share of the workspace on rank me: its N messages, and the N copies of shard me it receives.
CommQ8WorkspaceBytes chunk_bytes(const CommQ8Plan& p, int me) {
  return {p.total_bytes, p.msg_bytes[me] * size_t(p.nranks)};
}

// One call as the recipe schedules it. Chunk c's messages lie at msg_at_[c] of the workspace's msgs buffer and the
// copies of its shard it receives at recv_at_[c] of recv, so no chunk waits for another's buffer.
class Q8Pipeline {
 public:
  Q8Pipeline(Communicator& comm, CommQ8Workspace& ws, const CommQ8Plan& base, const CommQ8Options& o)
      : comm_(comm),
        ws_(ws),
        base_(base),
        N_(comm.size()),
        me_(comm.rank()),
        chunks_(ws.plan_chunks(base, comm_q8_call_chunks(base, comm.one_host(), o))) {
    const size_t C = chunks_.size();
    msg_at_.assign(C + 1, 0), recv_at_.assign(C + 1, 0);
    for (size_t c = 0; c < C; ++c) {
      const CommQ8WorkspaceBytes b = chunk_bytes(chunks_[c], me_);
      msg_at_[c + 1] = msg_at_[c] + b.msgs, recv_at_[c + 1] = recv_at_[c] + b.recv;
    }
    msgs_ = ws.msgs(msg_at_[C]), recv_ = ws.recv(recv_at_[C]);
    a2a_.resize(C), ag_.resize(C);
  }

  // Steps 1-3, and step 4 when given; out_shard (may be null) receives this rank's reduced fp32 shard of base.
  void run(const Q8Step1& step1, bool average, float* out_shard, const Q8Step4& step4) {
    const int C = int(chunks_.size());
    t_ = Clock::now();
    for (int t = 0; t < C + (step4 ? 2 : 1); ++t) {
      if (t < C) quantize(t, step1);
      if (t >= 1 && t - 1 < C) reduce(t - 1, average, out_shard, bool(step4));
      if (step4 && t >= 2) dequantize(t - 2, step4);
    }
  }

 private:
  // Step 1 of chunk c, our own shard straight into its receive slot; then its all-to-all. From every rank r we
  // receive message `me` (the same size from all) at r * msg_bytes[me]; ours is in place (zero bytes through MPI).
  void quantize(int c, const Q8Step1& step1) {
    const CommQ8Plan& p = chunks_[c];
    uint8_t *msgs = msgs_ + msg_at_[c], *recv = recv_ + recv_at_[c];
    const size_t mine = p.msg_bytes[me_];
    for (int k = 0; k < N_; ++k) {
      step1(p, k, k == me_ ? recv + size_t(me_) * mine : msgs + p.msg_offset[k]);
      poll();
    }
    lap(ws_.times.quantize);
    const size_t nr = size_t(N_);
    std::vector<size_t> sbytes = p.msg_bytes, rbytes(nr, mine), rdispl(nr);
    for (int r = 0; r < N_; ++r) rdispl[r] = size_t(r) * mine;
    sbytes[me_] = rbytes[me_] = 0;
    const size_t* sdispl = p.msg_offset.data();
    if (chunks_.size() == 1) comm_.alltoallv(msgs, sbytes.data(), sdispl, recv, rbytes.data(), rdispl.data());
    else a2a_[c] = comm_.ialltoallv(msgs, sbytes.data(), sdispl, recv, rbytes.data(), rdispl.data());
    lap(ws_.times.alltoall);
  }

  // Step 3 of chunk c: the N copies of our shard summed in rank order, requantized straight into our slot of the
  // chunk's messages (keep_msg), which its all-gather then sends in place.
  void reduce(int c, bool average, float* out_shard, bool keep_msg) {
    const CommQ8Plan& p = chunks_[c];
    uint8_t* msgs = msgs_ + msg_at_[c];
    a2a_[c].wait();
    lap(ws_.times.alltoall);
    float* out_f32 = out_shard ? out_shard + (p.shards[me_].begin - base_.shards[me_].begin) : nullptr;
    comm_q8_reduce_shard(p, me_, recv_ + recv_at_[c], average, out_f32, keep_msg ? msgs + p.msg_offset[me_] : nullptr);
    poll();
    lap(ws_.times.reduce);
    if (!keep_msg) return;
    const uint8_t* own = msgs + p.msg_offset[me_];
    if (chunks_.size() == 1) comm_.allgatherv(own, p.msg_bytes[me_], msgs, p.msg_bytes.data(), p.msg_offset.data());
    else ag_[c] = comm_.iallgatherv(own, p.msg_bytes[me_], msgs, p.msg_bytes.data(), p.msg_offset.data());
    lap(ws_.times.allgather);
  }

  // Step 4 of chunk c, once its all-gather is complete.
  void dequantize(int c, const Q8Step4& step4) {
    const CommQ8Plan& p = chunks_[c];
    ag_[c].wait();
    lap(ws_.times.allgather);
    for (int k = 0; k < N_; ++k) {
      step4(p, k, msgs_ + msg_at_[c] + p.msg_offset[k]);
      poll();
    }
    lap(ws_.times.dequantize);
  }

  // Lets MPI move the bytes of every exchange in flight. One test of the first unfinished request drives MPI's
  // progress engine for all of them; more would cost more (with mpi_yield_when_idle, Open MPI gives the core away at
  // every test that finds nothing to do). A finished request tests as empty from then on, without calling MPI.
  void poll() {
    if (chunks_.size() == 1) return;
    for (CommRequest& r : a2a_)
      if (!r.test()) return;
    for (CommRequest& r : ag_)
      if (!r.test()) return;
  }
  void lap(double& phase) { phase += seconds_since(t_); }

  Communicator& comm_;
  CommQ8Workspace& ws_;
  const CommQ8Plan& base_;
  const int N_, me_;
  const std::vector<CommQ8Plan>& chunks_;
  std::vector<size_t> msg_at_, recv_at_;
  uint8_t *msgs_ = nullptr, *recv_ = nullptr;
  std::vector<CommRequest> a2a_, ag_;  // per chunk, until complete
  Clock::time_point t_;
};

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

// The shards of comm_shard_range come in three kinds: `extra` of per + 1 whole blocks, the rest of per whole blocks,
// and the last non-empty one, whose last block holds the tail of n (and the empty ones, of 0 bytes).
CommQ8PlanBytes comm_q8_plan_bytes(size_t n, int nranks, int block) {
  AGOQ_CHECK(nranks >= 1 && block >= 1, "allreduce_q8: ", nranks, " ranks, block ", block, " (internal)");
  const size_t B = size_t(block), D = size_t(nranks), nb = grad_q8_blocks(n, block);
  if (nb == 0) return {};
  const size_t per = nb / D, extra = nb % D, tail = n - (nb - 1) * B;
  auto message = [&](size_t blocks, size_t values) {
    return round_up(values, kAlign) + round_up(blocks * sizeof(float), kAlign);
  };
  const size_t last = per > 0 ? D - 1 : extra - 1;  // the last non-empty shard
  const size_t last_blocks = per + (last < extra ? 1 : 0);
  const size_t big = std::min(extra, last), small = per > 0 ? last - big : 0;  // whole shards before `last`
  CommQ8PlanBytes out;
  out.total = big * message(per + 1, (per + 1) * B) + small * message(per, per * B) +
              message(last_blocks, (last_blocks - 1) * B + tail);
  out.first_message = last == 0 ? message(last_blocks, (last_blocks - 1) * B + tail)
                                : message(per + (extra > 0 ? 1 : 0), (per + (extra > 0 ? 1 : 0)) * B);
  return out;
}

CommQ8Plan comm_q8_plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block) {
  AGOQ_CHECK(offset % size_t(block) == 0 && offset + n <= whole, "allreduce_q8: piece [", offset, ", ", offset + n,
             ") of ", whole, " values does not start a block of ", block, " (internal)");
  CommQ8Plan p;
  p.n = n, p.whole = whole, p.offset = offset, p.nranks = nranks, p.block = block;
  for (int k = 0; k < nranks; ++k) {
    const CommShard w = comm_shard_range(whole, nranks, k, block);
    const size_t b = std::clamp(w.begin, offset, offset + n), e = std::clamp(w.end, offset, offset + n);
    p.shards.push_back({b - offset, e - offset});
  }
  plan_messages(p);
  return p;
}

std::vector<CommQ8Plan> comm_q8_plan_chunks(const CommQ8Plan& base, int chunks) {
  AGOQ_CHECK(chunks >= 1, "allreduce_q8: ", chunks, " chunks (internal)");
  std::vector<CommQ8Plan> out(size_t(chunks), base);
  for (int c = 0; c < chunks; ++c) {
    for (int k = 0; k < base.nranks; ++k) {  // a shard starts on a block, so its runs of blocks do too
      const CommShard s = base.shards[k], run = comm_shard_range(s.size(), chunks, c, base.block);
      out[c].shards[k] = {s.begin + run.begin, s.begin + run.end};
    }
    plan_messages(out[c]);
  }
  return out;
}

int comm_q8_chunk_count(const CommQ8Plan& base, size_t chunk_bytes) {
  if (chunk_bytes == 0) return 1;
  size_t most_blocks = 0;  // more chunks than a shard has blocks would only add empty messages
  for (const CommShard& s : base.shards) most_blocks = std::max(most_blocks, grad_q8_blocks(s.size(), base.block));
  const size_t wanted = (base.n * sizeof(float) + chunk_bytes - 1) / chunk_bytes;
  return int(std::clamp<size_t>(wanted, 1, std::max<size_t>(most_blocks, 1)));
}

const CommQ8Plan& CommQ8Workspace::plan_piece(size_t whole, size_t offset, size_t n, int nranks, int block) {
  if (plan_.shards.empty() || plan_.n != n || plan_.whole != whole || plan_.offset != offset ||
      plan_.nranks != nranks || plan_.block != block)
    plan_ = comm_q8_plan_piece(whole, offset, n, nranks, block);
  return plan_;
}
const std::vector<CommQ8Plan>& CommQ8Workspace::plan_chunks(const CommQ8Plan& base, int chunks) {
  if (chunks_.empty() || !same_plan(chunks_base_, base) || int(chunks_.size()) != chunks) {
    chunks_ = comm_q8_plan_chunks(base, chunks);
    chunks_base_ = base;
  }
  return chunks_;
}
int comm_q8_call_chunks(const CommQ8Plan& base, bool one_host, const CommQ8Options& o) {
  return one_host && !o.pipeline_one_host ? 1 : comm_q8_chunk_count(base, o.chunk_bytes);
}
CommQ8WorkspaceBytes comm_q8_workspace_bytes(const CommQ8Plan& base, int me, bool one_host, const CommQ8Options& o) {
  CommQ8WorkspaceBytes total;
  for (const CommQ8Plan& c : comm_q8_plan_chunks(base, comm_q8_call_chunks(base, one_host, o))) {
    const CommQ8WorkspaceBytes b = chunk_bytes(c, me);
    total.msgs += b.msgs, total.recv += b.recv;
  }
  return total;
}

// A buffer grows by freeing the old one first (its contents are not kept), so the workspace never holds two: its
// peak is the largest call's, which is what comm_q8_workspace_bytes gives.
uint8_t* CommQ8Workspace::msgs(size_t bytes) {
  if (msgs_.size() < bytes) msgs_.reset(), msgs_ = Buffer<uint8_t>(bytes, MemCategory::communication, "comm.q8");
  return msgs_.data();
}
uint8_t* CommQ8Workspace::recv(size_t bytes) {
  if (recv_.size() < bytes) recv_.reset(), recv_ = Buffer<uint8_t>(bytes, MemCategory::communication, "comm.q8");
  return recv_.data();
}

// ---- the steps ----

void comm_q8_quantize_shard(const CommQ8Plan& p, int k, const float* in, uint8_t* m) {
  GradQ8Options q;
  q.block = p.block;
  // Codes of more than the cache holds go past it anyway; a pipeline chunk's are sent while they are still in it.
  size_t values = 0;
  for (const CommShard& t : p.shards) values += t.size();
  q.stream = values * sizeof(float) >= kStreamBytes;
  const CommShard s = p.shards[k];
  grad_q8_quantize(in + s.begin, s.size(), reinterpret_cast<int8_t*>(m),
                   reinterpret_cast<float*>(m + p.scales_offset(k)), q);
}

void comm_q8_quantize_shards(const CommQ8Plan& p, const float* in, uint8_t* msgs, int self, uint8_t* self_msg) {
  for (int k = 0; k < p.nranks; ++k)
    comm_q8_quantize_shard(p, k, in, k == self && self_msg ? self_msg : msgs + p.msg_offset[k]);
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

void comm_q8_dequantize_shard(const CommQ8Plan& p, int k, const uint8_t* m, float* out) {
  // A large output goes past the cache anyway: streaming stores skip reading every line before writing it.
  const CommShard s = p.shards[k];
  if (p.n * sizeof(float) >= kStreamBytes)
    grad_q8_dequantize_stream(msg_codes(m), msg_scales(p, k, m), s.size(), out + s.begin, p.block);
  else grad_q8_dequantize(msg_codes(m), msg_scales(p, k, m), s.size(), out + s.begin, p.block);
}

void comm_q8_dequantize_shards(const CommQ8Plan& p, const uint8_t* msgs, float* out) {
  for (int k = 0; k < p.nranks; ++k) comm_q8_dequantize_shard(p, k, msgs + p.msg_offset[k], out);
}

void comm_q8_pack_shard(const CommQ8Plan& p, int k, const int8_t* codes, const float* scales, uint8_t* m) {
  const CommShard s = p.shards[k];
  if (!s.size()) return;
  std::memcpy(m, codes + s.begin, s.size());
  std::memcpy(m + p.scales_offset(k), scales + s.begin / size_t(p.block),
              grad_q8_blocks(s.size(), p.block) * sizeof(float));
}

void comm_q8_pack_shards(const CommQ8Plan& p, const int8_t* codes, const float* scales, uint8_t* msgs, int self,
                         uint8_t* self_msg) {
  for (int k = 0; k < p.nranks; ++k)
    comm_q8_pack_shard(p, k, codes, scales, k == self && self_msg ? self_msg : msgs + p.msg_offset[k]);
}

void comm_q8_unpack_shard(const CommQ8Plan& p, int k, const uint8_t* m, int8_t* codes, float* scales) {
  const CommShard s = p.shards[k];
  if (!s.size()) return;
  std::memcpy(codes + s.begin, m, s.size());
  std::memcpy(scales + s.begin / size_t(p.block), msg_scales(p, k, m),
              grad_q8_blocks(s.size(), p.block) * sizeof(float));
}

void comm_q8_unpack_shards(const CommQ8Plan& p, const uint8_t* msgs, int8_t* codes, float* scales) {
  for (int k = 0; k < p.nranks; ++k) comm_q8_unpack_shard(p, k, msgs + p.msg_offset[k], codes, scales);
}

// ---- the collectives ----

void comm_allreduce_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, float* out, size_t n,
                       const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  if (comm.size() == 1 || comm_q8_falls_back(n, o)) return fp32_allreduce(comm, in, out, n, o.average);
  Q8Pipeline(comm, ws, ws.plan(n, comm.size(), o.block), o)
      .run([in](const CommQ8Plan& p, int k, uint8_t* m) { comm_q8_quantize_shard(p, k, in, m); }, o.average, nullptr,
           [out](const CommQ8Plan& p, int k, const uint8_t* m) { comm_q8_dequantize_shard(p, k, m, out); });
}

void comm_allreduce_q8_codes(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n, int8_t* codes,
                             float* scales, const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  if (comm.size() == 1) {  // one rank: nothing to sum, quantize once
    GradQ8Options q;
    q.block = o.block;
    grad_q8_quantize(in, n, codes, scales, q);
    return;
  }
  Q8Pipeline(comm, ws, ws.plan(n, comm.size(), o.block), o)
      .run([in](const CommQ8Plan& p, int k, uint8_t* m) { comm_q8_quantize_shard(p, k, in, m); }, o.average, nullptr,
           [=](const CommQ8Plan& p, int k, const uint8_t* m) { comm_q8_unpack_shard(p, k, m, codes, scales); });
}

void comm_allreduce_q8_codes_inplace(Communicator& comm, CommQ8Workspace& ws, int8_t* codes, float* scales, size_t n,
                                     const CommQ8Options& o) {
  check_options(o);
  ws.times = {};
  if (comm.size() == 1) return;  // the sum of one
  // Chunk c's codes are packed before any chunk's result is unpacked over them, and chunks do not overlap.
  Q8Pipeline(comm, ws, ws.plan(n, comm.size(), o.block), o)
      .run([=](const CommQ8Plan& p, int k, uint8_t* m) { comm_q8_pack_shard(p, k, codes, scales, m); }, o.average,
           nullptr,
           [=](const CommQ8Plan& p, int k, const uint8_t* m) { comm_q8_unpack_shard(p, k, m, codes, scales); });
}

CommShard comm_reduce_scatter_q8(Communicator& comm, CommQ8Workspace& ws, const float* in, size_t n, float* out_shard,
                                 const CommQ8Options& o) {
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
  if (comm_q8_falls_back(whole, o)) {  // exact fp32 reduce-scatter over the same partition
    std::vector<size_t> counts(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) counts[r] = p.shards[r].size();
    comm.reduce_scatter(in, out_shard, counts.data(), CommDtype::f32, CommOp::sum);
    if (o.average)
      for (size_t i = 0; i < mine.size(); ++i) out_shard[i] /= float(N);
    return mine;
  }
  Q8Pipeline(comm, ws, p, o)
      .run([in](const CommQ8Plan& c, int k, uint8_t* m) { comm_q8_quantize_shard(c, k, in, m); }, o.average, out_shard,
           nullptr);
  return mine;
}

}  // namespace agoq

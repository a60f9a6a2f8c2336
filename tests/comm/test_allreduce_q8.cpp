// allreduce_q8 against the exact float64 sum, the single-process simulation of its steps, and the rings it
// replaces. Runs at any world size; the N-scaling test simulates N = 2, 4, 8 logical ranks in one process with the
// same step functions the collective runs (so it needs no 8 processes on a 2-core machine), and the distributed
// tests check that the real collective gives exactly the simulation's bits.
//
// Error bound (nearest rounding), element i in block b, D = N if averaging else 1:
//   |out_i - exact_i| <= (sum_r s_rb / 2) / D + s'_b / 2 + slack_i
// s_rb = rank r's scale of block b (step 1: |x - q| <= s/2 for codes round(x / s), s = amax / 127, never clipped),
// s'_b = the reduced block's scale (step 3, one more rounding of at most s'/2); the fp32 sum of N dequantized terms
// and the division add at most (N + 4) * 2^-23 * (sum_r |x_ri| + sum_r s_rb) / D + 2^-22 |out_i| (slack_i).
// Nothing else rounds, so the bound holds for every N: per rank the first term is one half-step, and the reduced
// value is rounded once more, never N - 1 times as in a ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/allreduce_q8.h"
#include "core/rng.h"
#include "quant/grad_q8.h"
#include "quant/half.h"
#include "quant/simd.h"
#include "tests/common/bits_equal.h"

namespace agoq {
namespace {

Communicator& W() { return comm_world(); }
using Vec = std::vector<float>;

// Gradient-like data: Gaussian, 5% exact zeros, a zero run, 0.5% outliers (x100) at random places.
Vec grad_data(size_t n, uint64_t seed) {
  Rng rng(seed, 11);
  Vec v(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = rng.uniform();
    v[i] = u < 0.05f ? 0.f : rng.normal() * 1e-3f * (u > 0.995f ? 100.f : 1.f);
  }
  for (size_t i = n / 3; i < std::min(n, n / 3 + 300); ++i) v[i] = 0.f;
  return v;
}

std::vector<Vec> allgather_inputs(Communicator& w, const Vec& mine) {
  std::vector<float> all(mine.size() * w.size());
  w.allgather(mine.data(), all.data(), mine.size() * sizeof(float));
  std::vector<Vec> xs(w.size());
  for (int r = 0; r < w.size(); ++r) xs[r].assign(all.begin() + r * mine.size(), all.begin() + (r + 1) * mine.size());
  return xs;
}

// The collective for N logical ranks in one process: the same step functions, the exchanges done by memcpy, over
// the given number of pipeline chunks (their order does not matter here: each chunk's steps touch only its blocks).
// Optionally returns the reduced block scales.
Vec simulate_allreduce_q8(const std::vector<Vec>& xs, int block, bool average, Vec* red_scales = nullptr,
                          int chunks = 1) {
  const int N = int(xs.size());
  const size_t n = xs[0].size();
  Vec out(n);
  std::vector<int8_t> codes(n);
  if (red_scales) red_scales->assign(grad_q8_blocks(n, block), 0.f);
  for (const CommQ8Plan& p : comm_q8_plan_chunks(comm_q8_plan(n, N, block), chunks)) {
    std::vector<std::vector<uint8_t>> sent(N, std::vector<uint8_t>(p.total_bytes));
    for (int r = 0; r < N; ++r) comm_q8_quantize_shards(p, xs[r].data(), sent[r].data());  // step 1
    std::vector<uint8_t> gathered(p.total_bytes);
    for (int k = 0; k < N; ++k) {
      std::vector<uint8_t> recv(p.msg_bytes[k] * N);  // step 2
      for (int r = 0; r < N; ++r)
        if (p.msg_bytes[k]) std::memcpy(&recv[r * p.msg_bytes[k]], &sent[r][p.msg_offset[k]], p.msg_bytes[k]);
      comm_q8_reduce_shard(p, k, recv.data(), average, nullptr, gathered.data() + p.msg_offset[k]);
    }
    comm_q8_dequantize_shards(p, gathered.data(), out.data());  // step 4
    if (red_scales) comm_q8_unpack_shards(p, gathered.data(), codes.data(), red_scales->data());
  }
  return out;
}

std::vector<double> exact_sum(const std::vector<Vec>& xs, bool average) {
  std::vector<double> s(xs[0].size(), 0.0);
  for (const Vec& x : xs)
    for (size_t i = 0; i < s.size(); ++i) s[i] += x[i];
  if (average)
    for (double& v : s) v /= double(xs.size());
  return s;
}

double rel_l2(const Vec& out, const std::vector<double>& exact) {
  double e = 0, t = 0;
  for (size_t i = 0; i < out.size(); ++i) e += (out[i] - exact[i]) * (out[i] - exact[i]), t += exact[i] * exact[i];
  return t > 0 ? std::sqrt(e / t) : std::sqrt(e);
}

// Checks the bound of the header comment element by element; returns the number of violations.
size_t check_bound(const std::vector<Vec>& xs, const Vec& out, const Vec& red_scales, int block, bool average) {
  const int N = int(xs.size());
  const size_t n = out.size();
  const double D = average ? N : 1, u = std::ldexp(1.0, -23);
  std::vector<Vec> scales(N, Vec(grad_q8_blocks(n, block)));
  std::vector<int8_t> codes(n);
  GradQ8Options q;
  q.block = block;
  // Shard boundaries are block boundaries, so quantizing the whole vector gives each rank's step-1 scales.
  for (int r = 0; r < N; ++r) grad_q8_quantize(xs[r].data(), n, codes.data(), scales[r].data(), q);
  const std::vector<double> ex = exact_sum(xs, average);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / size_t(block);
    double s1 = 0, ax = 0;
    for (int r = 0; r < N; ++r) s1 += scales[r][b], ax += std::fabs(xs[r][i]);
    const double bound = s1 / 2 / D + red_scales[b] / 2 + (N + 4) * u * (ax + s1) / D + 2 * u * std::fabs(out[i]);
    if (!(std::fabs(out[i] - ex[i]) <= bound) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": |err| " << std::fabs(out[i] - ex[i]) << " > bound " << bound;
  }
  return bad;
}

TEST(AllreduceQ8, ShardPartitionTilesOnBlockBoundaries) {
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(257), size_t(7919), size_t(100003)})
    for (int N : {1, 2, 3, 4, 8, 13})
      for (int B : {1, 64, 256}) {
        size_t at = 0, lo = SIZE_MAX, hi = 0;
        for (int k = 0; k < N; ++k) {
          const CommShard s = comm_shard_range(n, N, k, B);
          EXPECT_EQ(s.begin, at);
          if (s.end < n) {
            EXPECT_EQ(s.end % B, 0u);
          }
          at = s.end;
          lo = std::min(lo, grad_q8_blocks(s.size(), B)), hi = std::max(hi, grad_q8_blocks(s.size(), B));
        }
        EXPECT_EQ(at, n);
        EXPECT_LE(hi - lo, 1u) << "blocks are dealt evenly";
      }
}

// The pipeline's chunks: chunk c's shard k is the c-th run of whole blocks of the base plan's shard k (a piece's plan
// too), runs dealt evenly; together they tile every shard. Simulated for N logical ranks, any number of chunks gives
// the bits of one.
TEST(AllreduceQ8, PipelineChunksTileEveryShardAndGiveTheBitsOfOne) {
  for (size_t n : {size_t(1), size_t(255), size_t(257), size_t(7919), size_t(100003)})
    for (int N : {1, 2, 3, 5})
      for (int chunks : {1, 2, 7, 64}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", N = " + std::to_string(N) + ", " + std::to_string(chunks) +
                     " chunks");
        const int B = 256;
        const size_t offset = n > 4 * size_t(B) ? 2 * size_t(B) : 0;  // a piece of the tensor when it is long enough
        const CommQ8Plan base = comm_q8_plan_piece(n, offset, n - offset - (n > 4 * size_t(B) ? 100 : 0), N, B);
        const std::vector<CommQ8Plan> cs = comm_q8_plan_chunks(base, chunks);
        ASSERT_EQ(cs.size(), size_t(chunks));
        for (int k = 0; k < N; ++k) {
          size_t at = base.shards[k].begin, lo = SIZE_MAX, hi = 0;
          for (const CommQ8Plan& c : cs) {
            EXPECT_EQ(c.shards[k].begin, at);
            if (c.shards[k].size()) {
              EXPECT_EQ((base.offset + c.shards[k].begin) % B, 0u) << "a run starts on a block";
            }
            at = c.shards[k].end;
            const size_t blocks = grad_q8_blocks(c.shards[k].size(), B);
            lo = std::min(lo, blocks), hi = std::max(hi, blocks);
          }
          EXPECT_EQ(at, base.shards[k].end);
          EXPECT_LE(hi - lo, 1u);
        }
        std::vector<Vec> xs(N);
        for (int r = 0; r < N; ++r) xs[r] = grad_data(n, 40 + r);
        Vec one_scales, many_scales;
        const Vec one = simulate_allreduce_q8(xs, B, true, &one_scales);
        const Vec many = simulate_allreduce_q8(xs, B, true, &many_scales, chunks);
        EXPECT_TRUE(bits_equal(one.data(), many.data(), n * sizeof(float)));
        EXPECT_TRUE(bits_equal(one_scales.data(), many_scales.data(), one_scales.size() * sizeof(float)));
      }
  const CommQ8Plan p = comm_q8_plan(size_t(16) << 20, 2, 256);  // 64 MiB of fp32 in 4 MiB chunks
  EXPECT_EQ(comm_q8_chunk_count(p, size_t(4) << 20), 16);
  EXPECT_EQ(comm_q8_chunk_count(p, 0), 1);
  EXPECT_EQ(comm_q8_chunk_count(p, size_t(64) << 20), 1);
  EXPECT_EQ(comm_q8_chunk_count(comm_q8_plan(1000, 2, 256), 1), 2) << "no more chunks than a shard has blocks";
}

// The pipelined collectives against one chunk (chunk_bytes 0: the steps and exchanges in turn), bit for bit, on 2
// and 3 ranks and the whole world: every entry point, sizes below one chunk, not a multiple of it, and tiny ones;
// chunks of one block per shard (chunk_bytes 1), of 3 blocks and of 64 KiB of fp32.
TEST(AllreduceQ8, PipelinedEqualsOneChunkBitForBit) {
  Communicator& w = W();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 or more ranks (ctest runs it as comm_np2 and comm_np4)";
  for (int ranks : {2, 3, w.size()}) {
    if (ranks > w.size()) continue;
    const std::unique_ptr<Communicator> sub = w.split(w.rank() < ranks ? 0 : -1, w.rank());
    if (!sub) continue;
    Communicator& c = *sub;
    CommQ8Workspace ws;
    for (size_t n : {size_t(0), size_t(1), size_t(300), size_t(7919), size_t(300007)})
      for (size_t chunk_bytes : {size_t(1), size_t(3 * 256 * 4), size_t(64) << 10})
        for (bool average : {false, true}) {
          if (chunk_bytes < 10000 && n > 10000) continue;  // hundreds of chunks: seconds on a loaded machine
          SCOPED_TRACE(std::to_string(ranks) + " ranks, n = " + std::to_string(n) + ", chunks of " +
                       std::to_string(chunk_bytes) + " bytes" + (average ? ", average" : ", sum"));
          CommQ8Options one, many;
          one.fallback_bytes = many.fallback_bytes = 0;
          one.average = many.average = average;
          one.chunk_bytes = 0, many.chunk_bytes = chunk_bytes;
          many.pipeline_one_host = true;  // ctest's ranks share one host
          const Vec x = grad_data(n, 60 + c.rank());
          const size_t nb = grad_q8_blocks(n, 256);
          Vec a(n), b = x;  // b: in place
          comm_allreduce_q8(c, ws, x.data(), a.data(), n, one);
          comm_allreduce_q8(c, ws, b.data(), b.data(), n, many);
          EXPECT_TRUE(bits_equal(a.data(), b.data(), n * sizeof(float))) << "allreduce_q8";
          std::vector<int8_t> ca(n), cb(n);
          Vec sa(nb), sb(nb);
          comm_allreduce_q8_codes(c, ws, x.data(), n, ca.data(), sa.data(), one);
          comm_allreduce_q8_codes(c, ws, x.data(), n, cb.data(), sb.data(), many);
          EXPECT_EQ(ca, cb) << "allreduce_q8_codes";
          EXPECT_TRUE(bits_equal(sa.data(), sb.data(), nb * sizeof(float)));
          grad_q8_quantize(x.data(), n, ca.data(), sa.data());  // the 8-bit input path, in place
          cb = ca, sb = sa;
          comm_allreduce_q8_codes_inplace(c, ws, ca.data(), sa.data(), n, one);
          comm_allreduce_q8_codes_inplace(c, ws, cb.data(), sb.data(), n, many);
          EXPECT_EQ(ca, cb) << "allreduce_q8_codes_inplace";
          EXPECT_TRUE(bits_equal(sa.data(), sb.data(), nb * sizeof(float)));
          const CommShard s = comm_shard_range(n, ranks, c.rank());
          Vec ra(s.size()), rb(s.size());
          comm_reduce_scatter_q8(c, ws, x.data(), n, ra.data(), one);
          comm_reduce_scatter_q8(c, ws, x.data(), n, rb.data(), many);
          EXPECT_TRUE(bits_equal(ra.data(), rb.data(), s.size() * sizeof(float))) << "reduce_scatter_q8";
          const size_t at = n > 1000 ? 3 * 256 : 0, m = n - at - (n > 1000 ? 5 : 0);  // a piece of the tensor
          comm_reduce_scatter_q8_piece(c, ws, x.data() + at, n, at, m, ra.data(), one);
          const CommShard got = comm_reduce_scatter_q8_piece(c, ws, x.data() + at, n, at, m, rb.data(), many);
          EXPECT_TRUE(bits_equal(ra.data(), rb.data(), got.size() * sizeof(float))) << "reduce_scatter_q8_piece";
        }
  }
}

// The workspace a call leaves allocated is what comm_q8_workspace_bytes says, in one chunk and in many, on every
// rank (shard 0 holds the extra blocks, so ranks differ); a larger call grows it without holding two.
TEST(AllreduceQ8, WorkspaceIsWhatItsBytesSay) {
  Communicator& c = W();
  if (c.size() < 2) GTEST_SKIP() << "needs 2 or more ranks (ctest runs it as comm_np2 and comm_np4)";
  MemoryTracker& t = MemoryTracker::global();
  for (bool chunked : {false, true}) {
    CommQ8Options o;
    o.fallback_bytes = 0, o.chunk_bytes = chunked ? 3 * 256 * 4 : 0, o.pipeline_one_host = chunked;
    CommQ8Workspace ws;
    const size_t before = t.current().bytes[int(MemCategory::communication)];
    t.reset_peaks();
    CommQ8WorkspaceBytes most;
    for (size_t n : {size_t(7919), size_t(300), size_t(30011)}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (chunked ? ", chunked" : ", one chunk"));
      const Vec x = grad_data(n, 3 + c.rank());
      Vec y(n);
      comm_allreduce_q8(c, ws, x.data(), y.data(), n, o);
      most.grow_to(comm_q8_workspace_bytes(comm_q8_plan(n, c.size(), o.block), c.rank(), c.one_host(), o));
      EXPECT_EQ(t.current().bytes[int(MemCategory::communication)] - before, most.total());
    }
    EXPECT_EQ(t.peak_per_category().bytes[int(MemCategory::communication)] - before, most.total())
        << "never two at once";
  }
}

// Lengths 0, 1, N-1, primes, not multiples of N or of the block; the q8 path forced for all of them.
TEST(AllreduceQ8, MatchesExactSumWithinBlockBoundAndSimulation) {
  Communicator& w = W();
  const int N = w.size();
  CommQ8Workspace ws;
  for (size_t n : {size_t(0), size_t(1), size_t(N - 1), size_t(N + 1), size_t(257), size_t(7919), size_t(65537),
                   size_t(131071), size_t(1000003)})
    for (bool average : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (average ? " average" : " sum"));
      const Vec mine = grad_data(n, 100 + w.rank());
      const std::vector<Vec> xs = allgather_inputs(w, mine);
      CommQ8Options o;
      o.average = average;
      o.fallback_bytes = 0;
      Vec out(n), dq(n);
      comm_allreduce_q8(w, ws, mine.data(), out.data(), n, o);
      std::vector<int8_t> codes(n);
      Vec scales(grad_q8_blocks(n, o.block));
      comm_allreduce_q8_codes(w, ws, mine.data(), n, codes.data(), scales.data(), o);
      grad_q8_dequantize(codes.data(), scales.data(), n, dq.data(), o.block);
      if (N == 1) {  // one rank: nothing to reduce, the values come back unchanged
        EXPECT_TRUE(bits_equal(out.data(), mine.data(), n * sizeof(float)));
        continue;
      }
      EXPECT_TRUE(bits_equal(out.data(), dq.data(), n * sizeof(float))) << "8-bit output = fp32 output";
      Vec sim_scales;
      const Vec sim = simulate_allreduce_q8(xs, o.block, average, &sim_scales);
      EXPECT_TRUE(bits_equal(out.data(), sim.data(), n * sizeof(float))) << "collective = simulated steps";
      EXPECT_EQ(check_bound(xs, out, scales, o.block, average), 0u);
      if (n > 1000) {
        EXPECT_LT(rel_l2(out, exact_sum(xs, average)), 0.05);
      }
    }
}

// The 8-bit input path (the q8 gradient store's buffers, accumulated with stochastic rounding as the store does)
// against the fp32 one on the dequantized values: the same codes and scales bit for bit, as requantizing a block
// of normal floats gives back its codes and scale. A poisoned block stays poisoned.
TEST(AllreduceQ8, InPlaceCodesEqualTheDequantizedPath) {
  Communicator& w = W();
  CommQ8Workspace ws;
  for (size_t n :
       {size_t(0), size_t(1), size_t(w.size() + 1), size_t(257), size_t(7919), size_t(131071), size_t(1000003)})
    for (bool average : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (average ? " average" : " sum"));
      GradQ8Options q;
      q.rounding = QuantRounding::stochastic, q.seed = {uint64_t(w.rank()), 1};
      std::vector<int8_t> codes(n), ref_codes(n);
      Vec scales(grad_q8_blocks(n, q.block)), ref_scales(scales.size()), dq(n);
      grad_q8_quantize(grad_data(n, 900 + w.rank()).data(), n, codes.data(), scales.data(), q);
      q.seed.seed += 100;
      grad_q8_accumulate(codes.data(), scales.data(), grad_data(n, 950 + w.rank()).data(), n, q);
      grad_q8_dequantize(codes.data(), scales.data(), n, dq.data(), q.block);
      CommQ8Options o;
      o.average = average;
      comm_allreduce_q8_codes(w, ws, dq.data(), n, ref_codes.data(), ref_scales.data(), o);
      comm_allreduce_q8_codes_inplace(w, ws, codes.data(), scales.data(), n, o);
      EXPECT_EQ(codes, ref_codes);
      EXPECT_TRUE(bits_equal(scales.data(), ref_scales.data(), scales.size() * sizeof(float)));
    }
  const size_t n = 70000;  // a non-finite block on one rank poisons that block of the sum, and only it
  std::vector<int8_t> codes(n);
  Vec scales(grad_q8_blocks(n, 256));
  Vec mine = grad_data(n, 990 + w.rank());
  if (w.rank() == w.size() - 1) mine[5] = NAN;
  grad_q8_quantize(mine.data(), n, codes.data(), scales.data());
  comm_allreduce_q8_codes_inplace(w, ws, codes.data(), scales.data(), n);
  EXPECT_TRUE(std::isnan(scales[0]));
  EXPECT_TRUE(std::isfinite(scales[1]) && std::isfinite(scales.back()));
}

// bf16 ring all-reduce as NCCL would run it on bf16 gradients: the partial sum travels N-1 hops and is rounded to
// bf16 after every addition; all ranks end with the last hop's value.
Vec ring_bf16(const std::vector<Vec>& xs) {
  const size_t n = xs[0].size();
  auto bf = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  Vec out(n);
  for (size_t i = 0; i < n; ++i) {
    float acc = bf(xs[0][i]);
    for (size_t h = 1; h < xs.size(); ++h) acc = bf(acc + bf(xs[h][i]));
    out[i] = acc;
  }
  return out;
}
// The naive 8-bit ring the AGoQ all-reduce avoids: requantize the partial sum at every hop.
Vec ring_q8(const std::vector<Vec>& xs, int block) {
  const size_t n = xs[0].size();
  GradQ8Options q;
  q.block = block;
  std::vector<int8_t> codes(n);
  Vec scales(grad_q8_blocks(n, block)), acc(n);
  grad_q8_quantize(xs[0].data(), n, codes.data(), scales.data(), q);
  for (size_t h = 1; h < xs.size(); ++h) {
    grad_q8_dequantize(codes.data(), scales.data(), n, acc.data(), block);
    for (size_t i = 0; i < n; ++i) acc[i] += xs[h][i];
    grad_q8_quantize(acc.data(), n, codes.data(), scales.data(), q);
  }
  grad_q8_dequantize(codes.data(), scales.data(), n, acc.data(), block);
  return acc;
}

// Simulated in one process for N = 2, 4, 8 (identical arithmetic to the collective, checked bit for bit above; an
// np 8 run would only add 8 oversubscribed processes on 2 cores). Outliers sit in fixed channels (every 997th
// value, x30), the same on every rank as real gradient outliers do, so block statistics do not change with N.
TEST(AllreduceQ8, ErrorDoesNotGrowWithRanks) {
  const size_t n = size_t(1) << 18;
  std::vector<double> q8, bf, r8;
  for (int N : {2, 4, 8}) {
    std::vector<Vec> xs(N);
    for (int r = 0; r < N; ++r) {
      Rng rng(7, uint64_t(r));
      xs[r].resize(n);
      for (size_t i = 0; i < n; ++i) xs[r][i] = rng.normal() * (i % 997 == 0 ? 30.f : 1.f);
    }
    const std::vector<double> ex = exact_sum(xs, false);
    q8.push_back(rel_l2(simulate_allreduce_q8(xs, 256, false), ex));
    bf.push_back(rel_l2(ring_bf16(xs), ex));
    r8.push_back(rel_l2(ring_q8(xs, 256), ex));
    if (W().rank() == 0)
      std::printf("N=%d  relative L2 error: allreduce_q8 %.4f%%  int8 ring %.4f%%  bf16 ring %.4f%%\n", N,
                  100 * q8.back(), 100 * r8.back(), 100 * bf.back());
  }
  const double lo = *std::min_element(q8.begin(), q8.end()), hi = *std::max_element(q8.begin(), q8.end());
  EXPECT_LE(hi, 1.10 * lo) << "allreduce_q8's error must not grow with N";
  // The rings round at every hop, so their error grows with N; the 8-bit ring passes ours from N = 4 on.
  EXPECT_GT(r8[2], 1.3 * r8[0]);
  EXPECT_GT(bf[2], 1.3 * bf[0]);
  EXPECT_LT(q8[1], r8[1]);
  EXPECT_LT(q8[2], r8[2]);
  // A bf16 ring keeps 8 significant bits per value, against ~7 bits of the block's range for INT8, so at these N
  // it is the more accurate one (at twice the bytes); its error grows like sqrt(N) and meets ours only at
  // N in the hundreds. Recorded, not asserted: docs/comm.md discusses it.
  RecordProperty("q8_over_bf16_ring_error_N8", std::to_string(q8[2] / bf[2]));
}

TEST(AllreduceQ8, ReduceScatterThenAllgatherEqualsAllreduce) {
  Communicator& w = W();
  const int N = w.size();
  const size_t n = 100003;
  const Vec mine = grad_data(n, 300 + w.rank());
  CommQ8Workspace ws;
  CommQ8Options o;
  o.fallback_bytes = 0;
  o.average = true;
  Vec full(n);
  comm_allreduce_q8(w, ws, mine.data(), full.data(), n, o);
  const CommShard s = comm_shard_range(n, N, w.rank(), o.block);
  Vec shard(s.size());
  const CommShard got = comm_reduce_scatter_q8(w, ws, mine.data(), n, shard.data(), o);
  EXPECT_EQ(got.begin, s.begin);
  EXPECT_EQ(got.end, s.end);
  if (N > 1) {  // the all-reduce requantizes the reduced shard once more before its all-gather: do the same
    std::vector<int8_t> codes(s.size());
    Vec scales(grad_q8_blocks(s.size(), o.block));
    GradQ8Options q;
    q.block = o.block;
    grad_q8_quantize(shard.data(), s.size(), codes.data(), scales.data(), q);
    grad_q8_dequantize(codes.data(), scales.data(), s.size(), shard.data(), o.block);
  }
  std::vector<size_t> bytes(N), displs(N);
  for (int r = 0; r < N; ++r) {
    const CommShard sr = comm_shard_range(n, N, r, o.block);
    bytes[r] = sr.size() * sizeof(float), displs[r] = sr.begin * sizeof(float);
  }
  Vec gathered(n);
  w.allgatherv(shard.data(), shard.size() * sizeof(float), gathered.data(), bytes.data(), displs.data());
  EXPECT_TRUE(bits_equal(gathered.data(), full.data(), n * sizeof(float)));
}

// The reduce-scatter piece by piece (pieces that fall on one rank's shard, on several, on none of this rank's)
// gives every rank the bits of one call over the whole tensor: on the q8 path and below the fallback size.
TEST(AllreduceQ8, ReduceScatterPieceByPieceIsOneWholeCall) {
  Communicator& w = W();
  const int N = w.size();
  CommQ8Workspace ws;
  CommQ8Options o;
  o.block = 256;
  for (size_t n : {size_t(300007), size_t(10000)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const Vec mine = grad_data(n, 900 + w.rank());
    const CommShard s = comm_shard_range(n, N, w.rank(), o.block);
    Vec whole(s.size()), pieces(s.size(), -1.f);
    comm_reduce_scatter_q8(w, ws, mine.data(), n, whole.data(), o);
    const size_t len = 37 * size_t(o.block);
    size_t received = 0;
    for (size_t at = 0; at < n; at += len) {
      const size_t m = std::min(len, n - at);
      Vec part(m);
      const CommShard got = comm_reduce_scatter_q8_piece(w, ws, mine.data() + at, n, at, m, part.data(), o);
      const size_t lo = std::clamp(s.begin, at, at + m), hi = std::clamp(s.end, at, at + m);
      EXPECT_EQ(got.begin + at, lo);
      EXPECT_EQ(got.size(), hi - lo);
      if (got.size()) std::copy(part.begin(), part.begin() + got.size(), pieces.begin() + (at + got.begin - s.begin));
      received += got.size();
    }
    EXPECT_EQ(received, s.size());
    EXPECT_TRUE(bits_equal(whole.data(), pieces.data(), s.size() * sizeof(float)));
  }
}

TEST(AllreduceQ8, SmallTensorsFallBackToExactFp32Sum) {
  Communicator& w = W();
  CommQ8Workspace ws;
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(16383)}) {
    Vec mine = grad_data(n, 500 + w.rank()), out(n), ref = mine, ints(n), ints_out(n);
    comm_allreduce_q8(w, ws, mine.data(), out.data(), n);  // default: below 64 KiB
    w.allreduce_sum(ref.data(), n);
    EXPECT_TRUE(bits_equal(out.data(), ref.data(), n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) ints[i] = float(int(i % 1000) - 500 + w.rank());
    comm_allreduce_q8(w, ws, ints.data(), ints_out.data(), n);
    const int N = w.size();
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(ints_out[i], float(N * (int(i % 1000) - 500) + N * (N - 1) / 2));
  }
  // Reduce-scatter's small path: the exact fp32 reduce-scatter over the same partition.
  const Vec x = grad_data(1000, 1);
  const CommShard mine = comm_shard_range(1000, w.size(), w.rank());
  Vec s(mine.size()), sum = x;
  comm_reduce_scatter_q8(w, ws, x.data(), 1000, s.data());
  w.allreduce_sum(sum.data(), sum.size());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], sum[mine.begin + i]);
}

TEST(AllreduceQ8, DeterministicAcrossCallsAndInPlace) {
  Communicator& w = W();
  const size_t n = 300007;
  const Vec mine = grad_data(n, 700 + w.rank());
  CommQ8Workspace ws;
  CommQ8Options o;
  Vec a(n), b(n), c = mine, d(5000);
  comm_allreduce_q8(w, ws, mine.data(), a.data(), n, o);
  comm_allreduce_q8(w, ws, grad_data(5000, 9).data(), d.data(), 5000, o);  // another shape in between
  comm_allreduce_q8(w, ws, mine.data(), b.data(), n, o);
  comm_allreduce_q8(w, ws, c.data(), c.data(), n, o);
  EXPECT_TRUE(bits_equal(a.data(), b.data(), n * sizeof(float)));
  EXPECT_TRUE(bits_equal(a.data(), c.data(), n * sizeof(float)));
  // Every rank holds the same bits.
  Vec r0 = a;
  w.broadcast(r0.data(), n * sizeof(float), 0);
  EXPECT_TRUE(bits_equal(a.data(), r0.data(), n * sizeof(float)));
  // The scalar and the AVX2 kernels give the same bits, so ranks on different CPUs agree.
  quant_set_simd(false);
  comm_allreduce_q8(w, ws, mine.data(), b.data(), n, o);
  quant_set_simd(true);
  EXPECT_TRUE(bits_equal(a.data(), b.data(), n * sizeof(float)));
}

TEST(AllreduceQ8, NonFiniteInputPoisonsOnlyItsBlock) {
  Communicator& w = W();
  const size_t n = 70000;
  Vec mine = grad_data(n, 800 + w.rank()), out(n);
  if (w.rank() == w.size() - 1) mine[5] = NAN;
  CommQ8Workspace ws;
  CommQ8Options o;
  o.fallback_bytes = 0;
  comm_allreduce_q8(w, ws, mine.data(), out.data(), n, o);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_TRUE(std::isfinite(out[n - 1]));
  EXPECT_TRUE(std::isfinite(out[300]));
}

}  // namespace
}  // namespace agoq

namespace agoq {
namespace {

// The planner's constant-time byte count is the plan's, for every kind of split (more ranks than blocks, a tail
// block, exact splits).
TEST(AllreduceQ8Plan, BytesInConstantTimeEqualThePlans) {
  for (const size_t n : {size_t(1), size_t(255), size_t(256), size_t(257), size_t(4096), size_t(100003)})
    for (const int D : {1, 2, 3, 7, 16, 64, 1000})
      for (const int block : {32, 256, 1000}) {
        const CommQ8Plan p = comm_q8_plan(n, D, block);
        const CommQ8PlanBytes b = comm_q8_plan_bytes(n, D, block);
        EXPECT_EQ(b.total, p.total_bytes) << n << " " << D << " " << block;
        EXPECT_EQ(b.first_message, p.msg_bytes[0]) << n << " " << D << " " << block;
      }
  EXPECT_EQ(comm_q8_plan_bytes(0, 4, 256).total, comm_q8_plan(0, 4, 256).total_bytes);
  EXPECT_GT(comm_q8_plan_bytes(size_t(1) << 22, 1 << 30, 256).total, 0u);  // a billion ranks: no list of them
}

}  // namespace
}  // namespace agoq

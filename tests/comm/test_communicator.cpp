// Communicator operations against expected values, for any world size (1 included). Every rank runs every
// collective, so expectations use EXPECT (a failed check must not skip a collective and leave the others waiting).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/comm_check.h"
#include "comm/communicator.h"
#include "comm/communicator_solo.h"

namespace agoq {
namespace {

Communicator& W() { return comm_world(); }

// Byte i of the message from rank `from` to rank `to`.
uint8_t pattern(int from, int to, size_t i) { return uint8_t(from * 31 + to * 7 + i * 13 + 1); }
size_t uneven(int from, int to) { return size_t((from * 3 + to * 5) % 7) * 11; }  // includes zero lengths

TEST(Communicator, RankAndSize) {
  Communicator& w = W();
  EXPECT_GE(w.rank(), 0);
  EXPECT_LT(w.rank(), w.size());
  EXPECT_EQ(w.allreduce_value<int32_t>(1), w.size());
  EXPECT_EQ(w.allreduce_value<int32_t>(w.rank(), CommOp::max), w.size() - 1);
  char host[64] = {};  // one host: every rank has the same host name
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(sizeof host * size_t(w.size()));
  w.allgather(host, hosts.data(), sizeof host);
  bool same = true;
  for (int r = 0; r < w.size(); ++r) same = same && std::strcmp(hosts.data() + r * sizeof host, host) == 0;
  EXPECT_EQ(w.one_host(), w.allreduce_value<int32_t>(same ? 1 : 0, CommOp::min) == 1);
}

// A process started alone is a world of one that never starts MPI (no singleton daemon, no progress threads).
TEST(Communicator, AloneTheWorldIsOneRankWithoutMpi) {
  if (comm_started_by_launcher()) GTEST_SKIP() << "started by an MPI launcher: the world is MPI's";
  EXPECT_EQ(W().size(), 1);
  int inited = 1;
  MPI_Initialized(&inited);
  EXPECT_EQ(inited, 0);
  std::vector<int32_t> v = {1, 2}, back(2);
  W().send(v.data(), 8, 0, 5);  // to itself: delivered, in order
  W().recv(back.data(), 8, 0, 5);
  EXPECT_EQ(back, v);
  CommRequest never = W().irecv(back.data(), 8, 0, 6);
  EXPECT_FALSE(never.test());
  EXPECT_THROW(never.wait(), Error);  // MPI would wait forever
}

TEST(Communicator, AllreduceTypesAndOps) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank();
  for (size_t n : {size_t(0), size_t(1), size_t(1000)}) {
    std::vector<float> f(n), fo(n);
    std::vector<double> d(n);
    std::vector<int64_t> l(n);
    std::vector<int32_t> k(n);
    for (size_t i = 0; i < n; ++i)
      f[i] = float(r + i), d[i] = 0.5 * r + double(i), l[i] = int64_t(r) << 33, k[i] = r - int(i);
    w.allreduce(f.data(), fo.data(), n, CommDtype::f32, CommOp::sum);  // out of place
    w.allreduce_sum(d.data(), n);
    w.allreduce(l.data(), l.data(), n, CommDtype::i64, CommOp::max);
    w.allreduce(k.data(), k.data(), n, CommDtype::i32, CommOp::min);
    const double rsum = N * (N - 1) / 2.0;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(fo[i], float(rsum + double(N) * i));
      EXPECT_EQ(d[i], 0.5 * rsum + double(N) * i);
      EXPECT_EQ(l[i], int64_t(N - 1) << 33);
      EXPECT_EQ(k[i], -int(i));
    }
  }
}

TEST(Communicator, AlltoallAndAlltoallvUneven) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank();
  const size_t b = 5;
  std::vector<uint8_t> s(b * N), d(b * N);
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < b; ++i) s[p * b + i] = pattern(r, p, i);
  w.alltoall(s.data(), d.data(), b);
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < b; ++i) EXPECT_EQ(d[p * b + i], pattern(p, r, i));

  std::vector<size_t> sb(N), sd(N), rb(N), rd(N);
  size_t st = 0, rt = 0;
  for (int p = 0; p < N; ++p) sb[p] = uneven(r, p), sd[p] = st + 3, st += sb[p] + 3;  // gaps between messages
  for (int p = 0; p < N; ++p) rb[p] = uneven(p, r), rd[p] = rt, rt += rb[p];
  std::vector<uint8_t> sv(st + 1), rv(rt + 1, 0xEE);
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < sb[p]; ++i) sv[sd[p] + i] = pattern(r, p, i);
  w.alltoallv(sv.data(), sb.data(), sd.data(), rv.data(), rb.data(), rd.data());
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < rb[p]; ++i) EXPECT_EQ(rv[rd[p] + i], pattern(p, r, i));
  EXPECT_EQ(rv[rt], 0xEE);  // nothing written past the end
}

TEST(Communicator, AllgatherAndAllgathervUneven) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank();
  std::vector<int32_t> all(N * 2);
  const int32_t mine[2] = {r, -r};
  w.allgather(mine, all.data(), sizeof mine);
  for (int p = 0; p < N; ++p) {
    EXPECT_EQ(all[2 * p], p);
    EXPECT_EQ(all[2 * p + 1], -p);
  }
  all[2 * r] = 100 + r;  // in place
  w.allgather(all.data() + 2 * r, all.data(), 2 * sizeof(int32_t));
  for (int p = 0; p < N; ++p) EXPECT_EQ(all[2 * p], 100 + p);

  std::vector<size_t> rb(N), rd(N);
  size_t t = 0;
  for (int p = 0; p < N; ++p) rb[p] = uneven(p, p + 1), rd[p] = t, t += rb[p];
  std::vector<uint8_t> s(rb[r]), out(t);
  for (size_t i = 0; i < s.size(); ++i) s[i] = pattern(r, 0, i);
  w.allgatherv(s.data(), s.size(), out.data(), rb.data(), rd.data());
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < rb[p]; ++i) EXPECT_EQ(out[rd[p] + i], pattern(p, 0, i));
}

// Several non-blocking exchanges in flight at once, as allreduce_q8's pipeline runs them: started alternately, their
// count arrays gone as soon as they are started, driven by test() and completed in reverse order.
TEST(Communicator, NonBlockingAlltoallvAndAllgathervInFlightTogether) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank(), rounds = 3;
  std::vector<std::vector<uint8_t>> a2a_send(rounds), a2a_recv(rounds), gathered(rounds);
  std::vector<std::vector<size_t>> a2a_rd(rounds), ag_rd(rounds);
  std::vector<CommRequest> reqs;
  for (int j = 0; j < rounds; ++j) {
    std::vector<size_t> sb(N), sd(N), rb(N), ag_rb(N);
    size_t st = 0, rt = 0, gt = 0;
    a2a_rd[j].resize(N), ag_rd[j].resize(N);
    for (int p = 0; p < N; ++p) sb[p] = uneven(r, p) + j, sd[p] = st, st += sb[p];
    for (int p = 0; p < N; ++p) rb[p] = uneven(p, r) + j, a2a_rd[j][p] = rt, rt += rb[p];
    for (int p = 0; p < N; ++p) ag_rb[p] = uneven(p, j) + 1, ag_rd[j][p] = gt, gt += ag_rb[p];
    a2a_send[j].resize(st), a2a_recv[j].assign(rt, 0xEE), gathered[j].assign(gt, 0xEE);
    for (int p = 0; p < N; ++p)
      for (size_t i = 0; i < sb[p]; ++i) a2a_send[j][sd[p] + i] = pattern(r, p, i + j);
    uint8_t* own = gathered[j].data() + ag_rd[j][r];
    for (size_t i = 0; i < ag_rb[r]; ++i) own[i] = pattern(r, j, i);
    reqs.push_back(
        w.ialltoallv(a2a_send[j].data(), sb.data(), sd.data(), a2a_recv[j].data(), rb.data(), a2a_rd[j].data()));
    reqs.push_back(w.iallgatherv(own, ag_rb[r], gathered[j].data(), ag_rb.data(), ag_rd[j].data()));  // in place
  }
  for (int spin = 0; spin < 1000 && !reqs.front().test(); ++spin) {}
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) it->wait();
  for (int j = 0; j < rounds; ++j)
    for (int p = 0; p < N; ++p) {
      for (size_t i = 0; i < uneven(p, r) + j; ++i) EXPECT_EQ(a2a_recv[j][a2a_rd[j][p] + i], pattern(p, r, i + j));
      for (size_t i = 0; i < uneven(p, j) + 1; ++i) EXPECT_EQ(gathered[j][ag_rd[j][p] + i], pattern(p, j, i));
    }
}

TEST(Communicator, ReduceScatterUneven) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank();
  std::vector<size_t> counts(N);
  for (int p = 0; p < N; ++p) counts[p] = size_t(p % 3) * 4;  // rank 0 gets nothing
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  std::vector<double> in(total);
  for (size_t i = 0; i < total; ++i) in[i] = double(i) + r;
  std::vector<double> out(counts[r] + 1, -1.0);
  w.reduce_scatter(in.data(), out.data(), counts.data(), CommDtype::f64, CommOp::sum);
  size_t off = 0;
  for (int p = 0; p < r; ++p) off += counts[p];
  for (size_t i = 0; i < counts[r]; ++i) EXPECT_EQ(out[i], N * double(off + i) + N * (N - 1) / 2.0);
  EXPECT_EQ(out[counts[r]], -1.0);
}

TEST(Communicator, BroadcastFromLastRank) {
  Communicator& w = W();
  std::vector<uint8_t> v(300, 0);
  if (w.rank() == w.size() - 1)
    for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(7, 0, i);
  w.broadcast(v.data(), v.size(), w.size() - 1);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], pattern(7, 0, i));
  w.broadcast(nullptr, 0, 0);
}

TEST(Communicator, SendRecvRingBlockingAndNonBlocking) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank(), next = (r + 1) % N, prev = (r + N - 1) % N;
  std::vector<uint8_t> out(1000), in(1000);
  for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(r, next, i);
  // Non-blocking both ways (a blocking ring would deadlock), then a zero-length message on another tag.
  CommRequest rq = w.irecv(in.data(), in.size(), prev, 3);
  CommRequest sq = w.isend(out.data(), out.size(), next, 3);
  CommRequest rz = w.irecv(nullptr, 0, prev, 4), sz = w.isend(nullptr, 0, next, 4);
  sq.wait(), rq.wait(), rz.wait(), sz.wait();
  EXPECT_TRUE(rq.test());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(in[i], pattern(prev, r, i));
  // Blocking: even ranks send first, odd ranks receive first (pairs 0-1, 2-3, ...).
  if (N > 1 && !(N % 2 == 1 && r == N - 1)) {
    const int peer = r ^ 1;
    int32_t v = r, got = -1;
    if (r % 2 == 0) w.send(&v, sizeof v, peer), w.recv(&got, sizeof got, peer);
    else w.recv(&got, sizeof got, peer), w.send(&v, sizeof v, peer);
    EXPECT_EQ(got, peer);
  }
  EXPECT_THROW(w.isend(out.data(), 1, N, 0), Error);  // no such rank: our own check, no MPI call
}

TEST(Communicator, SplitByColorAndKey) {
  Communicator& w = W();
  const int N = w.size(), r = w.rank();
  auto sub = w.split(r % 2, -r);  // key -r reverses the order inside each color
  ASSERT_TRUE(sub);
  const int members = (N - r % 2 + 1) / 2;
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), members - 1 - r / 2);
  int color_sum = 0;
  for (int p = r % 2; p < N; p += 2) color_sum += p;
  EXPECT_EQ(sub->allreduce_value<int32_t>(r), color_sum);
  auto none = w.split(r == 0 ? -1 : 0, r);  // rank 0 joins no sub-communicator
  EXPECT_EQ(bool(none), r != 0);
  if (none) {
    EXPECT_EQ(none->size(), N - 1);
  }
}

TEST(Communicator, MpiErrorBecomesAgoqErrorNamingTheOperation) {
  Communicator& w = W();
  int32_t v = 0;
  try {
    w.broadcast(&v, sizeof v, w.size());  // no such root: every rank gets the error from MPI (alone: our check)
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const char* expected = comm_started_by_launcher() ? "MPI broadcast failed" : "broadcast: root 1 is not a rank";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  w.barrier();  // still usable
}

TEST(CommCheck, SameConfigPassesDifferentConfigNamesTheRank) {
  Communicator& w = W();
  EXPECT_NO_THROW(comm_check_consistent(w, "dim=256 layers=6"));
  if (w.size() == 1) return;
  const int odd = w.size() - 1;
  try {
    comm_check_consistent(w, w.rank() == odd ? "dim=512 layers=6" : "dim=256 layers=6", "model");
    ADD_FAILURE() << "mismatch not detected";
  } catch (const CommAgreedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(odd) + " runs a different model than rank 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace agoq

// The NCCL communicator against exact sums, on every rank of the MPI world with one GPU per rank (alone: one rank on
// one GPU). Skips, saying why, without NCCL in the build, without a usable GPU, or with fewer GPUs than ranks (NCCL
// refuses two ranks on one device). Values are small integers, so every sum is exact in fp32.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/communicator.h"
#include "comm/communicator_nccl.h"

#if AGOQ_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace agoq {
namespace {

#if AGOQ_HAVE_NCCL
// Why the NCCL tests cannot run here, or "" when they can.
std::string nccl_skip_reason(int ranks) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cudaGetLastError(), std::string("no usable GPU: ") + cudaGetErrorString(e);
  if (count < ranks)
    return std::to_string(ranks) + " ranks need as many GPUs (this machine has " + std::to_string(count) + ")";
  return "";
}

template <class T>
struct Dev {  // a device copy of a host vector (test-sized, so not through the tracker)
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    cudaMalloc(&p, n * sizeof(T) + 1);
    cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  T* p = nullptr;
  size_t n;
};
#endif

TEST(CommNccl, CollectivesGiveExactSums) {
#if !AGOQ_HAVE_NCCL
  EXPECT_FALSE(comm_nccl_available());
  GTEST_SKIP() << "this agoq was built without NCCL";
#else
  Communicator& world = comm_world();
  const std::string why = nccl_skip_reason(world.size());
  if (!why.empty()) GTEST_SKIP() << why;
  const int N = world.size(), me = world.rank();
  std::unique_ptr<Communicator> c = comm_nccl(world, me);
  ASSERT_EQ(c->size(), N);
  ASSERT_EQ(c->rank(), me);

  const size_t n = 1000;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float((me + 1) * (i % 7));
  Dev<float> dx(x);
  c->allreduce(dx.p, dx.p, n, CommDtype::f32, CommOp::sum);
  const float ranks_sum = float(N * (N + 1) / 2);
  const std::vector<float> sum = dx.host();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], ranks_sum * float(i % 7)) << i;

  // all-to-all-v: rank me sends (me + 1) bytes of value (me, to) to each rank `to`.
  std::vector<size_t> sb(N), sd(N), rb(N), rd(N);
  std::vector<uint8_t> out;
  for (int to = 0; to < N; ++to)
    sb[to] = size_t(me + 1), sd[to] = out.size(), out.insert(out.end(), me + 1, uint8_t(me * 16 + to));
  size_t total = 0;
  for (int from = 0; from < N; ++from) rb[from] = size_t(from + 1), rd[from] = total, total += rb[from];
  Dev<uint8_t> ds(out), dr(std::vector<uint8_t>(total, 0xFF));
  c->alltoallv(ds.p, sb.data(), sd.data(), dr.p, rb.data(), rd.data());
  const std::vector<uint8_t> got = dr.host();
  for (int from = 0; from < N; ++from)
    for (size_t j = 0; j < rb[from]; ++j) ASSERT_EQ(got[rd[from] + j], uint8_t(from * 16 + me)) << from;
  Dev<uint8_t> dr2(std::vector<uint8_t>(total, 0xFF));  // the non-blocking form gives the same bytes
  CommRequest pending = c->ialltoallv(ds.p, sb.data(), sd.data(), dr2.p, rb.data(), rd.data());
  pending.wait();
  EXPECT_EQ(dr2.host(), got);

  // all-gather-v in place: rank r contributes r + 1 bytes of value r.
  Dev<uint8_t> dg(std::vector<uint8_t>(total, 0));
  std::vector<uint8_t> mine(size_t(me + 1), uint8_t(me));
  cudaMemcpy(dg.p + rd[me], mine.data(), mine.size(), cudaMemcpyHostToDevice);
  c->allgatherv(dg.p + rd[me], mine.size(), dg.p, rb.data(), rd.data());
  const std::vector<uint8_t> all = dg.host();
  for (int r = 0; r < N; ++r)
    for (size_t j = 0; j < rb[r]; ++j) ASSERT_EQ(all[rd[r] + j], uint8_t(r)) << r;

  // reduce-scatter with unequal counts (rank r receives r + 2 sums), then a broadcast from the last rank.
  std::vector<size_t> counts(N);
  for (int r = 0; r < N; ++r) counts[r] = size_t(r + 2);
  const size_t whole = std::accumulate(counts.begin(), counts.end(), size_t(0));
  std::vector<float> part(whole);
  for (size_t i = 0; i < whole; ++i) part[i] = float(me + 1) * float(i);
  Dev<float> dp(part), dq(std::vector<float>(counts[me], -1.f));
  c->reduce_scatter(dp.p, dq.p, counts.data(), CommDtype::f32, CommOp::sum);
  size_t displ = 0;
  for (int r = 0; r < me; ++r) displ += counts[r];
  const std::vector<float> mine_sum = dq.host();
  for (size_t j = 0; j < counts[me]; ++j) ASSERT_EQ(mine_sum[j], ranks_sum * float(displ + j)) << j;
  Dev<float> db(std::vector<float>(16, float(me)));
  c->broadcast(db.p, 16 * sizeof(float), N - 1);
  for (float v : db.host()) ASSERT_EQ(v, float(N - 1));

  c->barrier();
  std::unique_ptr<Communicator> sub = c->split(me % 2, me);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), (N + 1 - me % 2) / 2);
#endif
}

}  // namespace
}  // namespace agoq

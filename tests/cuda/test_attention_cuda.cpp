// Causal GQA attention on the GPU (cuda/attention_cuda.h) against the float64 reference with the CPU attention's
// bounds: the output and log-sum-exp within 1e-5, dq, dk, dv within 1e-4 of finite differences of Σ o·R. Query
// blocks smaller than T and a partial last block exercise the block loop; GQA exercises the per-group batching;
// every case runs causal and with document masking (packed examples).
#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "core/error.h"
#include "cuda/attention_cuda.h"
#include "cuda/device_buffer.h"
#include "tests/common/bits_equal.h"
#include "tests/common/op_check.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

struct AttnCase {
  int B, T, H, Hkv, hd, query_block;
};
std::ostream& operator<<(std::ostream& os, AttnCase c) {
  return os << "B" << c.B << " T" << c.T << " H" << c.H << "/" << c.Hkv << " hd" << c.hd << " qb" << c.query_block;
}

template <class T>
DeviceBuffer<T> dev(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size(), MemCategory::activations, "test");
  d.upload(h.data(), h.size());
  return d;
}
std::vector<float> host(const DeviceBuffer<float>& d) {
  std::vector<float> h(d.size());
  d.download(h.data(), h.size());
  return h;
}

TEST(CudaAttention, ForwardAndBackwardMatchTheReference) {
  AGOQ_REQUIRE_GPU();
  CudaMatmul mm;
  for (AttnCase c : {AttnCase{2, 5, 4, 2, 6, 2}, AttnCase{1, 67, 4, 1, 16, 32}, AttnCase{2, 40, 8, 8, 32, 128}})
    for (bool masked : {false, true}) {  // causal, then with documents packed into the sequences
      // Document starts as the CPU op test draws them; null without masking.
      const std::vector<int32_t> starts =
          masked ? doc_starts_random(c.B, c.T, 44, c.T < 10 ? 3 : 20) : std::vector<int32_t>{};
      DeviceBuffer<int32_t> dDocs = dev(starts.empty() ? std::vector<int32_t>{0} : starts);
      const int32_t* docs = masked ? dDocs.data() : nullptr;
      const int32_t* docs_host = masked ? starts.data() : nullptr;
      const size_t nq = size_t(c.B) * c.T * c.H * c.hd, nkv = size_t(c.B) * c.T * c.Hkv * c.hd;
      const auto q = randn(nq, 40, 1.5f), k = randn(nkv, 41, 1.5f), v = randn(nkv, 42), R = randn(nq, 43);
      DeviceBuffer<float> dQ = dev(q), dK = dev(k), dV = dev(v), dR = dev(R), dO(nq, MemCategory::activations),
                          dLse(size_t(c.B) * c.H * c.T, MemCategory::activations), gQ(nq, MemCategory::activations),
                          gK(nkv, MemCategory::activations), gV(nkv, MemCategory::activations);
      CudaAttention attn(mm, c.B, c.T, c.H, c.Hkv, c.hd, c.query_block);
      EXPECT_EQ(attn.scratch_bytes(), 2 * size_t(c.H) * std::min(c.query_block, c.T) * c.T * sizeof(float)) << c;
      attn.forward(dO.data(), dLse.data(), dQ.data(), dK.data(), dV.data(), docs);
      Vec qd = to_double(q), kd = to_double(k), vd = to_double(v), Rd = to_double(R), want(nq), want_lse(dLse.size());
      ref::attention_forward(want.data(), want_lse.data(), qd.data(), kd.data(), vd.data(), c.B, c.T, c.H, c.Hkv, c.hd,
                             docs_host);
      const auto o = host(dO);
      EXPECT_LT(rel_err(o, want), 1e-5) << c;
      EXPECT_LT(rel_err(host(dLse), want_lse), 1e-5) << c;

      attn.backward(gQ.data(), gK.data(), gV.data(), dR.data(), dQ.data(), dK.data(), dV.data(), dO.data(), dLse.data(),
                    docs);
      const auto dq = host(gQ), dk = host(gK), dv = host(gV);
      Vec out(nq);
      auto loss = [&] {
        ref::attention_forward(out.data(), nullptr, qd.data(), kd.data(), vd.data(), c.B, c.T, c.H, c.Hkv, c.hd,
                               docs_host);
        return ref::dot(out, Rd);
      };
      const size_t count = c.T <= 8 ? 1000 : 25;
      EXPECT_LT(fd_err(dq.data(), qd, loss, count, 1), 1e-4) << "dq " << c;
      EXPECT_LT(fd_err(dk.data(), kd, loss, count, 2), 1e-4) << "dk " << c;
      EXPECT_LT(fd_err(dv.data(), vd, loss, count, 3), 1e-4) << "dv " << c;

      // Deterministic: a second backward gives the same bits.
      attn.backward(gQ.data(), gK.data(), gV.data(), dR.data(), dQ.data(), dK.data(), dV.data(), dO.data(), dLse.data(),
                    docs);
      EXPECT_TRUE(bits_equal(host(gK).data(), dk.data(), dk.size() * sizeof(float))) << c;
      EXPECT_TRUE(bits_equal(host(gQ).data(), dq.data(), dq.size() * sizeof(float))) << c;
    }
}

TEST(CudaAttention, RejectsBadHeadGrouping) {
  AGOQ_REQUIRE_GPU();
  CudaMatmul mm;
  EXPECT_THROW(CudaAttention(mm, 1, 8, 3, 2, 8, 128), Error);
}

}  // namespace
}  // namespace agoq

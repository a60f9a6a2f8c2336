// The INT8 gradient format on the GPU against the CPU kernels, byte for byte, and the device steps of allreduce_q8
// with P ranks simulated on one GPU (NCCL refuses two ranks on one device): quantize every shard, sum each shard's
// P copies in rank order and requantize, dequantize the gathered result -- the same bytes as the CPU's steps.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/grad_q8_cuda.h"
#include "tests/common/bits_equal.h"
#include "tests/common/quant_test_inputs.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

template <class T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  d.download(h.data(), h.size());
  return h;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size(), MemCategory::gradients);
  d.upload(h.data(), h.size());
  return d;
}

TEST(CudaGradQ8, QuantizeAccumulateDequantizeAsTheCpu) {
  AGOQ_REQUIRE_GPU();
  const size_t n = 70001;
  const std::vector<float> g1 = grad_test_values(n, 1, true), g2 = grad_test_values(n, 2, false);
  for (int block : {1, 32, 256, 4096})
    for (auto rounding : {QuantRounding::nearest, QuantRounding::stochastic}) {
      const std::string what = "block " + std::to_string(block) + (rounding == QuantRounding::nearest ? " rn" : " sr");
      GradQ8Options o;
      o.block = block, o.rounding = rounding, o.seed = {5, 6}, o.index_base = 1000;
      const size_t nb = grad_q8_blocks(n, block);
      std::vector<int8_t> codes(n);
      std::vector<float> scales(nb), out(g1);
      const size_t bad_q = grad_q8_quantize(g2.data(), n, codes.data(), scales.data(), o);
      const size_t bad_a = grad_q8_accumulate(codes.data(), scales.data(), g1.data(), n, o);
      grad_q8_dequantize_add(codes.data(), scales.data(), n, out.data(), block);

      DeviceBuffer<float> d1 = upload(g1), d2 = upload(g2), dout = upload(g1);
      DeviceBuffer<int8_t> dc(n, MemCategory::gradients);
      DeviceBuffer<float> ds(nb, MemCategory::gradients);
      EXPECT_EQ(cuda_grad_q8_quantize(d2.data(), n, dc.data(), ds.data(), o), bad_q) << what;
      EXPECT_EQ(cuda_grad_q8_accumulate(dc.data(), ds.data(), d1.data(), n, o), bad_a) << what;
      cuda_grad_q8_dequantize_add(dc.data(), ds.data(), n, dout.data(), block);
      ASSERT_TRUE(bits_equal(download(dc).data(), codes.data(), n)) << what;
      ASSERT_TRUE(bits_equal(download(ds).data(), scales.data(), nb * 4)) << what;
      ASSERT_TRUE(bits_equal(download(dout).data(), out.data(), n * 4)) << what;
      grad_q8_dequantize(codes.data(), scales.data(), n, out.data(), block);
      cuda_grad_q8_dequantize(dc.data(), ds.data(), n, dout.data(), block);
      ASSERT_TRUE(bits_equal(download(dout).data(), out.data(), n * 4)) << what;
    }
}

// The shard of rank k of P over n values, in whole blocks (as comm_shard_range splits a gradient).
std::pair<size_t, size_t> shard(size_t n, int P, int k, int block) {
  const size_t nb = grad_q8_blocks(n, block), b0 = nb * size_t(k) / size_t(P), b1 = nb * size_t(k + 1) / size_t(P);
  return {std::min(n, b0 * size_t(block)), std::min(n, b1 * size_t(block))};
}

TEST(CudaGradQ8, AllreduceStepsWithSimulatedRanksAsTheCpu) {
  AGOQ_REQUIRE_GPU();
  const int P = 4, B = 256;
  const size_t n = 100000;
  std::vector<std::vector<float>> grads;
  for (int r = 0; r < P; ++r) grads.push_back(grad_test_values(n, 40 + r, false));
  std::vector<float> cpu_out(n), gpu_out(n);
  for (int k = 0; k < P; ++k) {  // owner k's shard: step 1 on every rank, step 3 on k, step 4's dequantize
    const auto [j0, j1] = shard(n, P, k, B);
    const size_t m = j1 - j0, nb = grad_q8_blocks(m, B);
    std::vector<std::vector<int8_t>> codes(P, std::vector<int8_t>(m));
    std::vector<std::vector<float>> scales(P, std::vector<float>(nb));
    std::vector<DeviceBuffer<int8_t>> dcodes;
    std::vector<DeviceBuffer<float>> dscales;
    std::vector<const int8_t*> cp, dcp;
    std::vector<const float*> sp, dsp;
    for (int r = 0; r < P; ++r) {
      grad_q8_quantize(grads[r].data() + j0, m, codes[r].data(), scales[r].data());
      DeviceBuffer<float> dg(m, MemCategory::gradients);
      dg.upload(grads[r].data() + j0, m);
      dcodes.emplace_back(m, MemCategory::communication), dscales.emplace_back(nb, MemCategory::communication);
      cuda_grad_q8_quantize(dg.data(), m, dcodes.back().data(), dscales.back().data());
      cp.push_back(codes[r].data()), sp.push_back(scales[r].data());
      dcp.push_back(dcodes.back().data()), dsp.push_back(dscales.back().data());
    }
    std::vector<int8_t> rc(m);
    std::vector<float> rs(nb);
    grad_q8_sum_requantize(cp.data(), sp.data(), P, m, float(P), nullptr, rc.data(), rs.data(), B);
    grad_q8_dequantize(rc.data(), rs.data(), m, cpu_out.data() + j0, B);
    DeviceBuffer<int8_t> drc(m, MemCategory::communication);
    DeviceBuffer<float> drs(nb, MemCategory::communication), dy(m, MemCategory::gradients);
    cuda_grad_q8_sum_requantize(dcp.data(), dsp.data(), P, m, float(P), nullptr, drc.data(), drs.data(), B);
    cuda_grad_q8_dequantize(drc.data(), drs.data(), m, dy.data(), B);
    dy.download(gpu_out.data() + j0, m);
  }
  ASSERT_TRUE(bits_equal(cpu_out.data(), gpu_out.data(), n * 4));
}

TEST(CudaGradQ8, SumRequantizeKeepsTheFp32Sum) {
  AGOQ_REQUIRE_GPU();
  const size_t n = 5000, nb = grad_q8_blocks(n, 256);
  std::vector<int8_t> c0(n), c1(n);
  std::vector<float> s0(nb), s1(nb), y(n);
  grad_q8_quantize(grad_test_values(n, 1, false).data(), n, c0.data(), s0.data());
  grad_q8_quantize(grad_test_values(n, 2, false).data(), n, c1.data(), s1.data());
  const int8_t* cp[] = {c0.data(), c1.data()};
  const float* sp[] = {s0.data(), s1.data()};
  grad_q8_sum_requantize(cp, sp, 2, n, 1.f, y.data(), nullptr, nullptr);
  DeviceBuffer<int8_t> d0 = upload(c0), d1 = upload(c1);
  DeviceBuffer<float> e0 = upload(s0), e1 = upload(s1), dy(n, MemCategory::gradients);
  const int8_t* dcp[] = {d0.data(), d1.data()};
  const float* dsp[] = {e0.data(), e1.data()};
  cuda_grad_q8_sum_requantize(dcp, dsp, 2, n, 1.f, dy.data(), nullptr, nullptr);
  EXPECT_TRUE(bits_equal(download(dy).data(), y.data(), n * 4));
}

}  // namespace
}  // namespace agoq

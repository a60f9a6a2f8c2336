// The activation formats on the GPU against the CPU kernels: every format, byte for byte (codes, scales, mins), the
// same status counts, and decoding to the same bits. Inputs: tests/common/quant_test_inputs.h.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/quant_cuda.h"
#include "quant/half.h"
#include "quant/tensor.h"
#include "tests/common/bits_equal.h"
#include "tests/common/quant_test_inputs.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

TEST(CudaQuant, EveryFormatEncodesAndDecodesAsTheCpu) {
  AGOQ_REQUIRE_GPU();
  const QuantSeed seed{2024, 17};
  for (const QuantFormat& f : quant_test_formats())
    for (const auto& shape : quant_test_shapes()) {
      const size_t rows = shape.rows, cols = shape.cols;
      const std::string what = quant_format_name(f) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      const std::vector<float> x = quant_test_rows(rows, cols, rows * 7 + cols, true);
      QuantizedTensor cpu(f, rows, cols, MemCategory::workspace);
      const QuantStatus cs = quant_encode(cpu, x.data(), seed);

      DeviceBuffer<float> dx(x.size(), MemCategory::workspace), dy(x.size(), MemCategory::workspace);
      dx.upload(x.data(), x.size());
      DeviceQuantTensor gpu(f, rows, cols, MemCategory::workspace);
      ASSERT_EQ(gpu.bytes(), cpu.bytes()) << what;
      const QuantStatus gs = cuda_quant_encode_rows(f, dx.data(), 0, rows, cols, gpu.view(), seed);
      EXPECT_EQ(gs.nonfinite, cs.nonfinite) << what;
      EXPECT_EQ(gs.overflow_groups, cs.overflow_groups) << what;
      std::vector<uint8_t> bytes(gpu.bytes());
      gpu.data().download(bytes.data(), bytes.size());
      // Compare the sections, not the alignment padding between them (never written on either side).
      const QuantLayout l = quant_layout(f, rows, cols);
      ASSERT_TRUE(bits_equal(bytes.data(), cpu.view().codes, rows * l.code_bytes_per_row)) << what << ": codes";
      if (l.groups_per_row) {
        const size_t groups = rows * l.groups_per_row;
        ASSERT_TRUE(bits_equal(bytes.data() + l.scales_offset, cpu.view().scales, groups * 2)) << what << ": scales";
        if (!f.symmetric) {
          ASSERT_TRUE(bits_equal(bytes.data() + l.mins_offset, cpu.view().mins, groups * 4)) << what << ": mins";
        }
      }
      std::vector<float> a(x.size()), b(x.size());
      quant_decode(cpu, a.data());
      cuda_quant_decode_rows(f, gpu.view(), 0, rows, cols, dy.data());
      dy.download(b.data(), b.size());
      ASSERT_TRUE(bits_equal(a.data(), b.data(), a.size() * sizeof(float))) << what << ": decoded";
    }
}

// A producer encodes the rows it has just computed (row_begin > 0): the bytes equal one whole-tensor encode.
TEST(CudaQuant, RowRangesEqualTheWholeTensor) {
  AGOQ_REQUIRE_GPU();
  const QuantFormat f = quant_format_int(4, 128, false, QuantRounding::stochastic);
  const size_t rows = 6, cols = 384;
  const std::vector<float> x = quant_test_rows(rows, cols, 5, false);
  QuantizedTensor cpu(f, rows, cols, MemCategory::workspace);
  quant_encode(cpu, x.data(), {1, 2});
  DeviceBuffer<float> dx(x.size(), MemCategory::workspace);
  dx.upload(x.data(), x.size());
  DeviceQuantTensor gpu(f, rows, cols, MemCategory::workspace);
  for (size_t r = 0; r < rows; r += 4)
    cuda_quant_encode_rows(f, dx.data() + r * cols, r, std::min<size_t>(4, rows - r), cols, gpu.view(), {1, 2});
  std::vector<uint8_t> bytes(gpu.bytes());
  gpu.data().download(bytes.data(), bytes.size());
  const QuantLayout l = quant_layout(f, rows, cols);
  EXPECT_TRUE(bits_equal(bytes.data(), cpu.view().codes, rows * l.code_bytes_per_row));
  EXPECT_TRUE(bits_equal(bytes.data() + l.mins_offset, cpu.view().mins, rows * l.groups_per_row * 4));
}

TEST(CudaQuant, Bf16ConversionsEqualTheCpu) {
  AGOQ_REQUIRE_GPU();
  const std::vector<float> x = quant_test_rows(4, 1000, 8, true);
  DeviceBuffer<float> dx(x.size(), MemCategory::workspace), dy(x.size(), MemCategory::workspace);
  DeviceBuffer<uint16_t> dh(x.size(), MemCategory::workspace);
  dx.upload(x.data(), x.size());
  cuda_f32_to_bf16(dx.data(), x.size(), dh.data());
  cuda_bf16_to_f32(dh.data(), x.size(), dy.data());
  std::vector<uint16_t> h(x.size());
  std::vector<float> y(x.size());
  dh.download(h.data(), h.size());
  dy.download(y.data(), y.size());
  for (size_t j = 0; j < x.size(); ++j) {
    ASSERT_EQ(h[j], f32_to_bf16(x[j])) << j;
    ASSERT_EQ(float_bits(y[j]), float_bits(bf16_to_f32(h[j]))) << j;
  }
}

}  // namespace
}  // namespace agoq

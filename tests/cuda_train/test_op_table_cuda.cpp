// The op table's cases (tests/common/op_cases.h) on the CUDA backend, with fp32 and with bf16 GEMMs: the same
// references and bounds as the CPU's backends (tests/model/test_op_table.cpp; a bf16 product against the float64
// product of its bf16-rounded inputs, as the CPU's oneDNN one is). Where the device evaluates exactly the CPU's
// operations in the CPU's order (cases marked cpu_bits: the embedding, the residual add) the outputs must have the
// CPU backend's bits. Skipped without a usable GPU.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cuda_train/backend_cuda.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

class CudaOpTable : public testing::TestWithParam<int> {};

TEST_P(CudaOpTable, MatchesTheReference) {
  AGOQ_REQUIRE_GPU();
  const OpCase& c = op_cases()[size_t(GetParam())];
  if (c.host_scratch) GTEST_SKIP() << "the case measures the CPU's attention scratch on the host's tracker";
  for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16}) {
    CudaBackend gpu(precision);
    for (ModelOp op : c.ops)
      if (!gpu.supports(op)) GTEST_SKIP() << "the CUDA backend does not have " << model_op_name(op);
    if (c.gaps && !gpu.attention_gaps_supported())
      GTEST_SKIP() << "the CUDA backend has no attention with gaps (scoring runs on the CPU)";
    const std::string where = std::string("the CUDA backend, ") + enum_name(kGemmPrecisionNames, precision) + " GEMMs";
    const std::vector<OpCheck> got = c.run(gpu);
    for (const OpCheck& k : got) EXPECT_LE(k.err, k.tol) << c.name << " on " << where << ": " << k.what;
    if (!c.cpu_bits) continue;
    const std::vector<OpCheck> cpu = c.run(model_backend_cpu());
    ASSERT_EQ(got.size(), cpu.size()) << c.name;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(got[i].got.size() == cpu[i].got.size() &&
                  bits_equal(got[i].got.data(), cpu[i].got.data(), got[i].got.size() * sizeof(float)))
          << c.name << " on " << where << ": " << got[i].what << " is not the CPU backend's bits";
  }
}

std::string param_name(const testing::TestParamInfo<int>& p) {
  std::string name = op_cases()[size_t(p.param)].name;
  for (char& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpTable, testing::Range(0, int(op_cases().size())), param_name);

}  // namespace
}  // namespace agoq

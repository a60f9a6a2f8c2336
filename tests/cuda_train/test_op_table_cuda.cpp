// The op table's cases (tests/common/op_cases.h) on the CUDA backend, with fp32 and with bf16 GEMMs: the same
// references and bounds as the CPU's backends (tests/model/test_op_table.cpp; a bf16 product against the float64
// product of its bf16-rounded inputs, as the CPU's oneDNN one is). Skipped without a usable GPU.
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
  const OpCase c = op_cases()[size_t(GetParam())];
  for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16}) {
    CudaBackend gpu(precision);
    for (ModelOp op : c.ops)
      if (!gpu.supports(op)) GTEST_SKIP() << "the CUDA backend does not have " << model_op_name(op);
    for (const OpCheck& k : c.run(gpu))
      EXPECT_LE(k.err, k.tol) << c.name << " on the CUDA backend, " << enum_name(kGemmPrecisionNames, precision)
                              << " GEMMs: " << k.what;
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

// The op table's cases (tests/common/op_cases.h) on the CUDA backend, fp32 GEMMs: the same references and bounds as
// the CPU's backends (tests/model/test_op_table.cpp). Skipped without a usable GPU.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "gpu/backend_cuda.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

class CudaOpTable : public testing::TestWithParam<int> {};

TEST_P(CudaOpTable, MatchesTheReference) {
  AGOQ_REQUIRE_GPU();
  CudaBackend gpu(GemmPrecision::fp32);
  const OpCase c = op_cases()[size_t(GetParam())];
  for (ModelOp op : c.ops)
    if (!gpu.supports(op)) GTEST_SKIP() << "the CUDA backend does not have " << model_op_name(op);
  for (const OpCheck& k : c.run(gpu)) EXPECT_LE(k.err, k.tol) << c.name << " on the CUDA backend: " << k.what;
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

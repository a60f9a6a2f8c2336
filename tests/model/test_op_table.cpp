// The op table's cases (tests/common/op_cases.h) on every backend this machine has without a GPU: the CPU's, the
// timed one around it (`train --profile`) and the device-like one (the model's device paths); tests/cuda_train runs the
// same cases on the CUDA backend.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "model/backend_timed.h"
#include "model/gemm_bf16.h"
#include "tests/common/device_like_backend.h"
#include "tests/common/op_cases.h"

namespace agoq {
namespace {

enum class Backend { cpu, cpu_bf16, cpu_bf16_per_gemm, timed, device_like };

void run_case(ModelBackend& be, const OpCase& c, const char* backend) {
  for (ModelOp op : c.ops)
    if (!be.supports(op)) GTEST_SKIP() << backend << " does not have " << model_op_name(op);
  for (const OpCheck& k : c.run(be)) EXPECT_LE(k.err, k.tol) << c.name << " on " << backend << ": " << k.what;
}

class OpTable : public testing::TestWithParam<std::tuple<Backend, int>> {};

TEST_P(OpTable, MatchesTheReference) {
  const auto [backend, index] = GetParam();
  const OpCase c = op_cases()[size_t(index)];
  switch (backend) {
    case Backend::cpu: return run_case(model_backend_cpu(), c, "the CPU backend");
    case Backend::cpu_bf16:
    case Backend::cpu_bf16_per_gemm: {
      std::string isa;
      if (!gemm_bf16_supported(&isa)) GTEST_SKIP() << "this CPU has no native bf16 products (" << isa << ")";
      // Per GEMM, with blocks of at most 200 values: every weight of more than one block goes block by block.
      const bool per_gemm = backend == Backend::cpu_bf16_per_gemm;
      return run_case(
          *model_backend_cpu_bf16(per_gemm ? Bf16Weights::per_gemm : Bf16Weights::cached, 200), c,
          per_gemm ? "the CPU's bf16 backend, weights rounded per GEMM in blocks" : "the CPU's bf16 backend");
    }
    case Backend::timed: {
      TimedBackend timed(model_backend_cpu());
      run_case(timed, c, "the timed backend");
      EXPECT_GT(timed.take().total(), 0.0) << "the timed backend counted no time";
      return;
    }
    case Backend::device_like: {
      DeviceLikeBackend dev;
      return run_case(dev, c, "the device-like backend");
    }
  }
}

std::string param_name(const testing::TestParamInfo<OpTable::ParamType>& p) {
  static const char* kBackends[] = {"Cpu", "CpuBf16", "CpuBf16PerGemm", "Timed", "DeviceLike"};
  std::string name = op_cases()[size_t(std::get<1>(p.param))].name;
  for (char& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return std::string(kBackends[int(std::get<0>(p.param))]) + "_" + name;
}

INSTANTIATE_TEST_SUITE_P(Backends, OpTable,
                         testing::Combine(testing::Values(Backend::cpu, Backend::cpu_bf16, Backend::cpu_bf16_per_gemm,
                                                          Backend::timed, Backend::device_like),
                                          testing::Range(0, int(op_cases().size()))),
                         param_name);

TEST(OpTable, EveryOpHasACase) {
  std::set<int> covered;
  for (const OpCase& c : op_cases())
    for (ModelOp op : c.ops) covered.insert(int(op));
  for (int op = 0; op < kModelOpCount; ++op)
    EXPECT_TRUE(covered.count(op)) << model_op_name(ModelOp(op)) << " has no case in tests/common/op_cases.h";
}

}  // namespace
}  // namespace agoq

// The op table's cases (tests/common/op_cases.h) on every backend this machine has without a GPU: the CPU's (fp32,
// and bf16 where the CPU multiplies bf16 natively), the timed one around it (`train --profile`) and the device-like
// one (the model's device paths); tests/cuda_train runs the same cases on the CUDA backend. Beyond each case's checks
// the harness holds every case to two properties: run again on 1 and on 2 OpenMP threads its outputs keep their bits
// (the ops are deterministic, whatever the thread count: checkpoints resume exactly), and a case marked cpu_bits
// gives the fp32 CPU backend's bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "model/backend_timed.h"
#include "model/gemm_bf16.h"
#include "tests/common/device_like_backend.h"
#include "tests/common/op_cases.h"

namespace agoq {
namespace {

enum class Backend { cpu, cpu_bf16, cpu_bf16_per_gemm, timed, device_like };

// The OpenMP thread count for a scope.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

bool same_outputs(const OpCheck& a, const OpCheck& b) {
  return a.got.size() == b.got.size() && bits_equal(a.got.data(), b.got.data(), a.got.size() * sizeof(float));
}

void expect_checks_pass(const std::vector<OpCheck>& checks, const OpCase& c, const std::string& where) {
  for (const OpCheck& k : checks) EXPECT_LE(k.err, k.tol) << c.name << " on " << where << ": " << k.what;
}

void expect_same_outputs(const std::vector<OpCheck>& got, const std::vector<OpCheck>& want, const OpCase& c,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << c.name << ": " << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_outputs(got[i], want[i])) << c.name << ": " << want[i].what << " differs in its bits, " << what;
}

void run_case(ModelBackend& be, const OpCase& c, const char* backend) {
  for (ModelOp op : c.ops)
    if (!be.supports(op)) GTEST_SKIP() << backend << " does not have " << model_op_name(op);
  if (c.gaps && !be.attention_gaps_supported())
    GTEST_SKIP() << backend << " has no attention with gaps (scoring's: the CPU's backends have it)";
  if (c.host_scratch && be.device() != MemDevice::host)
    GTEST_SKIP() << backend << " counts its memory on the device's tracker, the case the CPU's scratch on the host's";
  const std::vector<OpCheck> first = c.run(be);
  expect_checks_pass(first, c, backend);
  const int now = omp_get_max_threads();
  for (const int threads : c.bits_vary_with_threads ? std::vector<int>{now} : std::vector<int>{1, 2}) {
    const ThreadCount scope(threads);
    const std::vector<OpCheck> again = c.run(be);
    const std::string where = std::string(backend) + " on " + std::to_string(threads) + " threads";
    expect_checks_pass(again, c, where);
    expect_same_outputs(again, first, c, std::string("run again on ") + std::to_string(threads) + " threads");
  }
  if (c.cpu_bits && &be != &model_backend_cpu())
    expect_same_outputs(first, c.run(model_backend_cpu()), c, std::string(backend) + " against the CPU backend");
}

class OpTable : public testing::TestWithParam<std::tuple<Backend, int>> {};

TEST_P(OpTable, MatchesTheReference) {
  const auto [backend, index] = GetParam();
  const OpCase& c = op_cases()[size_t(index)];
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

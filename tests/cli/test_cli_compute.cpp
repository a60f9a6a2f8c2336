// `--compute auto|bf16|fp32` chosen at run time: auto is bf16 where oneDNN runs bf16 natively and fp32 elsewhere,
// which a BF16 machine shows under the library's ISA cap (ONEDNN_MAX_CPU_ISA=AVX2, an AVX2-only CPU's view);
// bf16 there is one line naming the flag; the choice is in eval's JSON and in the run's checkpoint and metrics.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/openblas_core.h"
#include "model/gemm_bf16.h"
#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

class CliCompute : public CliErrors {
 protected:
  void SetUp() override {
    CliErrors::SetUp();
    std::ofstream text(d("a.txt"));
    for (int i = 0; i < 300; ++i) text << "the quick brown fox " << i << " jumps over the lazy dog\n";
  }
  void TearDown() override {
    ::unsetenv("ONEDNN_MAX_CPU_ISA");
    CliErrors::TearDown();
  }
  // The compute eval reports for the run's checkpoint.
  std::string eval_compute(const std::string& flag) {
    int status = 0;
    const std::string out = agoq_stdout(
        "eval --ckpt " + d("run/ckpt") + " --text " + d("a.txt") + " --seq 8 --max-tokens 64 --json " + flag, &status);
    EXPECT_EQ(status, 0) << out;
    return nlohmann::json::parse(out).value("compute", "");
  }
};

TEST_F(CliCompute, AutoFollowsTheCpuAndTheChoiceIsRecorded) {
  ASSERT_EQ(run_agoq("prepare --input " + d("a.txt") + " --out " + d("prep") + " --vocab-size 300").exit_code, 0);
  ASSERT_EQ(run_agoq(train({{"--data", d("prep")}, {"--compute", "auto"}})).exit_code, 0);
  std::string isa;
  const std::string native = gemm_bf16_supported(&isa) ? "bf16" : "fp32";
  const nlohmann::json trainer = nlohmann::json::parse(file_text(d("run/ckpt/trainer.json")));
  EXPECT_EQ(trainer.at("trainer").value("compute", ""), native) << isa;
  EXPECT_NE(file_text(d("run/metrics.jsonl")).find("\"compute\":\"" + native + "\""), std::string::npos);
  EXPECT_EQ(eval_compute(""), native);
  EXPECT_EQ(eval_compute("--compute fp32"), "fp32");

  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);  // what an AVX2-only CPU looks like to oneDNN
  EXPECT_EQ(eval_compute("--compute auto"), "fp32");
  expect_clean_error("eval --ckpt " + d("run/ckpt") + " --text " + d("a.txt") + " --compute bf16",
                     "--compute bf16: this CPU has no native bf16 products");
  expect_clean_error(train({{"--data", d("prep")}, {"--out", d("run2")}, {"--compute", "bf16"}}),
                     "--compute bf16: this CPU has no native bf16 products");
}

// fp32's GEMMs run OpenBLAS's AVX2 (or AVX-512) kernels on a CPU that has them, also where Debian's OpenBLAS does
// not know the CPU and would take it for a Prescott (agoq then restarts itself with OPENBLAS_CORETYPE set).
TEST_F(CliCompute, Fp32RunsOpenBlasKernelsThatUseTheCpu) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  ASSERT_EQ(run_agoq("prepare --input " + d("a.txt") + " --out " + d("prep") + " --vocab-size 300").exit_code, 0);
  ASSERT_EQ(run_agoq(train({{"--data", d("prep")}, {"--compute", "fp32"}})).exit_code, 0);
  const char* users = std::getenv("OPENBLAS_CORETYPE");
  const std::string kept = users ? users : "";
  ::unsetenv("OPENBLAS_CORETYPE");
  int status = 0;
  const std::string out = agoq_stdout(
      "eval --ckpt " + d("run/ckpt") + " --text " + d("a.txt") + " --seq 8 --max-tokens 64 --compute fp32", &status);
  if (users) ::setenv("OPENBLAS_CORETYPE", kept.c_str(), 1);
  ASSERT_EQ(status, 0) << out;
  const size_t at = out.find("OpenBLAS's ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string core = out.substr(at + 11, out.find(' ', at + 11) - (at + 11));
  EXPECT_TRUE(openblas_core_has_avx2(core)) << "OpenBLAS runs its " << core << " kernels: " << out;
}

}  // namespace
}  // namespace agoq

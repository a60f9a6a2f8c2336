// `agoq bench ops` through the real binary on a tiny model: one row per op and shape the model calls, each rated
// (GB/s for all, GFLOP/s for the GEMMs and the attention), and the ops' time inside the pass's.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/common/temp_path.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

TEST(BenchOps, RatesEveryCallTheModelMakes) {
  const fs::path out = test_temp_path("bench_ops.json"), err = test_temp_path("bench_ops.err");
  const std::string cmd = "timeout 120 " AGOQ_BIN_PATH
                          " bench ops --json --reps 2 --dim 32 --heads 4 --kv-heads 2 --ffn 48 --vocab 128 "
                          "--layers 2 --batch 2 --seq 16 >" +
                          out.string() + " 2>" + err.string();
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << std::ifstream(err).rdbuf();
  const auto j = nlohmann::json::parse(std::ifstream(out));
  fs::remove(out), fs::remove(err);
  EXPECT_GT(j["peak_gflops"].get<double>(), 0.0);
  // Both peaks are measured; the rows are rated against the one of the precision in use.
  EXPECT_GT(j["sgemm_gflops"].get<double>(), 0.0);
  const double bf16_peak = j["bf16_matmul_gflops"].get<double>();
  EXPECT_EQ(j["peak_gflops"].get<double>(), bf16_peak > 0 ? bf16_peak : j["sgemm_gflops"].get<double>());
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_LE(j["ops_ms"].get<double>(), j["pass_ms"].get<double>());
  std::set<std::string> ops;
  for (const auto& r : j["ops"]) {
    const std::string op = r["op"];
    ops.insert(op);
    EXPECT_GT(r["calls"].get<int>(), 0) << r.dump();
    EXPECT_GT(r["gbytes_per_s"].get<double>(), 0.0) << r.dump();
    const bool compute = op.rfind("matmul", 0) == 0 || op.rfind("attention", 0) == 0;
    EXPECT_EQ(r.contains("gflops"), compute) << r.dump();
  }
  for (const char* op :
       {"matmul_forward", "matmul_backward", "rmsnorm_forward", "rmsnorm_backward", "rope_forward", "rope_backward",
        "swiglu_forward", "swiglu_backward", "crossentropy_forward_backward", "embedding_forward", "embedding_backward",
        "residual_add", "attention_forward", "attention_backward"})
    EXPECT_TRUE(ops.count(op)) << op << " missing";
}

}  // namespace
}  // namespace agoq

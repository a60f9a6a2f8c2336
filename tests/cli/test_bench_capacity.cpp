// `agoq bench capacity` through the real binary, on a tiny corpus and budget (seconds): every confirmation run's
// peak resident memory stays under the budget, and AGoQ with 8-bit states fits more than the baseline.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/rng.h"
#include "data/token_file.h"
#include "tests/common/temp_path.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

TEST(BenchCapacity, ConfirmedRunsStayUnderTheBudget) {
  const fs::path dir = test_temp_path("bench_capacity");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<int32_t> tok(6000);
  Rng rng(2);
  for (auto& t : tok) t = int32_t(rng.below(64));
  token_file_write((dir / "train.bin").string(), tok, 64);
  token_file_write((dir / "val.bin").string(), std::span(tok).subspan(0, 3000), 64);
  const fs::path json = dir / "capacity.json";
  const std::string cmd = "timeout 120 " AGOQ_BIN_PATH " bench capacity --data " + dir.string() +
                          " --mem-budget 96MiB --dim 32 --heads 2 --ffn 48 --seq 16 --batch 2 --seq-dim 16 "
                          "--seq-heads 2 --seq-ffn 24 --seq-layers 256 --save-json " +
                          json.string() + " >/dev/null 2>" + (dir / "err.txt").string();
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << std::ifstream(dir / "err.txt").rdbuf();
  const auto j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j["rows"].size(), 4u);
  for (const auto& r : j["rows"]) {
    EXPECT_TRUE(r["under_budget"].get<bool>()) << r.dump();
    EXPECT_LE(r["max_rss_bytes"].get<size_t>(), j["budget_bytes"].get<size_t>()) << r.dump();
    EXPECT_EQ(r["limited_by"], "memory") << r.dump();
  }
  EXPECT_GT(j["params_ratio"].get<double>(), 1.5);
  EXPECT_GT(j["seq_ratio"].get<double>(), 2.0);
  // --save-json replaces an earlier report only (as it just did): never the corpus it reads, nor a folder.
  const auto size = fs::file_size(dir / "train.bin");
  for (const char* target : {"train.bin", ""}) {
    const std::string again = "timeout 60 " AGOQ_BIN_PATH " bench capacity --no-confirm --data " + dir.string() +
                              " --save-json " + (dir / target).string() + " >/dev/null 2>" + (dir / "err.txt").string();
    const int code = std::system(again.c_str());
    EXPECT_TRUE(WIFEXITED(code) && WEXITSTATUS(code) == 1) << target;
    std::stringstream err;
    err << std::ifstream(dir / "err.txt").rdbuf();
    EXPECT_NE(
        err.str().find(*target ? "exists and is not an earlier bench capacity JSON" : ": it is a folder, not a file"),
        std::string::npos)
        << err.str();
  }
  EXPECT_EQ(fs::file_size(dir / "train.bin"), size);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace agoq

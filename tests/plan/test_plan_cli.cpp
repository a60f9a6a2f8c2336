// `agoq plan` through the real binary: presets, a config.json, JSON output, the PNG helper, and one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan_report.h"
#include "plan/presets.h"
#include "tests/common/temp_path.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct RunOut {
  int code;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

RunOut run_plan(const std::string& args) {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const fs::path out = test_temp_path("plan_" + name + ".out");
  const fs::path err = test_temp_path("plan_" + name + ".err");
  const std::string cmd = "timeout 60 " AGOQ_BIN_PATH " plan " + args + " >" + out.string() + " 2>" + err.string();
  const int st = std::system(cmd.c_str());
  RunOut r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
  fs::remove(out), fs::remove(err);  // nothing of the test's left in /tmp
  return r;
}

TEST(PlanCli, PresetJson) {
  const RunOut r = run_plan(
      "--model llama-8b --gpus 64 --tp 4 --pp 4 --seq 4096 --micro-batch 1 "
      "--num-micro-batches 8 --gpu-mem 80GiB --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_EQ(j["parallel"]["dp"], 4);
  for (int s = 0; s < 4; ++s) {
    const auto& st = j["stages"][s];
    EXPECT_EQ(st["in_flight"], 4 - s);
    EXPECT_LT(st["agoq"]["total"].get<size_t>(), st["baseline"]["total"].get<size_t>());
    EXPECT_TRUE(st["planned"]["fits"].get<bool>());
    EXPECT_LE(st["planned"]["total"].get<size_t>(), j["gpu_mem"].get<size_t>());
    EXPECT_EQ(st["planned"]["bits"]["q"], "bf16");
  }
  EXPECT_GT(j["tightest_reduction"].get<double>(), 0.2);
}

TEST(PlanCli, TextAndZeroAndTightMemory) {
  RunOut r = run_plan("--model llama-13b --gpus 64 --tp 4 --pp 4 --zero 1 --gpu-mem 80GiB");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tightest stage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ZeRO-1 on"), std::string::npos);
  // A GPU too small for the baseline: baseline "NO", the plan lowers bits.
  r = run_plan("--model llama-8b --gpus 16 --tp 4 --pp 4 --gpu-mem 13GiB --seq 8192 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["stages"][0]["baseline"]["fits"].get<bool>());
  const std::string gate = j["stages"][0]["planned"]["bits"]["gate"];
  EXPECT_TRUE(gate == "2" || gate == "3" || gate == "4") << gate;
}

// 8-bit AdamW states shrink AGoQ's optimizer rows only, with and without ZeRO-1, and take the 8B config past 50%.
TEST(PlanCli, OptimStateQ8) {
  for (const char* zero : {"0", "1"}) {
    const std::string base = std::string(
                                 "--model llama-8b --gpus 64 --tp 4 --pp 4 --seq 4096 --micro-batch 1 "
                                 "--num-micro-batches 16 --gpu-mem 80GiB --json --zero ") +
                             zero;
    const RunOut a = run_plan(base), b = run_plan(base + " --optim-state q8");
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
    EXPECT_EQ(jb["options"]["optim_state"], "q8");
    for (int s = 0; s < 4; ++s) {
      const auto &sa = ja["stages"][s], &sb = jb["stages"][s];
      EXPECT_EQ(sa["baseline"]["total"], sb["baseline"]["total"]);
      const double o32 = sa["agoq"]["optimizer"].get<double>(), o8 = sb["agoq"]["optimizer"].get<double>();
      EXPECT_NEAR(o8 / o32, (2 + 8.0 / 128) / 8, 1e-3) << "stage " << s;
      EXPECT_EQ(sa["agoq"]["total"].get<double>() - sb["agoq"]["total"].get<double>(), o32 - o8);
    }
    EXPECT_GT(jb["tightest_reduction"].get<double>(), 0.55) << "zero " << zero;  // issue 13's goal
    EXPECT_GT(jb["tightest_reduction"].get<double>(), ja["tightest_reduction"].get<double>() + 0.05);
  }
}

TEST(PlanCli, ConfigJsonPath) {
  const fs::path cfg = test_temp_path("plan_config.json");
  std::ofstream(cfg) << R"({"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
    "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0})";
  const RunOut r = run_plan("--model " + cfg.string() + " --gpus 8 --tp 2 --pp 2 --seq 2048 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["model"]["layers"], 22);
  fs::remove(cfg);
}

TEST(PlanCli, BadFlagsAreOneLineErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"--model llama-8b --gpus 63 --tp 4 --pp 4", "not divisible"},
      {"--model llama-8b --gpus 64 --pp 64", "exceeds"},
      {"--model llama-99b", "unknown model"},
      {"--model llama-8b --gpu-mem 80XB", "bad memory size"},
      {"--model llama-8b --gpu-mem lots", "bad memory size"},
      {"--model /nonexistent/config.json", "does not exist"},
      {"--model llama-8b --zero 2", "--zero"},
      {"--model llama-8b --bits 2,5", "--bits"},
      {"--model llama-8b --optim-state q4", "--optim-state must be fp32 or q8"},
      {"--model llama-8b --tp 3 --gpus 3", "does not divide"},
      {"--model llama-8b --auto", "--auto needs --global-batch"},
      {"--model llama-8b --time --calibration /nonexistent/cal.json",
       "cannot open --calibration /nonexistent/cal.json"},
      {"--model llama-8b --auto --global-batch 8 --inter fast", "--inter 'fast' is not a rate"},
      {"--model llama-8b --time --system fancy", "--system must be agoq or baseline"},
  };
  for (const auto& [args, needle] : cases) {
    const RunOut r = run_plan(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("agoq: error: ", 0), 0u) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
}

// plan takes train's names for the same things: --batch, --accum and --mem-budget.
TEST(PlanCli, TakesTrainsNamesForTheSameThings) {
  const RunOut plan_names =
      run_plan("--model llama-8b --pp 2 --micro-batch 2 --num-micro-batches 16 --gpu-mem 40GiB --json");
  const RunOut train_names = run_plan("--model llama-8b --pp 2 --batch 2 --accum 16 --mem-budget 40GiB --json");
  ASSERT_EQ(plan_names.code, 0) << plan_names.err;
  EXPECT_EQ(train_names.out, plan_names.out);
  EXPECT_EQ(nlohmann::json::parse(train_names.out)["workload"]["micro_batch"], 2) << train_names.out;
}

// --calibrate replaces an earlier calibration only: a mistyped path to another file is refused, the file kept.
TEST(PlanCli, CalibrateKeepsAFileThatIsNotACalibration) {
  const fs::path cfg = test_temp_path("plan_not_a_calibration.json");
  { std::ofstream(cfg) << R"({"hidden_size": 4096})"; }
  const RunOut r = run_plan("--calibrate " + cfg.string());
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("exists and is not a calibration"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(cfg), R"({"hidden_size": 4096})");
  fs::remove(cfg);
}

// --auto's first layout, asked for alone with --time, predicts the same step; and its memory is the plan's.
TEST(PlanCli, AutoAgreesWithTheSingleLayoutPlan) {
  const RunOut r = run_plan("--auto --model llama-8b --gpus 64 --seq 4096 --global-batch 256 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["top"].empty());
  ASSERT_TRUE(j.contains("best_baseline"));
  const auto& top = j["top"][0];
  EXPECT_GT(double(j["evaluated"]), double(j["fitting"]));
  std::string args = "--model llama-8b --gpus 64 --seq 4096 --time --json --tp " + std::to_string(int(top["tp"])) +
                     " --pp " + std::to_string(int(top["pp"])) + " --micro-batch " +
                     std::to_string(int(top["micro_batch"])) + " --num-micro-batches " +
                     std::to_string(int(top["num_micro_batches"])) + " --zero " + (top["zero1"] ? "1" : "0") +
                     " --optim-state " + std::string(top["optim_state"]) + " --system " + std::string(top["system"]);
  if (top["sp"]) args += " --sp";
  const RunOut one = run_plan(args);
  ASSERT_EQ(one.code, 0) << args << "\n" << one.err;
  const auto k = nlohmann::json::parse(one.out);
  EXPECT_DOUBLE_EQ(double(k["time"]["step_s"]), double(top["time"]["step_s"])) << args;
  for (const auto& [name, sec] : top["time"]["terms"].items())
    EXPECT_DOUBLE_EQ(double(k["time"]["terms"][name]), double(sec)) << name;
}

TEST(PlanCli, Png) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no matplotlib";
  const fs::path png = test_temp_path("plan_chart.png");
  fs::remove(png);
  const std::string env = "AGOQ_PLAN_CHART=" AGOQ_SOURCE_DIR "/scripts/plan_chart.py ";
  const std::string cmd = env +
                          "timeout 120 " AGOQ_BIN_PATH
                          " plan --model llama-32b --gpus 64 --tp 8 --pp 4 "
                          "--png " +
                          png.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_GT(fs::file_size(png), 1000u);
  EXPECT_TRUE(fs::exists(fs::path(png).replace_extension(".json")));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "an earlier chart and its JSON are replaced";
  fs::remove(png), fs::remove(fs::path(png).replace_extension(".json"));
}

// --png writes X.png and X.json: neither may replace a file that is not an earlier chart (a config beside the chart's
// name, the model's own config.json) nor a folder; both are checked before anything is written.
TEST(PlanCli, PngNeverReplacesOtherFiles) {
  const fs::path dir = test_temp_path("plan_png_inputs");
  fs::remove_all(dir), fs::create_directories(dir / "folder.png");
  const std::string config = R"({"vocab_size": 100, "hidden_size": 64})";
  std::ofstream(dir / "config.json") << config;
  std::ofstream(dir / "not_a.png") << config;
  const std::pair<std::string, std::string> cases[] = {
      {"config.png", "config.png: the JSON beside it, " + (dir / "config.json").string() + " exists and is not"},
      {"not_a.png", "not_a.png exists and is not a PNG image"},
      {"folder.png", "folder.png: it is a folder, not a file"},
      {"chart", "chart: name a .png file"},
  };
  for (const auto& [name, want] : cases) {
    const RunOut r = run_plan("--model llama-8b --png " + (dir / name).string());
    EXPECT_EQ(r.code, 1) << name;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(slurp(dir / "config.json"), config);
  EXPECT_EQ(slurp(dir / "not_a.png"), config);
  EXPECT_FALSE(fs::exists(dir / "not_a.json"));
  const RunOut with_auto = run_plan("--model llama-8b --auto --global-batch 8 --png " + (dir / "a.png").string());
  EXPECT_NE(with_auto.err.find("--png charts one layout's plan: not with --auto"), std::string::npos) << with_auto.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace agoq

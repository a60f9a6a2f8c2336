// The progress estimate and the metrics log's write checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "../common/expect_error.h"
#include "tests/common/temp_path.h"
#include "train/metrics.h"

namespace agoq {
namespace {

TEST(StepPace, EstimatesFromRecentStepsNotTheWholeRun) {
  StepPace pace(20);
  EXPECT_EQ(pace.eta_seconds(100), 0.0);
  double t = 0;
  for (int i = 0; i < 10; ++i) pace.step_done(t += 10.0);  // a slow phase: 10 s per step
  EXPECT_NEAR(pace.eta_seconds(100), 1000.0, 1e-9);
  for (int i = 0; i < 30; ++i) pace.step_done(t += 1.0);  // then 1 s per step
  // The mean since the first step would say 3.25 s per step; the last 20 steps say 1 s.
  EXPECT_NEAR(pace.eta_seconds(100), 100.0, 1e-9);
  EXPECT_EQ(pace.eta_seconds(0), 0.0);
}

TEST(MetricsLog, FullDiskIsAnError) {
  MetricsLog log("/dev/full", -1, 10, 1, true);
  expect_error([&] { log.step(1, {{"step", 1}, {"loss", 2.0}}); }, {"cannot write metrics file", "/dev/full"});
}

TEST(MetricsLog, UnwritableFolderIsAnError) {
  expect_error([] { MetricsLog log("/nonexistent-agoq-dir/metrics.jsonl", -1, 10, 1, true); },
               {"cannot open metrics file", "/nonexistent-agoq-dir"});
}

TEST(MetricsLog, ResumeDropsTheStepsAfterTheCheckpoint) {
  const std::filesystem::path path = test_temp_path("metrics-resume.jsonl");
  {
    std::ofstream f(path);
    for (int s = 1; s <= 14; ++s) f << nlohmann::json{{"step", s}, {"loss", 1.0 / s}}.dump() << "\n";
    f << "{\"step\": 15, \"lo";  // torn by a kill
  }
  {
    MetricsLog log(path.string(), 10, 20, 1, true);
    log.step(11, {{"step", 11}, {"loss", 0.5}});
  }
  std::ifstream in(path);
  std::vector<long> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line)["step"].get<long>());
  std::vector<long> want(11);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(steps, want);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace agoq

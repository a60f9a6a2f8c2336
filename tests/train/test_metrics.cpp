// The progress estimate and the metrics log's write checks.
#include <gtest/gtest.h>

#include <filesystem>

#include "../common/expect_error.h"
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
  MetricsLog log("/dev/full", false, 10, 1, true);
  expect_error([&] { log.step(1, {{"step", 1}, {"loss", 2.0}}); }, {"cannot write metrics file", "/dev/full"});
}

TEST(MetricsLog, UnwritableFolderIsAnError) {
  expect_error([] { MetricsLog log("/nonexistent-agoq-dir/metrics.jsonl", false, 10, 1, true); },
               {"cannot open metrics file", "/nonexistent-agoq-dir"});
}

}  // namespace
}  // namespace agoq

// `agoq plan --auto` (plan/auto_plan.h): the search covers exactly the valid layouts (against a brute force written
// from the rules, not from the code), every refusal says why, the ranking is by predicted time, and when memory is
// tight only quantized layouts remain.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "plan/auto_plan.h"
#include "plan/calibration.h"
#include "plan/presets.h"
#include "tests/common/llama_shape.h"

namespace agoq {
namespace {

// 8 heads over 2 kv heads, 4 layers, MLP 96: TP must divide 8 and 96 and be a divisor or multiple of 2; PP <= 4.
LlamaConfig small() { return llama_shape(256, 64, 4, 8, 2, 96, 32); }

bool valid_by_rule(int gpus, int tp, int pp) {
  return gpus % (tp * pp) == 0 && pp <= 4 && 8 % tp == 0 && (2 % tp == 0 || tp % 2 == 0) && 96 % tp == 0;
}

PlanAutoRequest request(int gpus, int global_batch, size_t gpu_mem) {
  PlanAutoRequest r;
  r.model_name = "small", r.cfg = small(), r.gpus = gpus, r.seq = 32, r.global_batch = global_batch;
  r.gpu_mem = gpu_mem, r.cal = plan_calibration_gpu_defaults();
  r.gpu.reserve_bytes = 0;
  return r;
}

TEST(AutoPlan, LayoutsAreExactlyTheValidOnesAndEachRefusalSaysWhy) {
  for (int gpus = 1; gpus <= 24; ++gpus) {
    SCOPED_TRACE("gpus " + std::to_string(gpus));
    std::vector<PlanRefusedLayout> refused;
    const auto layouts = plan_auto_layouts(small(), gpus, 32, &refused);
    std::set<std::pair<int, int>> got(layouts.begin(), layouts.end()), want, refused_set;
    EXPECT_EQ(got.size(), layouts.size()) << "a layout listed twice";
    for (int tp = 1; tp <= gpus; ++tp)
      for (int pp = 1; pp <= gpus; ++pp)
        if (valid_by_rule(gpus, tp, pp)) want.insert({tp, pp});
    EXPECT_EQ(got, want);
    for (const PlanRefusedLayout& r : refused) {
      EXPECT_FALSE(valid_by_rule(gpus, r.tp, r.pp)) << "TP " << r.tp << " x PP " << r.pp << " refused: " << r.reason;
      EXPECT_EQ(gpus % (r.tp * r.pp), 0);
      EXPECT_TRUE(r.reason.find("--tp") != std::string::npos || r.reason.find("--pp") != std::string::npos) << r.reason;
      refused_set.insert({r.tp, r.pp});
    }
    // every (tp, pp) whose product divides the GPUs is either searched or refused with its reason
    for (int tp = 1; tp <= gpus; ++tp)
      for (int pp = 1; tp * pp <= gpus; ++pp)
        if (gpus % (tp * pp) == 0) {
          EXPECT_EQ(got.count({tp, pp}) + refused_set.count({tp, pp}), 1u);
        }
  }
}

TEST(AutoPlan, SearchCoversEveryMicroBatchingSpZeroAndSystemOnceRankedByTime) {
  const int gpus = 8, G = 12;
  const PlanAutoResult r = plan_auto(request(gpus, G, size_t(1) << 40));
  size_t expected = 0;
  for (int tp = 1; tp <= gpus; ++tp)
    for (int pp = 1; pp <= gpus; ++pp) {
      if (!valid_by_rule(gpus, tp, pp)) continue;
      const int dp = gpus / (tp * pp);
      if (G % dp != 0) continue;
      for (int b = 1; b <= G / dp; ++b) {
        if ((G / dp) % b != 0) continue;
        const int sp = tp > 1 && (b * 32) % tp == 0 ? 2 : 1, zero = dp > 1 ? 2 : 1;
        expected += size_t(sp) * zero * 3;  // baseline, AGoQ, AGoQ + q8 AdamW
      }
    }
  EXPECT_EQ(r.evaluated, expected);
  EXPECT_EQ(r.fits.size(), expected);  // 1 TiB: everything fits
  std::set<std::tuple<int, int, bool, bool, int, int, bool>> seen;
  for (size_t i = 0; i < r.fits.size(); ++i) {
    const PlanCandidate& c = r.fits[i];
    EXPECT_TRUE(
        seen.insert({c.par.tp, c.par.pp, c.par.sp, c.par.zero1, c.work.micro_batch, int(c.system), c.optim_q8}).second)
        << c.name() << " twice";
    EXPECT_EQ(c.work.micro_batch * c.work.num_micro_batches * c.par.dp(), G) << c.name();
    if (i) {
      EXPECT_LE(r.fits[i - 1].time.step_s, c.time.step_s);
    }
  }
  // DP 8 does not divide 12 sequences: refused, with that reason
  const auto dp8 = std::find_if(r.refused.begin(), r.refused.end(),
                                [](const PlanRefusedLayout& f) { return f.tp == 1 && f.pp == 1; });
  ASSERT_NE(dp8, r.refused.end());
  EXPECT_NE(dp8->reason.find("does not divide the global batch"), std::string::npos) << dp8->reason;
  ASSERT_NE(r.best_baseline(), nullptr);
  ASSERT_NE(r.best_agoq(), nullptr);
  EXPECT_EQ(r.best_baseline()->system, PlanSystem::baseline);
  const nlohmann::json j = plan_auto_json(r);
  EXPECT_EQ(j["top"].size(), 5u);
  EXPECT_EQ(j["top"][0]["time"]["step_s"], r.fits[0].time.step_s);
}

TEST(AutoPlan, WhenMemoryIsTightOnlyQuantizedLayoutsFit) {
  // Llama 8B on 8 GPUs of 16 GiB at seq 4096: every unquantized layout needs more; some of AGoQ's fit.
  PlanAutoRequest req;
  req.model_name = "llama-8b", req.cfg = plan_preset("llama-8b"), req.gpus = 8, req.seq = 4096;
  req.global_batch = 8, req.gpu_mem = size_t(16) << 30, req.cal = plan_calibration_gpu_defaults();
  const PlanAutoResult r = plan_auto(req);
  ASSERT_FALSE(r.fits.empty());
  for (const PlanCandidate& c : r.fits) EXPECT_EQ(c.system, PlanSystem::agoq) << c.name();
  EXPECT_EQ(r.best_baseline(), nullptr);
  EXPECT_NE(plan_auto_text(r).find("no unquantized layout fits"), std::string::npos);
  for (const PlanCandidate& c : r.faster_not_fitting) EXPECT_FALSE(c.not_fit.empty()) << c.name();
  EXPECT_LE(r.fits[0].peak.total(), req.gpu_mem);
}

TEST(AutoPlan, NothingFitsListsTheFastestLayoutsWithTheirReasons) {
  const PlanAutoResult r = plan_auto(request(4, 4, size_t(16) << 10));  // 16 KiB per GPU
  EXPECT_TRUE(r.fits.empty());
  EXPECT_EQ(r.faster_not_fitting.size(), r.evaluated);
  for (const PlanCandidate& c : r.faster_not_fitting) {
    EXPECT_FALSE(c.not_fit.empty()) << c.name();
    EXPECT_NE(c.not_fit.find("stage"), std::string::npos) << c.not_fit;
  }
  EXPECT_NE(plan_auto_text(r).find("nothing fits"), std::string::npos);
}

}  // namespace
}  // namespace agoq

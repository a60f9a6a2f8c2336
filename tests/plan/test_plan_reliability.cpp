// The planner's arithmetic and inputs at their limits (issue 42): the divisor search without overflow, the search's
// own range checks, every calibration field range-checked by name, and a prediction that is not finite refused
// naming its term and calibration.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/auto_plan.h"
#include "plan/calibration.h"
#include "tests/common/llama_shape.h"

namespace agoq {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// divisors(int n) counted i up to n: at n = INT_MAX, i wrapped to negative, then to 0, and n % 0 was a SIGFPE.
TEST(PlanReliability, DivisorsAreExactAndDoNotOverflow) {
  for (int n = 1; n <= 2000; ++n) {
    std::vector<int> want;
    for (int i = 1; i <= n; ++i)
      if (n % i == 0) want.push_back(i);
    ASSERT_EQ(plan_divisors(n), want) << n;
  }
  EXPECT_EQ(plan_divisors(INT_MAX), (std::vector<int>{1, INT_MAX}));  // 2^31 - 1 is prime
  EXPECT_EQ(plan_divisors(1 << 30).size(), 31u);
  EXPECT_EQ(plan_divisors(1 << 30).back(), 1 << 30);
  EXPECT_TRUE(plan_divisors(0).empty());
  EXPECT_TRUE(plan_divisors(-4).empty());
}

PlanAutoRequest small_request() {
  PlanAutoRequest r;
  r.model_name = "small", r.cfg = llama_shape(256, 64, 4, 8, 2, 96, 32), r.gpus = 4, r.seq = 32, r.global_batch = 8;
  r.cal = plan_calibration_gpu_defaults();
  return r;
}

// What no layout can mend is refused by flag, not reported as every layout refused (an exit 0 with nothing ranked).
TEST(PlanReliability, AutoSearchRefusesItsInputsByFlag) {
  PlanAutoRequest r = small_request();
  r.global_batch = INT_MAX;
  EXPECT_NE(error_of([&] { plan_auto(r); }).find("--global-batch 2147483647 is out of range"), std::string::npos);
  for (int seq : {0, -1, 33}) {
    r = small_request();
    r.seq = seq;
    EXPECT_NE(error_of([&] { plan_auto(r); }).find("--seq"), std::string::npos) << seq;
  }
  r = small_request();
  r.gpus = 0;
  EXPECT_NE(error_of([&] { plan_auto(r); }).find("--gpus"), std::string::npos);
  EXPECT_FALSE(plan_auto(small_request()).fits.empty());
}

// A calibration rate of 1e-300 ranked a layout first at "-nan tokens/s"; `measured_ranks: "four"` escaped as
// nlohmann's type_error.302. Every numeric field, set to an absurd value or the wrong type, is an agoq::Error naming
// the source and the field.
TEST(PlanReliability, EveryCalibrationFieldIsRangeCheckedByName) {
  const nlohmann::json good = plan_calibration_json(plan_calibration_gpu_defaults());
  std::vector<std::pair<std::string, std::string>> fields;  // (object or "", key)
  for (const char* k : {"elementwise_bytes_s", "act_quant_bytes_s", "act_bf16_bytes_s", "grad_fold_bytes_s",
                        "adam_params_s", "adam_q8_params_s", "model_efficiency"})
    fields.push_back({"device", k});
  for (const char* link : {"intra", "inter"})
    for (const char* k : {"bytes_s", "latency_s", "send_bytes_s"}) fields.push_back({link, k});
  for (const char* k : {"ranks_per_node", "dp_overlap", "core_share", "wait_yield", "tp_efficiency", "measured_ranks"})
    fields.push_back({"", k});
  for (const auto& [obj, key] : fields)
    for (const nlohmann::json& bad : {nlohmann::json(1e-300), nlohmann::json(1e300), nlohmann::json(-1),
                                      nlohmann::json("four"), nlohmann::json(nullptr), nlohmann::json::array()}) {
      if ((key == "dp_overlap" || key == "wait_yield") && bad == nlohmann::json(1e-300)) continue;  // in [0, 1]
      nlohmann::json j = good;
      (obj.empty() ? j : j[obj])[key] = bad;
      const std::string name = obj.empty() ? key : obj + "." + key;
      const std::string err = error_of([&] { plan_calibration_from_json(j, "cal.json"); });
      EXPECT_NE(err.find("cal.json: calibration field '" + name + "'"), std::string::npos)
          << name << " = " << bad.dump() << ": " << err;
    }
  for (const char* curve : {"gemm_flops_by_call_flops", "attention_flops_by_seq", "gemm_rate_by_rows"})
    for (const nlohmann::json& bad : {nlohmann::json{{1e8, 1e-300}}, nlohmann::json{{1e8, 1e300}},
                                      nlohmann::json{{0, 1e12}}, nlohmann::json{{"x", 1}}}) {
      nlohmann::json j = good;
      j["device"][curve] = bad;
      const std::string err = error_of([&] { plan_calibration_from_json(j, "cal.json"); });
      EXPECT_NE(err.find(std::string("cal.json: device.") + curve), std::string::npos) << curve << ": " << err;
    }
  EXPECT_NE(error_of([&] {
              nlohmann::json j = good;
              j["trainer"] = "tpu";
              plan_calibration_from_json(j, "cal.json");
            }).find("cal.json: calibration field trainer 'tpu'"),
            std::string::npos);
}

// Should a prediction still not be finite (a calibration built in code, past the file's checks), it is an error
// naming the term and the calibration, never "-nan tokens/s".
TEST(PlanReliability, NonFinitePredictionNamesItsTermAndCalibration) {
  PlanAutoRequest r = small_request();
  r.cal.source = "my-cal.json";
  r.cal.device.adam_params_s = r.cal.device.adam_q8_params_s = 0;
  const std::string err = error_of([&] { plan_auto(r); });
  EXPECT_NE(err.find("optimizer term is inf s with the calibration my-cal.json"), std::string::npos) << err;
}

// `--intra 1e20GB/s` said "must be a positive rate"; beyond a double it said "is not a rate".
TEST(PlanReliability, RatesOutOfRangeSaySo) {
  for (const char* bad : {"1e20GB/s", "1e400GB/s", "1e-400GB/s", "0.1B/s", "inf"})
    EXPECT_NE(error_of([&] { plan_parse_rate(bad, "--intra"); }).find("is out of range"), std::string::npos) << bad;
  EXPECT_NE(error_of([&] { plan_parse_rate("0GB/s", "--intra"); }).find("positive"), std::string::npos);
  EXPECT_EQ(plan_parse_rate("900GB/s", "--intra"), 900e9);
  EXPECT_NE(error_of([&] { plan_parse_bytes("1e400GiB", "--gpu-mem"); }).find("--gpu-mem"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_parse_bytes(std::string(400, '9') + "GiB", "--gpu-mem"); }).find("out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace agoq

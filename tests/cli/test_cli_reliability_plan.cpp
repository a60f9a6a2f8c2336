// `agoq plan` and `train --layout auto` under careless or hostile input (issue 42): an absurd global batch (once a
// SIGFPE in the divisor search), numeric flags out of range (once exit 0), a calibration whose rates make the
// prediction infinite, a global batch that overflowed and was named by a flag never given, rates and sizes beyond
// a double, and folders or broken JSON given as calibration files. Each ends in one clean line naming the flag or
// the file and the field.
#include <functional>
#include <nlohmann/json.hpp>

#include "plan/calibration.h"
#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

using nlohmann::json;

// One clean line with `needle`, and none of the libraries' own text.
void expect_plain_error(const std::string& args, const std::string& needle) {
  expect_clean_error(args, needle);
  const RunResult r = run_agoq(args);
  for (const char* raw : {"json.exception", "basic_filebuf", "type_error", "nan", "inf "})
    EXPECT_EQ(r.err.find(raw), std::string::npos) << args << "\n" << r.err;
  EXPECT_LT(r.err.size(), 300u) << args << "\n" << r.err;  // no 309-digit DBL_MAX
}

const std::string kAuto = "plan --auto --model llama-8b --gpus 8 --seq 2048 --global-batch 64";

// plan --auto with `flags` replacing the defaults of kAuto's (each flag given once).
std::string plan_auto(std::map<std::string, std::string> flags) {
  std::map<std::string, std::string> args = {{"--gpus", "8"}, {"--seq", "2048"}, {"--global-batch", "64"}};
  for (auto& [k, v] : flags) args[k] = v;
  std::string cmd = "plan --auto --model llama-8b";
  for (auto& [k, v] : args) cmd += " " + k + " " + v;
  return cmd;
}

// `agoq plan --auto --model llama-8b --gpus 1 --gpu-mem 80GiB --seq 16 --global-batch 2147483647` died of SIGFPE:
// the divisor search counted to n in an int, which wrapped to 0.
TEST(PlanReliability, HugeGlobalBatchIsRefusedByNameNotSigfpe) {
  expect_plain_error("plan --auto --model llama-8b --gpus 1 --gpu-mem 80GiB --seq 16 --global-batch 2147483647",
                     "--global-batch");
  // the largest accepted searches in moments (the divisors are found in O(sqrt n))
  int st = 0;
  const std::string out =
      agoq_stdout("plan --auto --model llama-8b --gpus 8 --seq 16 --global-batch 16777216 --json", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_GT(json::parse(out)["fitting"].get<int>(), 0);
}

// `plan --auto --seq 0 / -1 / 1e9` and `--gpus-per-node 0 / -1` exited 0 (every layout refused, or the flag
// ignored): every numeric flag of plan is range-checked, by name.
TEST(PlanReliability, EveryNumericFlagIsRangeChecked) {
  const std::pair<const char*, const char*> cases[] = {
      {"--seq 0", "--seq"},
      {"--seq -1", "--seq"},
      {"--seq 1e9", "--seq"},
      {"--seq 1000000000", "--seq"},
      {"--seq 16384", "--seq 16384 is beyond llama-8b's 8192 positions"},
      {"--gpus 0", "--gpus"},
      {"--gpus -1", "--gpus"},
      {"--gpus 99999999999", "--gpus"},
      {"--gpus-per-node 0", "--gpus-per-node"},
      {"--gpus-per-node -1", "--gpus-per-node"},
      {"--global-batch 0", "--global-batch"},
      {"--global-batch -8", "--global-batch"},
      {"--top 0", "--top"},
      {"--reps 0", "--reps"},
      {"--bucket-mb 1e9", "--bucket-mb"},
      {"--gpu-mem 1e400GiB", "--gpu-mem"},
      {"--gpu-mem 99999999999999999999999GiB", "--gpu-mem '99999999999999999999999GiB' is out of range"},
      {"--reserve 0.1B", "--reserve"},
  };
  for (const auto& [flag_value, needle] : cases) {
    const std::string fv = flag_value, flag = fv.substr(0, fv.find(' '));
    expect_plain_error(plan_auto({{flag, fv.substr(fv.find(' ') + 1)}}), needle);
  }
  const std::string one = "plan --model llama-8b ";
  for (const char* flag : {"--tp 0", "--pp -1", "--micro-batch 0", "--num-micro-batches -2", "--seq 0"})
    expect_plain_error(one + flag, std::string(flag).substr(0, std::string(flag).find(' ')));
  expect_plain_error(one + "--seq 9000", "--seq 9000 is beyond llama-8b's 8192 positions");
  expect_plain_error(one + "--tp 65536 --pp 65536 --gpus 16777216", "not divisible by tp * pp = 4294967296");
}

// `--intra 1e20GB/s` was "must be a positive rate"; CLI11's range errors printed DBL_MAX in 309 digits.
TEST(PlanReliability, RatesAndCountsOutOfRangeSaySo) {
  expect_plain_error(kAuto + " --intra 1e20GB/s", "--intra '1e20GB/s' is out of range");
  expect_plain_error(kAuto + " --inter 1e400Gbit/s", "--inter '1e400Gbit/s' is out of range");
  expect_plain_error(kAuto + " --inter 1e-400GB/s", "--inter '1e-400GB/s' is out of range");
  expect_plain_error(kAuto + " --intra 0GB/s", "must be a positive rate");
  expect_plain_error("sample --ckpt x --top-k -1", "--top-k: must be from 0");
  expect_plain_error("sample --ckpt x --seed -1", "--seed");
  expect_plain_error("eval --ckpt x --text y --max-tokens -5", "--max-tokens: must be >= 0");
  expect_plain_error("train --data x --seed -1", "--seed");
}

class PlanCalibrationFiles : public CliErrors {
 protected:
  // The GPU defaults as a calibration file (every field present), with `edit` applied.
  std::string calibration(const std::function<void(json&)>& edit) const {
    json j = plan_calibration_json(plan_calibration_gpu_defaults());
    edit(j);
    std::ofstream(d("cal.json")) << j.dump();
    return d("cal.json");
  }
};

// A calibration rate of 1e-300 ranked a layout first at "-nan tokens/s": each value is range-checked when read, the
// error naming the file and the field.
TEST_F(PlanCalibrationFiles, AbsurdValuesAreRefusedNamingTheField) {
  const std::pair<const char*, json> cases[] = {
      {"elementwise_bytes_s", 1e-300}, {"adam_params_s", 1e300},  {"model_efficiency", 1e-300},
      {"act_quant_bytes_s", "fast"},   {"grad_fold_bytes_s", -1},
  };
  for (const auto& [field, value] : cases) {
    const std::string cal = calibration([&](json& j) { j["device"][field] = value; });
    expect_plain_error(kAuto + " --calibration " + cal, std::string("'device.") + field + "'");
    expect_plain_error(kAuto + " --calibration " + cal, cal);
  }
  std::string cal = calibration([](json& j) { j["device"]["gemm_flops_by_call_flops"] = {{1e8, 1e-300}}; });
  expect_plain_error(kAuto + " --calibration " + cal, "device.gemm_flops_by_call_flops");
  cal = calibration([](json& j) { j["inter"]["latency_s"] = 1e300; });
  expect_plain_error(kAuto + " --calibration " + cal, "'inter.latency_s'");
  cal = calibration([](json& j) { j["ranks_per_node"] = 1e300; });  // was read as INT_MIN
  expect_plain_error(kAuto + " --calibration " + cal, "'ranks_per_node'");
  cal = calibration([](json& j) { j["measured_ranks"] = "four"; });  // was nlohmann's type_error.302
  expect_plain_error(kAuto + " --calibration " + cal, "'measured_ranks'");
}

// `[json.exception.parse_error.101]` from a calibration file, `basic_filebuf::underflow ... Is a directory` from a
// folder given to --calibration or --calibrate.
TEST_F(PlanCalibrationFiles, FoldersAndBrokenJsonAreOneLineNamingTheFile) {
  fs::create_directories(d("folder"));
  expect_plain_error(kAuto + " --calibration " + d("folder"), "--calibration " + d("folder") + ": it is a folder");
  expect_plain_error("plan --calibrate " + d("folder"), "--calibrate " + d("folder") + ": it is a folder");
  expect_plain_error(train({{"--layout", "auto"}, {"--calibration", d("folder")}}), "it is a folder");
  std::ofstream(d("broken.json")) << "{\"trainer\": \"agoq-cpu\",\n \"device\": }, \"inter\": 1}";
  expect_plain_error(kAuto + " --calibration " + d("broken.json"), "broken.json is not valid JSON");
  expect_plain_error(kAuto + " --calibration " + d("broken.json"), "line 2");
  std::ofstream(d("deep.json")) << std::string(100000, '[') + std::string(100000, ']');
  expect_plain_error(kAuto + " --calibration " + d("deep.json"), "deep.json");
}

// `train --layout auto --batch 2^30 --accum 4` named --global-batch, never given, with the product wrapped to 0.
TEST_F(CliErrors, LayoutAutoNamesTheFlagsGivenWithTheRightProduct) {
  expect_plain_error(train({{"--layout", "auto"}, {"--batch", "1073741824"}, {"--accum", "4"}}),
                     "--batch 1073741824 x --accum 4 x 1 rank = 4294967296 sequences");
  const RunResult r = run_agoq(train({{"--layout", "auto"}, {"--batch", "1073741824"}, {"--accum", "4"}}));
  EXPECT_EQ(r.err.find("--global-batch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace agoq

// `agoq train --layout auto` (cli/layout_auto.h): it trains with the layout `agoq plan --auto` ranks first for the
// same model, ranks, global batch and system, and refuses the flags it would override.
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

class LayoutAuto : public CliErrors {
 protected:
  void SetUp() override {
    CliErrors::SetUp();
    std::ofstream(d("config.json")) << R"({"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 2, "intermediate_size": 24, "vocab_size": 64, "max_position_embeddings": 8,
      "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu"})";
  }
  // A calibration of this machine at one rank, written once per test.
  std::string calibration() const {
    const RunResult r = run_agoq("plan --calibrate " + d("cal.json"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return d("cal.json");
  }
  // `train --baseline --layout auto` on `ranks` ranks names and trains plan --auto's best unquantized layout for
  // that many GPUs and a global batch of batch x accum x ranks.
  void expect_planners_choice(int ranks, int batch, int accum) const {
    const std::string cal = calibration();
    int st = 0;
    const std::string plan = agoq_stdout(
        "plan --auto --json --model " + d("config.json") + " --gpus " + std::to_string(ranks) +
            " --seq 8 --global-batch " + std::to_string(batch * accum * ranks) + " --reserve 0 --calibration " + cal,
        &st);
    ASSERT_EQ(st, 0) << plan;
    const std::string want = nlohmann::json::parse(plan)["best_baseline"]["name"];
    const std::string mpirun =
        "mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "
        "-x OPENBLAS_NUM_THREADS=1 -np " +
        std::to_string(ranks) + " ";
    const std::string launcher = (ranks == 1 ? std::string() : mpirun) + AGOQ_BIN_PATH " ";
    const std::string out =
        agoq_stdout("train --quiet --baseline --layout auto --calibration " + cal + " --config " + d("config.json") +
                        " --data " + d("data") + " --seq 8 --batch " + std::to_string(batch) + " --accum " +
                        std::to_string(accum) + " --steps 2 --eval-every 0 --eval-batches 1 --out " + d("run"),
                    &st, launcher);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("layout auto: " + want + ", predicted"), std::string::npos) << out << "\nwanted: " << want;
    EXPECT_TRUE(fs::exists(d("run/metrics.jsonl")));
  }
};

TEST_F(LayoutAuto, TrainsWithThePlannersFirstLayout) {
  // --batch 3 x --accum 2 x 1 rank: a global batch of 6 sequences, which 1 x 6, 2 x 3, 3 x 2 and 6 x 1 divide
  expect_planners_choice(1, 3, 2);
}

// On 2 ranks every rank runs the search; the layout chosen is the planner's first for 2 GPUs.
TEST_F(LayoutAuto, TwoRanksAgreeOnThePlannersFirstLayout) { expect_planners_choice(2, 2, 2); }

TEST_F(LayoutAuto, RefusesTheFlagsItChoosesAndAMissingCalibration) {
  expect_clean_error(train({{"--layout", "auto"}, {"--tp", "1"}}), "--layout auto chooses --tp itself");
  expect_clean_error(train({{"--layout", "auto"}, {"--zero", "1"}}), "--layout auto chooses --zero itself");
  expect_clean_error(train({{"--layout", "auto"}, {"--calibration", d("none.json")}}), "cannot open");
  expect_clean_error(train({{"--layout", "sideways"}}), "--layout");
}

}  // namespace
}  // namespace agoq

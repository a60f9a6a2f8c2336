// `agoq train --tensorboard DIR` (issue 44): the event files hold metrics.jsonl's numbers step by step, as the
// tensorboard package reads them (tests/cli/tensorboard_check.py); a bad folder is refused before training.
#include <cstdio>
#include <cstdlib>

#include "tests/cli/cli_test_util.h"
#include "tests/common/python_ref.h"

namespace agoq {
namespace {

// Whether .venv has the tensorboard package (scripts/test-requirements.txt).
bool tensorboard_importable() {
  const std::string cmd = python_ref_exe() + " -c 'import tensorboard' >/dev/null 2>&1";
  return std::filesystem::exists(python_ref_exe()) && std::system(cmd.c_str()) == 0;
}

std::vector<fs::path> events_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  return out;
}

// On 1 rank and under mpirun with 2, where rank 0 alone writes: one events file whose scalars are metrics.jsonl's.
TEST_F(CliErrors, TensorBoardScalarsEqualMetricsJsonl) {
  if (!tensorboard_importable())
    GTEST_SKIP() << "the tensorboard Python package is not in " << python_ref_exe()
                 << " (scripts/install-deps.sh --test installs scripts/test-requirements.txt)";
  const std::string mpirun =
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -np 2 ";
  for (const std::string& launcher : {mpirun, std::string()}) {
    fs::remove_all(d("run")), fs::remove_all(d("tb"));
    // --profile and --eval-every add nested and occasional fields: each must reach TensorBoard at its step.
    int status = 0;
    const std::string out =
        agoq_stdout(train({{"--steps", "5"}, {"--eval-every", "2"}, {"--tensorboard", d("tb")}}) + " --profile 2>&1",
                    &status, launcher + AGOQ_BIN_PATH " ");
    ASSERT_EQ(status, 0) << launcher << out;
    ASSERT_EQ(events_files(d("tb")).size(), 1u) << launcher;
    const std::string check = python_ref_run("tests/cli/tensorboard_check.py", d("tb") + " " + d("run/metrics.jsonl"));
    EXPECT_NE(check.find("ok: "), std::string::npos) << launcher << check;
    EXPECT_NE(check.find("steps 1..5"), std::string::npos) << launcher << check;
  }
  // A resumed run adds a second file beside the first; together they are the whole metrics.jsonl.
  const RunResult r = run_agoq(train({{"--steps", "7"}, {"--resume", d("run/ckpt")}, {"--tensorboard", d("tb")}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(events_files(d("tb")).size(), 2u);
  const std::string check = python_ref_run("tests/cli/tensorboard_check.py", d("tb") + " " + d("run/metrics.jsonl"));
  EXPECT_NE(check.find("steps 1..7"), std::string::npos) << check;
}

TEST_F(CliErrors, TensorBoardBadFolderRefusedBeforeTraining) {
  expect_clean_error(train({{"--tensorboard", d("data/train.bin")}}), "--tensorboard " + d("data/train.bin") + ": ");
  expect_clean_error(train({{"--tensorboard", d("data/train.bin/tb")}}), "--tensorboard " + d("data/train.bin/tb"));
  expect_clean_error(train({{"--tensorboard", "''"}}), "--tensorboard");
  EXPECT_FALSE(fs::exists(d("run/metrics.jsonl")));  // no step ran
}

}  // namespace
}  // namespace agoq

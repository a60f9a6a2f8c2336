// Runs that are interrupted or resumed through the real binary: kill -9 and resume (the log continues from the
// checkpoint), SIGTERM / SIGINT / SIGUSR1 (finish the step, checkpoint, exit 75; under mpirun a signal to one rank
// stops all at one step), a disk too small for a checkpoint, and what a resume must refuse (NaN weights, flags that
// disagree with the checkpoint, a damaged trainer.json, a tokenizer that did not make the token files).
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

using CliRecovery = CliErrors;
using json = nlohmann::json;

std::vector<long> logged_steps(const std::string& metrics) {
  std::vector<long> steps;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) steps.push_back(json::parse(line)["step"].get<long>());
  return steps;
}

std::vector<long> one_to(long n) {
  std::vector<long> v(static_cast<size_t>(n));
  for (long i = 0; i < n; ++i) v[size_t(i)] = i + 1;
  return v;
}

long ckpt_step(const std::string& ckpt) {
  return json::parse(std::ifstream(ckpt + "/trainer.json"))["step"].get<long>();
}

// A process started with `sh -c "exec <cmd>"`, so its pid is the command's.
struct Started {
  pid_t pid = -1;
  explicit Started(const std::string& cmd) {
    pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  // The exit status, or -1 when it had to be killed after `seconds` (or died of a signal).
  int wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
};

// Waits until the metrics log has `n` records (the run is in its steps, past set-up).
bool wait_for_steps(const std::string& metrics, size_t n, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(metrics);
    size_t lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
    if (lines >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// kill -9 at any moment: the link names a complete checkpoint, and the resumed run's log has every step once.
TEST_F(CliRecovery, KilledRunResumesWithoutRepeatingSteps) {
  Started run(AGOQ_BIN_PATH " " + train({{"--steps", "100000"}, {"--ckpt-every", "5"}, {"--eval-every", "0"}}));
  ASSERT_TRUE(wait_for_steps(d("run/metrics.jsonl"), 12));
  kill(run.pid, SIGKILL);
  EXPECT_EQ(run.wait_exit(30), -1);
  const long at = ckpt_step(d("run/ckpt"));
  EXPECT_GE(at, 5);
  EXPECT_EQ(at % 5, 0);
  // Usually the log ran past the checkpoint (steps the resumed run must not log twice); a kill right after a save
  // leaves them equal, which the resume must handle too.
  EXPECT_GE(logged_steps(d("run/metrics.jsonl")).size(), size_t(at));
  ASSERT_EQ(run_agoq(train({{"--steps", std::to_string(at + 3)}, {"--resume", d("run/ckpt")}})).exit_code, 0);
  EXPECT_EQ(logged_steps(d("run/metrics.jsonl")), one_to(at + 3)) << "no step may appear twice";
}

// The first stop signal finishes the step, checkpoints it and exits 75; the run then resumes from exactly there.
TEST_F(CliRecovery, StopSignalCheckpointsAndExits) {
  for (int sig : {SIGTERM, SIGINT}) {
    fs::remove_all(d("run"));
    Started run(AGOQ_BIN_PATH " " + train({{"--steps", "100000"}, {"--eval-every", "0"}}) + " 2>" + d("err.txt"));
    ASSERT_TRUE(wait_for_steps(d("run/metrics.jsonl"), 3));
    kill(run.pid, sig);
    EXPECT_EQ(run.wait_exit(60), 75) << file_text(d("err.txt"));
    const std::vector<long> steps = logged_steps(d("run/metrics.jsonl"));
    ASSERT_FALSE(steps.empty());
    const long last = steps.back();
    EXPECT_EQ(steps, one_to(last));
    EXPECT_EQ(ckpt_step(d("run/ckpt")), last);
    const std::string err = file_text(d("err.txt"));
    const std::string said = std::string("stopped by ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + " after step " +
                             std::to_string(last) + " of 100000";
    EXPECT_NE(err.find(said), std::string::npos) << err;
    EXPECT_NE(err.find("--resume " + d("run/ckpt")), std::string::npos) << err;
    ASSERT_EQ(run_agoq(train({{"--steps", std::to_string(last + 2)}, {"--resume", d("run/ckpt")}})).exit_code, 0);
    EXPECT_EQ(logged_steps(d("run/metrics.jsonl")), one_to(last + 2));
  }
}

// The note a stop signal prints names the newest good checkpoint (under mpirun the signal may mean a lost peer, and
// then no new checkpoint can be written): none before the first, then the link's step, updated at each.
TEST_F(CliRecovery, StopNoteNamesTheLastGoodCheckpoint) {
  Started run(AGOQ_BIN_PATH " " + train({{"--steps", "100000"}, {"--eval-every", "0"}, {"--ckpt-every", "2"}}) + " 2>" +
              d("err.txt"));
  ASSERT_TRUE(wait_for_steps(d("run/metrics.jsonl"), 5));
  kill(run.pid, SIGTERM);
  EXPECT_EQ(run.wait_exit(60), 75) << file_text(d("err.txt"));
  const std::string err = file_text(d("err.txt"));
  const size_t at = err.find("the last good checkpoint is step ");
  ASSERT_NE(at, std::string::npos) << err;
  const long good = std::stol(err.substr(at + 33));
  EXPECT_GE(good, 4) << err;
  EXPECT_EQ(good % 2, 0) << err;
  EXPECT_NE(err.find("(" + d("run/ckpt") + ")", at), std::string::npos) << err;
}

// Under mpirun every rank must stop at the same step: a signal to one rank (SIGTERM), or SIGUSR1 to mpirun, which
// forwards it to all.
TEST_F(CliRecovery, StopSignalUnderMpiStopsEveryRankAtOneStep) {
  const std::string mpirun =
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "
      "-x OPENBLAS_NUM_THREADS=1 -np 2 " AGOQ_BIN_PATH " ";
  for (const char* to : {"one rank", "mpirun"}) {
    fs::remove_all(d("run"));
    Started run(mpirun + train({{"--steps", "100000"}, {"--eval-every", "0"}, {"--zero", "1"}}) + " 2>" + d("err.txt"));
    ASSERT_TRUE(wait_for_steps(d("run/metrics.jsonl"), 3));
    if (std::string(to) == "mpirun") {
      kill(run.pid, SIGUSR1);
    } else {  // the ranks are mpirun's children; the last one listed is as good as any
      const std::string ranks = "pgrep -P " + std::to_string(run.pid) + " | tail -1";
      std::FILE* p = popen(ranks.c_str(), "r");
      long rank_pid = 0;
      ASSERT_EQ(std::fscanf(p, "%ld", &rank_pid), 1);
      pclose(p);
      kill(pid_t(rank_pid), SIGTERM);
    }
    EXPECT_EQ(run.wait_exit(60), 75) << to << ": " << file_text(d("err.txt"));
    const std::vector<long> steps = logged_steps(d("run/metrics.jsonl"));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(ckpt_step(d("run/ckpt")), steps.back()) << to;
    EXPECT_NE(file_text(d("err.txt")).find("stopped by"), std::string::npos) << file_text(d("err.txt"));
    // The ZeRO shards of both ranks made it into the checkpoint: a single process resumes from it.
    EXPECT_EQ(
        run_agoq(train({{"--steps", std::to_string(steps.back() + 1)}, {"--resume", d("run/ckpt")}, {"--zero", "0"}}))
            .exit_code,
        0)
        << to;
  }
}

// A disk that holds one checkpoint but not two: the second save fails with ENOSPC named, leaves no temporary file
// and no half checkpoint, and `ckpt` still names the first, which resumes.
TEST_F(CliRecovery, DiskTooSmallForACheckpointFailsCleanly) {
  const std::map<std::string, std::string> big = {{"--dim", "64"}, {"--ffn", "128"}, {"--layers", "2"}};
  auto with = [&](std::map<std::string, std::string> flags) {
    flags.insert(big.begin(), big.end());
    return train(flags);
  };
  ASSERT_EQ(run_agoq(with({{"--steps", "1"}, {"--out", d("probe")}})).exit_code, 0);
  uintmax_t ckpt_bytes = 0;
  for (const auto& e : fs::directory_iterator(d("probe/ckpt-step1"))) ckpt_bytes += fs::file_size(e.path());
  fs::create_directories(d("small"));
  const std::string size = "size=" + std::to_string(ckpt_bytes * 3 / 2 / 4096 * 4096);
  if (mount("agoq-test", d("small").c_str(), "tmpfs", 0, size.c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "; needs root with CAP_SYS_ADMIN)";
  const RunResult r = run_agoq(with({{"--steps", "4"}, {"--ckpt-every", "2"}, {"--out", d("small/run")}}));
  const bool full = r.err.find("No space left on device") != std::string::npos;
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(d("small"))) left.push_back(e.path().string());
  const long kept = fs::exists(d("small/run/ckpt/trainer.json")) ? ckpt_step(d("small/run/ckpt")) : -1;
  // Resume from the surviving checkpoint into a folder with room.
  const int resumed =
      run_agoq(with({{"--steps", "4"}, {"--resume", d("small/run/ckpt")}, {"--out", d("roomy")}})).exit_code;
  umount(d("small").c_str());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(full) << r.err;
  EXPECT_NE(r.err.find(d("small/run/ckpt-step4")), std::string::npos) << "the path is named: " << r.err;
  for (const std::string& p : left) EXPECT_EQ(p.find(".tmp"), std::string::npos) << p;
  EXPECT_EQ(
      std::count_if(left.begin(), left.end(), [](const std::string& p) { return p.find("ckpt-step4") != p.npos; }), 0);
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(resumed, 0);
}

// A damaged tensor (a NaN, or one flipped exponent bit in lm_head that once resumed to a loss of 1e35) is refused by
// name: its checksum no longer matches.
TEST_F(CliRecovery, DamagedWeightsAreRefusedOnResume) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  const std::string model = d("run/ckpt/model.safetensors"), saved = file_text(model);
  uint64_t header = 0;
  std::memcpy(&header, saved.data(), 8);
  // The first tensor's first byte; the top byte of the last tensor's last float (an exponent bit).
  for (const auto& [at, mask] : std::vector<std::pair<size_t, char>>{{8 + header, 0x7f}, {saved.size() - 1, 0x40}}) {
    std::string damaged = saved;
    damaged[at] = char(damaged[at] ^ mask);
    std::ofstream(model, std::ios::binary) << damaged;
    expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}), "does not match the checksum");
  }
  std::ofstream(model, std::ios::binary) << saved;
  EXPECT_EQ(run_agoq(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}})).exit_code, 0);
}

TEST_F(CliRecovery, ResumeRefusesModelFlagsThatDisagree) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}, {"--dim", "32"}}),
                     "--dim 32 (checkpoint: 16)");
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}, {"--layers", "2"}, {"--ffn", "8"}}),
                     "--layers 2 (checkpoint: 1), --ffn 8 (checkpoint: 24)");
  EXPECT_EQ(run_agoq(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}})).exit_code, 0);
}

TEST_F(CliRecovery, DamagedTrainerJsonIsNamed) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  const std::string marker = d("run/ckpt/trainer.json");
  json j = json::parse(std::ifstream(marker));
  const json good = j;
  j["trainer"].erase("loader");
  std::ofstream(marker) << j.dump();
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}),
                     "trainer.json has no data-loader position");
  j["trainer"]["loader"] = "v1 1 2";
  std::ofstream(marker) << j.dump();
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}), "trainer.json: data loader state");
  j["format"] = json::object();
  std::ofstream(marker) << j.dump();
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}), "not an agoq checkpoint marker");
  // Values of the wrong kind, each named in agoq's words (never a JSON library's exception text).
  auto refused = [&](const std::function<void(json&)>& edit, const std::string& why) {
    json k = good;
    edit(k);
    std::ofstream(marker) << k.dump();
    const RunResult r = run_agoq(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}));
    EXPECT_EQ(r.exit_code, 1) << why;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  };
  refused([](json& k) { k["step"] = 9223372036854775808ull; }, "step 9223372036854775808 is not a step count");
  refused([](json& k) { k["step"] = 20.5; }, "step 20.5 is not a step count");
  refused([](json& k) { k["step"] = -1; }, "step -1 is not a step count");
  refused([](json& k) { k.erase("commit"); }, "trainer.json lacks \"commit\"");
  refused([](json& k) { k["step"] = 3; }, "model.safetensors was saved at step 2, trainer.json says step 3");
  refused([](json& k) { k["trainer"]["optim_state"] = "q8"; }, "optim_state is q8 but optim_q8");
  refused([](json& k) { k["trainer"]["optim_state"] = 7; }, "optim_state is not a string");
  refused(
      [](json& k) {
    k["trainer"]["optim_state"] = "q8", k["trainer"]["optim_q8"] = {{"block", "x"}};
      },
      "optim_q8.block is missing or not an integer");
  refused(
      [](json& k) {
    k["trainer"]["optim_state"] = "q8", k["trainer"]["tp"] = 4,
    k["trainer"]["optim_q8"] = {{"block", 128}, {"m_root", 1}, {"v_root", 2}};
      },
      "says it was written with tensor parallelism 4, which this model cannot have been split into");
  refused([](json& k) { k["trainer"]["tp"] = "two"; }, "tp must be a whole number");
}

TEST_F(CliRecovery, TokenizerMustHaveMadeTheTokenFiles) {
  std::ofstream(d("data/tokenizer.model")) << "not a model";
  expect_clean_error(train(), "tokenizer.model");
  // A real tokenizer of 300 pieces next to token files that say vocab 64.
  std::ofstream text(d("text.txt"));
  for (int i = 0; i < 400; ++i) text << "the quick brown fox " << i << " jumps over the lazy dog\n";
  text.close();
  ASSERT_EQ(run_agoq("prepare --input " + d("text.txt") + " --out " + d("prep") + " --vocab-size 300").exit_code, 0);
  fs::copy_file(d("prep/tokenizer.model"), d("data/tokenizer.model"), fs::copy_options::overwrite_existing);
  expect_clean_error(train(), "its tokenizer has 300 tokens but train.bin's header says vocab 64");
}

}  // namespace
}  // namespace agoq

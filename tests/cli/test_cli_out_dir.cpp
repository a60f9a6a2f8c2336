// What a run may touch in --out (train/run_dir.h) and in a prepared data folder (data/prepared_dir.h), through the
// real binary: a `ckpt` link or ckpt-step* entry that leaves --out is refused before training and what it names is
// left as it was; --overwrite replaces only agoq's own checkpoints; a second run into a folder in use is refused
// naming the holder; `prepare` never replaces a prepared corpus silently.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/dir_lock.h"
#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

using CliOutDir = CliErrors;

bool committed(const std::string& ckpt_dir) { return fs::exists(ckpt_dir + "/trainer.json"); }

std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}

TEST_F(CliOutDir, LinkToAnotherRunsCheckpointIsRefused) {
  ASSERT_EQ(run_agoq(train({{"--out", d("other")}, {"--steps", "2"}})).exit_code, 0);
  fs::create_directories(d("run"));
  fs::create_symlink("../other/ckpt-step2", d("run/ckpt"));
  for (const auto& flags : std::vector<std::map<std::string, std::string>>{
           {{"--overwrite", " "}}, {}, {{"--resume", d("run/ckpt")}, {"--overwrite", " "}, {"--steps", "4"}}}) {
    expect_clean_error(train(flags), "ckpt points to '../other/ckpt-step2', not to a ckpt-step<N> folder inside --out");
    EXPECT_TRUE(committed(d("other/ckpt-step2")));
  }
}

TEST_F(CliOutDir, LinkToOutOrItsParentIsRefused) {
  fs::create_directories(d("run"));
  std::ofstream(d("run/notes.txt")) << "mine";
  std::ofstream(d("keep.txt")) << "mine too";
  for (const char* target : {".", "..", "/", "ckpt-step2/../..", "ckpt-stepX"}) {
    SCOPED_TRACE(target);
    fs::remove(d("run/ckpt"));
    fs::create_symlink(target, d("run/ckpt"));
    expect_clean_error(train({{"--overwrite", " "}}), "ckpt points to");
    EXPECT_EQ(file_text(d("run/notes.txt")), "mine");
    EXPECT_EQ(file_text(d("keep.txt")), "mine too");
  }
}

TEST_F(CliOutDir, CheckpointFoldersMustBeAgoqsOwn) {
  ASSERT_EQ(run_agoq(train({{"--out", d("other")}, {"--steps", "2"}})).exit_code, 0);
  fs::create_directories(d("run"));
  fs::create_symlink(d("other/ckpt-step2"), d("run/ckpt-step3"));  // the next save would write through it
  expect_clean_error(train({{"--overwrite", " "}}), "ckpt-step3 is not a folder agoq made");
  EXPECT_TRUE(committed(d("other/ckpt-step2")));
  fs::remove(d("run/ckpt-step3"));
  fs::create_directories(d("run/ckpt-step3"));
  std::ofstream(d("run/ckpt-step3/notes.txt")) << "mine";
  expect_clean_error(train({{"--overwrite", " "}}), "ckpt-step3 holds 'notes.txt', which is not a checkpoint's file");
  EXPECT_EQ(file_text(d("run/ckpt-step3/notes.txt")), "mine");
}

// --overwrite replaces the earlier run's checkpoint, and nothing else: a user's file in --out stays, and a linked
// folder whose marker is not agoq's is kept (with a note) though the link moves on.
TEST_F(CliOutDir, OverwriteDeletesOnlyAgoqsCheckpoints) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  ASSERT_TRUE(committed(d("run/ckpt-step2")));
  std::ofstream(d("run/notes.txt")) << "mine";
  ASSERT_EQ(run_agoq(train({{"--steps", "3"}, {"--overwrite", " "}})).exit_code, 0);
  EXPECT_FALSE(fs::exists(d("run/ckpt-step2")));
  EXPECT_EQ(fs::read_symlink(d("run/ckpt")), "ckpt-step3");
  EXPECT_EQ(file_text(d("run/notes.txt")), "mine");

  fs::create_directories(d("run/ckpt-step9"));
  std::ofstream(d("run/ckpt-step9/config.json")) << "{\"a user's\": \"config\"}";
  fs::remove(d("run/ckpt"));
  fs::create_symlink("ckpt-step9", d("run/ckpt"));
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}, {"--overwrite", " "}})).exit_code, 0);
  EXPECT_EQ(fs::read_symlink(d("run/ckpt")), "ckpt-step2");
  EXPECT_EQ(file_text(d("run/ckpt-step9/config.json")), "{\"a user's\": \"config\"}");
}

// A resumed run continues its checkpoint's identity: the checkpoint it resumed from goes when the next is written.
TEST_F(CliOutDir, ResumeReplacesTheCheckpointItContinues) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  ASSERT_EQ(run_agoq(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}})).exit_code, 0);
  EXPECT_FALSE(fs::exists(d("run/ckpt-step2")));
  EXPECT_TRUE(committed(d("run/ckpt-step4")));
  ASSERT_EQ(run_agoq(train({{"--steps", "5"}, {"--resume", d("run/ckpt-step4")}})).exit_code, 0);
  EXPECT_FALSE(fs::exists(d("run/ckpt-step4")));
  EXPECT_EQ(fs::read_symlink(d("run/ckpt")), "ckpt-step5");
}

TEST_F(CliOutDir, ASecondRunIntoAFolderInUseIsRefused) {
  {  // held by this process
    const DirLock held = DirLock::acquire(d("run"), "test");
    const std::string holder = "in use by another agoq run (pid " + std::to_string(::getpid()) + " on host " + host();
    expect_clean_error(train(), holder);
    expect_clean_error(train({{"--overwrite", " "}}), holder);
  }
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);  // released

  // Held by a real run, which is then stopped: its checkpoint is whole and is the one `ckpt` names.
  const std::string err = d("first.err");
  const pid_t first = fork();
  if (first == 0) {
    const std::string cmd =
        "exec " AGOQ_BIN_PATH " " +
        train({{"--steps", "100000"}, {"--ckpt-every", "0"}, {"--eval-every", "0"}, {"--resume", d("run/ckpt")}}) +
        " 2>" + err;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (file_text(d("run/metrics.jsonl")).find("\"step\":3") == std::string::npos &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect_clean_error(train({{"--overwrite", " "}}), "in use by another agoq run (pid " + std::to_string(first));
  kill(first, SIGTERM);
  int st = 0;
  waitpid(first, &st, 0);
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 75) << file_text(err);
  EXPECT_TRUE(committed(d("run/ckpt")));
}

// A run refused at set-up leaves no trace: the --out it made goes, with the parents it made, but not a parent that
// held something before.
TEST_F(CliOutDir, ARunRefusedAtSetUpRemovesTheFoldersItMade) {
  expect_clean_error(train({{"--data", d("nope")}, {"--out", d("deep/a/b/")}}), "nope/train.bin");
  EXPECT_FALSE(fs::exists(d("deep")));
  fs::create_directories(d("kept")), std::ofstream(d("kept/note.txt")) << "mine";
  expect_clean_error(train({{"--data", d("nope")}, {"--out", d("kept/a/b")}}), "nope/train.bin");
  EXPECT_FALSE(fs::exists(d("kept/a")));
  EXPECT_EQ(file_text(d("kept/note.txt")), "mine");
}

struct PreparedText {
  explicit PreparedText(const std::string& path) {
    std::ofstream text(path);
    for (int i = 0; i < 300; ++i) text << "the quick brown fox " << i << " jumps over the lazy dog\n";
  }
};

TEST_F(CliOutDir, PrepareNeverReplacesACorpusSilently) {
  PreparedText text(d("a.txt"));
  const std::string prep = "prepare --input " + d("a.txt") + " --out " + d("prep");
  ASSERT_EQ(run_agoq(prep + " --vocab-size 300").exit_code, 0);
  const std::string tokens = file_text(d("prep/train.bin")), tok = file_text(d("prep/tokenizer.model"));
  expect_clean_error(prep + " --vocab-size 320", "already holds a prepared corpus");
  EXPECT_EQ(file_text(d("prep/train.bin")), tokens);
  EXPECT_EQ(file_text(d("prep/tokenizer.model")), tok);
  {
    const DirLock held = DirLock::acquire(d("prep"), "test");
    expect_clean_error(prep + " --vocab-size 320 --overwrite",
                       "in use by another agoq run (pid " + std::to_string(::getpid()));
  }
  const RunResult replaced = run_agoq(prep + " --vocab-size 320 --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_NE(file_text(d("prep/tokenizer.model")), tok);
  EXPECT_FALSE(fs::exists(d("prep/.prepare.tmp")));
  // A refused prepare leaves no folder behind.
  expect_clean_error("prepare --input " + d("missing.txt") + " --out " + d("nothing"), "missing.txt");
  EXPECT_FALSE(fs::exists(d("nothing")));
}

// A replacement interrupted after the old meta.json went (the commit marker) is refused by a training.
TEST_F(CliOutDir, InterruptedPrepareIsRefusedByTraining) {
  PreparedText text(d("a.txt"));
  ASSERT_EQ(run_agoq("prepare --input " + d("a.txt") + " --out " + d("prep") + " --vocab-size 300").exit_code, 0);
  ASSERT_EQ(run_agoq(train({{"--data", d("prep")}, {"--out", d("r1")}})).exit_code, 0);
  fs::create_directories(d("prep/.prepare.tmp"));
  fs::remove(d("prep/meta.json"));
  expect_clean_error(train({{"--data", d("prep")}, {"--out", d("r2")}}), "was interrupted while it replaced the files");
}

}  // namespace
}  // namespace agoq

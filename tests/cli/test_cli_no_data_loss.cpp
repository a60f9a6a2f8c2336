// A command never deletes or replaces what it reads from (issue 42, "data loss"): a training's --init-from
// checkpoint inside --out, a model folder given to `prepare` as both --tokenizer and --out, an output path that is
// a device, a FIFO, a link or one of the inputs. Each case is the reproducer of the report.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <thread>

#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

class CliNoDataLoss : public CliErrors {
 protected:
  // A corpus with its own tokenizer, and a run A trained on it: A/ckpt-step2 is a model with a tokenizer.model.
  void SetUp() override {
    CliErrors::SetUp();
    {
      std::ofstream text(d("a.txt"));
      for (int i = 0; i < 300; ++i) text << "the quick brown fox " << i << " jumps over the lazy dog\n";
    }
    ASSERT_EQ(run_agoq("prepare --input " + d("a.txt") + " --out " + d("prep") + " --vocab-size 300").exit_code, 0);
    ASSERT_EQ(run_agoq(train({{"--data", d("prep")}, {"--out", d("A")}, {"--steps", "2"}})).exit_code, 0);
    ckpt_ = d("A/ckpt-step2");
    ASSERT_TRUE(fs::exists(ckpt_ + "/trainer.json"));
    weights_ = file_text(ckpt_ + "/model.safetensors");
  }
  void expect_checkpoint_intact() {
    EXPECT_TRUE(fs::exists(ckpt_ + "/trainer.json"));
    EXPECT_EQ(file_text(ckpt_ + "/model.safetensors"), weights_);
  }
  std::string ckpt_, weights_;
};

// `train --init-from runs/A/ckpt --out runs/A --overwrite` deleted runs/A/ckpt-step5, the source; with
// `--init-from runs/A/ckpt-step5 --steps 5` the new checkpoint replaced it under its own name.
TEST_F(CliNoDataLoss, InitFromACheckpointOfOutIsNeverReplaced) {
  for (const std::string& src : {d("A/ckpt"), ckpt_})
    for (const char* steps : {"1", "2"}) {
      expect_clean_error(train({{"--data", d("prep")},
                                {"--init-from", src},
                                {"--out", d("A")},
                                {"--steps", steps},
                                {"--overwrite", " "}}),
                         "is a checkpoint of --out");
      expect_checkpoint_intact();
    }
  // The same checkpoint into another --out is a fine-tune as usual.
  const RunResult ok = run_agoq(train({{"--data", d("prep")}, {"--init-from", d("A/ckpt")}, {"--out", d("B")}}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  expect_checkpoint_intact();
}

// --out equal to (or inside) the --init-from checkpoint wrote the new run into it; --resume likewise.
TEST_F(CliNoDataLoss, OutInsideTheCheckpointReadIsRefused) {
  for (const std::string& out : {ckpt_, ckpt_ + "/sub", d("A/ckpt")}) {
    expect_clean_error(train({{"--data", d("prep")}, {"--init-from", ckpt_}, {"--out", out}}), "--init-from");
    expect_clean_error(train({{"--data", d("prep")}, {"--resume", ckpt_}, {"--out", out}}), "--resume");
  }
  EXPECT_FALSE(fs::exists(ckpt_ + "/sub"));
  EXPECT_FALSE(fs::exists(ckpt_ + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(ckpt_ + "/.agoq.lock"));
  expect_checkpoint_intact();
}

// `prepare --tokenizer M --out M --overwrite`, M a model folder holding tokenizer.json and tokenizer.model, deleted
// M's tokenizer.model and wrote the corpus among the weights; `prepare --out CKPT --overwrite` likewise.
TEST_F(CliNoDataLoss, PrepareOverwritesOnlyAPreparedCorpus) {
  const std::string tok = file_text(ckpt_ + "/tokenizer.model");
  fs::copy_file(d("prep/tokenizer.model"), d("tokenizer.model"));
  const std::string prep = "prepare --input " + d("a.txt") + " --overwrite";
  expect_clean_error(prep + " --tokenizer " + ckpt_ + " --out " + ckpt_, "which this command reads");
  expect_clean_error(prep + " --tokenizer " + ckpt_ + "/tokenizer.model --out " + ckpt_, "which this command reads");
  expect_clean_error(prep + " --tokenizer " + d("tokenizer.model") + " --out " + ckpt_,
                     "no corpus `agoq prepare` wrote");
  expect_clean_error(prep + " --out " + ckpt_, "no corpus `agoq prepare` wrote");
  expect_clean_error("prepare --input " + d("prep/train.bin") + " --out " + d("prep") + " --overwrite",
                     "which this command reads");
  EXPECT_EQ(file_text(ckpt_ + "/tokenizer.model"), tok);
  EXPECT_FALSE(fs::exists(ckpt_ + "/train.bin"));
  EXPECT_FALSE(fs::exists(ckpt_ + "/.prepare.tmp"));
  expect_checkpoint_intact();
  // A prepared corpus is still replaced with --overwrite.
  const RunResult again = run_agoq(prep + " --out " + d("prep") + " --vocab-size 310");
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// `eval --logits-out /dev/null` replaced the system's /dev/null with a regular file (as root); a FIFO and a link
// were replaced too. Now a device or FIFO is written through, a link followed, and an input never written.
TEST_F(CliNoDataLoss, EvalLogitsOutNeverReplacesWhatIsNotAFile) {
  const std::string eval = "eval --ckpt " + ckpt_ + " --text " + d("a.txt") + " --seq 8 --max-tokens 64";
  const std::string null_dev = d("null");
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    const RunResult r = run_agoq(eval + " --logits-out " + null_dev);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::is_character_file(null_dev));
  } else {
    GTEST_LOG_(INFO) << "skipping the device case: mknod needs root";
  }
  ASSERT_EQ(::mkfifo(d("fifo").c_str(), 0600), 0);
  expect_clean_error(eval + " --logits-out " + d("fifo"), "a FIFO with no reader");
  EXPECT_TRUE(fs::is_fifo(d("fifo")));
  std::string piped;
  std::thread reader([&] { piped = file_text(d("fifo")); });
  const RunResult through = run_agoq(eval + " --logits-out " + d("fifo"));
  reader.join();
  EXPECT_EQ(through.exit_code, 0) << through.err;
  EXPECT_EQ(piped.size(), 300 * sizeof(float));
  EXPECT_TRUE(fs::is_fifo(d("fifo")));

  std::ofstream(d("logits.f32")) << "old";
  fs::create_symlink("logits.f32", d("link"));
  ASSERT_EQ(run_agoq(eval + " --logits-out " + d("link")).exit_code, 0);
  EXPECT_TRUE(fs::is_symlink(d("link")));
  EXPECT_EQ(fs::file_size(d("logits.f32")), 300 * sizeof(float));

  const std::string text = file_text(d("a.txt"));
  expect_clean_error(eval + " --logits-out " + d("a.txt"), "which this command reads");
  expect_clean_error(eval + " --logits-out " + ckpt_ + "/model.safetensors", "which this command reads");
  EXPECT_EQ(file_text(d("a.txt")), text);
  const RunResult beside = run_agoq(eval + " --logits-out " + ckpt_ + "/logits.f32");  // a new file beside the model
  EXPECT_EQ(beside.exit_code, 0) << beside.err;
  expect_checkpoint_intact();
}

}  // namespace
}  // namespace agoq

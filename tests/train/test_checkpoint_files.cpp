// Checkpoints as sets of files: the files a checkpoint carries (the tokenizer) are covered by its commit, a
// checkpoint missing any one file is refused, deleting one un-commits it first, a failed save leaves nothing behind,
// and a tensor holding NaN or infinity is refused on load.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/expect_error.h"
#include "tests/train/checkpoint_test_util.h"

namespace agoq {
namespace {

using namespace ckpt_test;

const std::vector<CheckpointFile> kTokenizer = {{"tokenizer.model", std::string(300, 'x') + "pieces"}};

TEST(CheckpointFiles, CarriedFilesAreCoveredByTheCommit) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 3, kTokenizer);
  EXPECT_EQ(file_read(dir + "/tokenizer.model"), kTokenizer[0].bytes);
  EXPECT_EQ(checkpoint_inspect(dir).step, 3);
  // Truncated (a full disk used to commit half a tokenizer), replaced by another of the same size, or missing.
  fs::resize_file(dir + "/tokenizer.model", 100);
  expect_error([&] { checkpoint_inspect(dir); }, {"tokenizer.model", "not the file this checkpoint saved"});
  file_write(dir + "/tokenizer.model", std::string(300, 'y') + "pieces");
  expect_error([&] { checkpoint_inspect(dir); }, {"tokenizer.model", "not the file this checkpoint saved"});
  fs::remove(dir + "/tokenizer.model");
  expect_error([&] { checkpoint_inspect(dir); }, {"tokenizer.model missing"});
  // A name that is not a plain file of the folder is refused before anything is written.
  for (const char* bad : {"../escape", "model.safetensors", "trainer.json", ""})
    expect_error(
        [&] {
      checkpoint_save(d / "bad", m.config, m.weights, m.optimizer, {}, 1, {{bad, "x"}});
        },
        {"cannot carry a file named"});
}

// Whatever a kill interrupts (a save, or the deletion of the previous checkpoint), any file missing is refused
// with a message naming it, never loaded as a checkpoint.
TEST(CheckpointFiles, ACheckpointMissingAnyFileIsRefused) {
  for (const char* gone :
       {"model.safetensors", "optimizer.safetensors", "config.json", "tokenizer.model", "trainer.json"}) {
    TmpDir d;
    const std::string dir = d / "ck";
    FakeModel m(tiny_config(false), 1);
    checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 3, kTokenizer);
    fs::remove(dir + "/" + gone);
    FakeModel back(tiny_config(false), 2);
    expect_error([&] { checkpoint_load(dir, back.config, back.weights, back.optimizer); }, {gone});
  }
}

TEST(CheckpointFiles, RemovalUncommitsFirst) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 3, kTokenizer);
  checkpoint_remove(dir);
  EXPECT_FALSE(fs::exists(dir));
  checkpoint_remove(dir);  // nothing there: nothing to do
  // A folder whose deletion was cut short is the same as one whose trainer.json is gone: refused by name.
  checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 4, kTokenizer);
  fs::remove(dir + "/trainer.json");
  expect_error([&] { checkpoint_inspect(dir); }, {"trainer.json missing"});
}

TEST(CheckpointFiles, AFailedSaveLeavesNothingBehind) {
  TmpDir d;
  const std::string dir = d / "ck";
  FakeModel m(tiny_config(false), 1);
  LlamaConfig bad = m.config;  // passes the shape checks, but cannot be written as JSON that loads back
  bad.rope_theta = std::numeric_limits<float>::infinity();
  expect_error([&] { checkpoint_save(dir, bad, m.weights, m.optimizer, {}, 1, kTokenizer); }, {"rope_theta"});
  EXPECT_FALSE(fs::exists(dir)) << "the save created the folder, so it removes it";
  // Into an existing checkpoint's folder: the old checkpoint's files stay, no temporary is left.
  checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 1, kTokenizer);
  expect_error(
      [&] {
    checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 2, {{"a/b", "x"}});
      },
      {"cannot carry"});
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
}

TEST(CheckpointFiles, NonFiniteTensorsAreRefusedOnLoad) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    TmpDir d;
    const std::string dir = d / "ck";
    FakeModel m(tiny_config(false), 1);
    m.params[2][5] = bad;
    m.moments[1][0] = bad;
    checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 3);
    FakeModel back(tiny_config(false), 2);
    expect_error([&] { checkpoint_load(dir, back.config, back.weights, {}); },
                 {m.weights[2].name, "1 non-finite values"});
    m.params[2][5] = 0.5f;
    checkpoint_save(dir, m.config, m.weights, m.optimizer, {}, 3);
    checkpoint_load(dir, back.config, back.weights, {});  // the weights alone are fine now; the moments are not
    expect_error([&] { checkpoint_load(dir, back.config, back.weights, back.optimizer); },
                 {m.optimizer[1].name, "non-finite"});
  }
}

}  // namespace
}  // namespace agoq

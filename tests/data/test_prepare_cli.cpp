#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace agoq {

using namespace agoq::data_test;

namespace {

struct CliRun {
  int rc;
  std::string out;
};

// Runs `agoq <args>` and captures stdout + stderr.
CliRun agoq_run(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string(AGOQ_BIN_PATH) + " " + args + " > " + log.string() + " 2>&1";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, file_bytes(log)};
}

}  // namespace

TEST(PrepareCli, WritesTokenizerSplitsAndMeta) {
  if (!fs::exists(AGOQ_BIN_PATH)) GTEST_SKIP() << AGOQ_BIN_PATH << " not built (ninja agoq)";
  const fs::path d = data_test_dir("prepare");
  fs::create_directories(d / "in");
  file_put(d / "in" / "a.txt", synthetic_text(1500, 3));
  file_put(d / "in" / "b.txt", synthetic_text(500, 4));
  const fs::path out = d / "out";
  const CliRun r = agoq_run(
      "prepare --input " + (d / "in").string() + " --out " + out.string() + " --vocab-size 300 --val-fraction 0.1",
      d / "log");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("round trip exact"), std::string::npos) << r.out;

  const auto meta = nlohmann::json::parse(file_bytes(out / "meta.json"));
  const Tokenizer tok = Tokenizer::load(out / "tokenizer.model");
  TokenFileHeader th, vh;
  std::vector<int32_t> all = token_file_read(out / "train.bin", &th);
  const std::vector<int32_t> val = token_file_read(out / "val.bin", &vh);
  EXPECT_EQ(th.vocab_size, 300u);
  EXPECT_EQ(vh.vocab_size, 300u);
  EXPECT_EQ(meta["vocab_size"], 300);
  EXPECT_EQ(meta["train_tokens"], all.size());
  EXPECT_EQ(meta["val_tokens"], val.size());
  EXPECT_NEAR(double(val.size()) / double(all.size() + val.size()), 0.1, 0.001);
  EXPECT_EQ(meta["source_kind"], "folder");
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(meta["tokens"], all.size());
  // The splits are the head and tail of one token stream that decodes back to the corpus.
  const Corpus c = corpus_read((d / "in").string());
  EXPECT_EQ(meta["chars"], c.text.size());
  EXPECT_EQ(tok.decode(all), c.text);

  // Reusing the tokenizer gives the same tokens.
  const fs::path out2 = d / "out2";
  const CliRun r2 = agoq_run("prepare --input " + (d / "in").string() + " --out " + out2.string() + " --tokenizer " +
                                 (out / "tokenizer.model").string() + " --val-fraction 0.1",
                             d / "log2");
  ASSERT_EQ(r2.rc, 0) << r2.out;
  EXPECT_EQ(file_bytes(out2 / "train.bin"), file_bytes(out / "train.bin"));
  EXPECT_EQ(file_bytes(out2 / "tokenizer.model"), file_bytes(out / "tokenizer.model"));
}

TEST(PrepareCli, BadInputsAreOneLineErrors) {
  if (!fs::exists(AGOQ_BIN_PATH)) GTEST_SKIP() << AGOQ_BIN_PATH << " not built (ninja agoq)";
  const fs::path d = data_test_dir("prepare_err");
  file_put(d / "t.txt", synthetic_text(300));
  const std::string out = std::string(" --out ").append((d / "out").string());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"prepare --input " + (d / "missing").string() + out, "missing: no such file"},
      {"prepare --input " + (d / "t.txt").string() + out + " --val-fraction 1.5", "--val-fraction"},
      {"prepare --input " + (d / "t.txt").string() + out + " --vocab-size 10", "vocab size 10"},
      {"prepare --input " + (d / "t.txt").string() + out + " --tokenizer " + (d / "no.model").string(), "no.model"},
  };
  for (const auto& [args, want] : cases) {
    const CliRun r = agoq_run(args, d / "log");
    EXPECT_EQ(r.rc, 1) << args;
    // stdout's progress lines (flushed as they happen) may come first; the error is the last line.
    const size_t at = r.out.find("agoq: error: ");
    EXPECT_TRUE(at == 0 || (at != std::string::npos && r.out[at - 1] == '\n')) << r.out;
    EXPECT_EQ(r.out.find('\n', at), r.out.size() - 1) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  }
  EXPECT_NE(agoq_run("prepare", d / "log").rc, 0);  // --input is required
}

}  // namespace agoq

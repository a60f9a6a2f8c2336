// `agoq prepare` under careless or hostile input (issue 42): a regex bomb in tokenizer.json, invalid UTF-8 in a
// JSON-lines file, an absurd --seq, and a failed write, each one clean line; a failure leaves no staging folder.
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/common/bpe_byte_chars.h"

namespace agoq {

namespace {

using nlohmann::json;

class PrepareReliability : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agoq_cli_prep_" + test_name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tok");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string d(const std::string& rel) const { return (dir_ / rel).string(); }
  // A byte-level BPE tokenizer.json (every byte, </s> as EOS) with `pre_tokenizer`, in d("tok").
  std::string tokenizer(const json& pre_tokenizer) const {
    json vocab = json::object();
    const std::vector<std::string> chars = bpe_byte_chars();
    for (int b = 0; b < 256; ++b) vocab[chars[b]] = b;
    const json j = {{"added_tokens", {{{"id", 256}, {"content", "</s>"}, {"special", true}}}},
                    {"pre_tokenizer", pre_tokenizer},
                    {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
    std::ofstream(d("tok/tokenizer.json")) << j.dump();
    std::ofstream(d("tok/tokenizer_config.json")) << json{{"eos_token", "</s>"}}.dump();
    return d("tok");
  }
  std::string byte_level() const {
    return tokenizer({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
  }
  std::string write(const std::string& rel, const std::string& bytes) const {
    std::ofstream(d(rel), std::ios::binary) << bytes;
    return d(rel);
  }

 private:
  fs::path dir_;
};

}  // namespace

// `(a+)\1+$` took ~n^3 on 50 KB of "a" (then "b"): prepare hung for hours. Now refused when the tokenizer is read,
// naming the pattern and the file.
TEST_F(PrepareReliability, BackReferenceSplitRegexIsRefusedNotAHang) {
  const std::string tok = tokenizer(
      {{"type", "Sequence"},
       {"pretokenizers",
        {{{"type", "Split"}, {"pattern", {{"Regex", R"((a+)\1+$)"}}}, {"behavior", "Isolated"}, {"invert", false}},
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}});
  const std::string in = write("a.txt", std::string(50000, 'a') + "b\n");
  expect_clean_error("prepare --input " + in + " --tokenizer " + tok + " --out " + d("out"),
                     "tokenizer " + tok + "/tokenizer.json: split regex 0: regex '(a+)\\1+$' has a back reference");
}

// A line with invalid UTF-8 was "not a JSON object"; it is named as what it is, with the file and line.
TEST_F(PrepareReliability, InvalidUtf8InJsonlIsNamedWithFileAndLine) {
  const std::string in = write("bad.jsonl",
                               "{\"prompt\": \"a\", \"completion\": \" b\"}\n"
                               "{\"prompt\": \"caf\xC3\", \"completion\": \" b\"}\n");
  expect_clean_error("prepare --format prompt-completion --input " + in + " --tokenizer " + byte_level() +
                         " --seq 16 --out " + d("out"),
                     in + ":2: not valid UTF-8 (byte 16 of the line)");
}

// --seq 1073741824 padded a window of 2^30 tokens in memory (6 GiB); 2147483647 overflowed seq + 1.
TEST_F(PrepareReliability, SeqBeyondWhatAWindowHoldsIsRefused) {
  const std::string in = write("ok.jsonl", "{\"prompt\": \"a\", \"completion\": \" b\"}\n");
  for (const char* seq : {"1073741824", "2147483647", "16777217"})
    expect_clean_error("prepare --format prompt-completion --input " + in + " --tokenizer " + byte_level() +
                           " --val-fraction 0 --seq " + seq + " --out " + d("out"),
                       std::string("--seq ") + seq + " is more than agoq packs examples for (at most 16777216");
  EXPECT_FALSE(fs::exists(d("out/train.bin")));
}

// After its own disk-full error, prepare left --out/.prepare.tmp behind. A write that fails (here: a file size limit,
// as a full disk fails it, with SIGXFSZ ignored so that write() returns EFBIG) is one clean line, and the staging
// folder is gone; nothing of the set is in --out.
TEST_F(PrepareReliability, FailedWriteLeavesNoStagingFolder) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "hello world " + std::to_string(i) + "\n";
  const std::string in = write("big.txt", text), tok = byte_level();
  const RunResult r = run_agoq("prepare --input " + in + " --tokenizer " + tok + " --out " + d("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;  // the same command with room to write succeeds
  fs::remove_all(d("out"));
  const std::string cmd = "bash -c 'ulimit -f 64; trap \"\" XFSZ; exec timeout 60 " AGOQ_BIN_PATH " prepare --input " +
                          in + " --tokenizer " + tok + " --out " + d("out") + "' >/dev/null 2>" + d("err.txt");
  const int st = std::system(cmd.c_str());
  const std::string err = file_text(d("err.txt"));
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 1) << err;
  EXPECT_EQ(err.rfind("agoq: error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("train.bin"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(d("out/.prepare.tmp")));
  EXPECT_FALSE(fs::exists(d("out/train.bin")));
  EXPECT_FALSE(fs::exists(d("out/meta.json")));
}

}  // namespace agoq

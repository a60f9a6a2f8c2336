// Issue 42 (reliability, round 3), JSON inputs and the files of a model folder: a deeply nested or huge value, a
// number beyond a double or beyond a config field's type, and a path that is not a readable regular file (a FIFO, a
// folder, a symlink loop, a folder that cannot be read, an empty path) are each one line naming the file or flag.
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

// run_agoq with the binary started through `wrapper` (e.g. "setpriv ...").
RunResult run_agoq_as(const std::string& wrapper, const std::string& args) {
  const fs::path err_file = fs::temp_directory_path() / ("agoq_cli_stderr_as_" + std::to_string(::getpid()) + ".txt");
  const int st =
      std::system(("timeout 60 " + wrapper + AGOQ_BIN_PATH " " + args + " >/dev/null 2>" + err_file.string()).c_str());
  const std::string err = file_text(err_file.string());
  fs::remove(err_file);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, err};
}

std::string nested(size_t levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); }

// A config.json of a tiny model, with `extra` (",\"key\": value") appended.
std::string tiny_config(const std::string& extra = "") {
  return R"({"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
    "intermediate_size": 24, "max_position_embeddings": 64, "rms_norm_eps": 1e-5)" +
         extra + "}";
}

class CliReliabilityJson : public CliErrors {
 protected:
  // A Hugging Face model folder holding only `config` as config.json (every error here comes before the weights).
  std::string model_with_config(const std::string& name, const std::string& config) {
    fs::create_directories(d(name));
    std::ofstream(d(name + "/config.json")) << config;
    return d(name);
  }
  // Every command that reads a model's config.json: inspect, eval, sample, train --init-from, --layout auto, train
  // --config and plan --model.
  std::vector<std::string> commands_reading(const std::string& m) {
    std::ofstream(d("text.txt")) << "some text to score";
    return {"inspect " + m,
            "eval --ckpt " + m + " --text " + d("text.txt"),
            "sample --ckpt " + m + " --prompt hi",
            train({{"--init-from", m}}),
            train({{"--init-from", m}, {"--layout", "auto"}, {"--calibration", d("none.json")}}),
            train({{"--config", m + "/config.json"}}),
            "plan --model " + m + "/config.json --gpus 1"};
  }
  static void expect_short_line(const std::string& args, const std::string& needle, size_t most = 400) {
    const RunResult r = run_agoq(args);
    expect_clean_error(args, needle);
    EXPECT_LE(r.err.size(), most) << args << "\n" << r.err.substr(0, 1000);
  }
};

// SIGSEGV: a value nested ~85,000 levels deep, quoted by nlohmann's dump() (which recurses once per level) in the
// error about it. Now nesting beyond 512 levels is refused as the file is parsed, in every command.
TEST_F(CliReliabilityJson, DeeplyNestedConfigValueIsRefusedNotACrash) {
  const std::string m = model_with_config("deep", tiny_config(",\"model_type\": " + nested(100000)));
  for (const std::string& cmd : commands_reading(m)) expect_short_line(cmd, "nest deeper than 512 levels");
}

// At 70,000 levels the error line was 140 KB; a 50 MB string was quoted whole. A quotation is at most ~80 characters.
TEST_F(CliReliabilityJson, QuotedValuesAreExcerpts) {
  const std::string deep = model_with_config("deep500", tiny_config(",\"model_type\": " + nested(500)));
  expect_short_line("inspect " + deep, "LlamaConfig key model_type = [[[[", 300);
  const std::string big =
      model_with_config("big", tiny_config(",\"model_type\": \"" + std::string(50 << 20, 'x') + "\""));
  expect_short_line("inspect " + big, "LlamaConfig key model_type = \"xxxx", 300);
  expect_short_line(train({{"--config", big + "/config.json"}}), "LlamaConfig key model_type = \"xxxx", 300);
}

// out_of_range.406 ("[json.exception.out_of_range.406] number overflow parsing '1e400'") for a key agoq ignores.
TEST_F(CliReliabilityJson, ANumberBeyondADoubleIsNamedInAgoqsWords) {
  const std::string m = model_with_config("e400", tiny_config(",\"unused\": 1e400"));
  for (const std::string& cmd : commands_reading(m)) {
    expect_short_line(cmd, "the number 1e400 is beyond the range of a double");
    EXPECT_EQ(run_agoq(cmd).err.find("json.exception"), std::string::npos) << cmd;
  }
}

// hidden_size 2^64 - 1 was read as -1; rms_norm_eps 1e-300 as 0 ("norm_eps must be in (0, 1) (got 0)").
TEST_F(CliReliabilityJson, ConfigFieldsBeyondTheirTypesAreRefusedByName) {
  std::ofstream(d("wide.json")) << R"({"vocab_size": 64, "hidden_size": 18446744073709551615, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 64, "rms_norm_eps": 1e-5})";
  expect_clean_error(train({{"--config", d("wide.json")}}),
                     "LlamaConfig key hidden_size = 18446744073709551615 is out of range");
  std::ofstream(d("tiny_eps.json")) << R"({"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 64, "rms_norm_eps": 1e-300})";
  expect_clean_error(train({{"--config", d("tiny_eps.json")}}),
                     "LlamaConfig key rms_norm_eps = 1e-300 is beyond the range of a float32");
  std::ofstream(d("theta.json")) << tiny_config(",\"rope_theta\": 1e39");
  expect_clean_error(train({{"--config", d("theta.json")}}), "LlamaConfig key rope_theta = 1e+39 is beyond");
  std::ofstream(d("factor.json")) << tiny_config(",\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e-320}");
  expect_clean_error(train({{"--config", d("factor.json")}}), "rope_scaling.factor = 1e-320 is beyond");
}

// --config gives the model's shape: an unsupported key is named with the file, a shape flag that contradicts the file
// is refused (it was silently overridden), one that agrees is fine.
TEST_F(CliReliabilityJson, ConfigNamesItsFileAndShapeFlagsMustAgreeWithIt) {
  std::ofstream(d("gelu.json")) << tiny_config(",\"hidden_act\": \"gelu\"");
  expect_clean_error(train({{"--config", d("gelu.json")}}),
                     "--config " + d("gelu.json") + ": LlamaConfig key hidden_act = \"gelu\" is not supported");
  std::ofstream(d("tiny.json")) << tiny_config();
  expect_clean_error(train({{"--config", d("tiny.json")}, {"--dim", "32"}, {"--layers", "3"}}),
                     "gives the model's shape: --dim 32 (--config: 16), --layers 3 (--config: 1); drop the flag");
  EXPECT_EQ(run_agoq(train({{"--config", d("tiny.json")}, {"--dim", "16"}, {"--steps", "1"}})).exit_code, 0);
}

// A FIFO named model.safetensors or config.json hung in open(); a folder given as model.safetensors.index.json (or
// --config) gave libstdc++'s "basic_filebuf::underflow ... Is a directory" with no file named.
TEST_F(CliReliabilityJson, PathsThatAreNotRegularFilesAreNamed) {
  const std::string fifo_weights = model_with_config("fifo_weights", tiny_config());
  ASSERT_EQ(::mkfifo((fifo_weights + "/model.safetensors").c_str(), 0644), 0);
  expect_clean_error("inspect " + fifo_weights, "model.safetensors: it is a FIFO, not a file");
  fs::create_directories(d("fifo_config"));
  ASSERT_EQ(::mkfifo(d("fifo_config/config.json").c_str(), 0644), 0);
  expect_clean_error("inspect " + d("fifo_config"), "config.json: it is a FIFO, not a file");
  expect_clean_error(train({{"--config", d("fifo_config/config.json")}}), "config.json: it is a FIFO, not a file");
  const std::string index_dir = model_with_config("index_dir", tiny_config());
  fs::create_directories(index_dir + "/model.safetensors.index.json");
  expect_clean_error("inspect " + index_dir, "model.safetensors.index.json: it is a folder, not a file");
  expect_clean_error(train({{"--config", index_dir}}), index_dir + ": it is a folder, not a file");
  expect_clean_error("plan --model " + index_dir + " --gpus 1", "it is a folder, not a file");
}

// A symlink loop was reported as "no such file or folder".
TEST_F(CliReliabilityJson, ASymlinkLoopIsNamedAsOne) {
  fs::create_symlink(d("loop"), d("loop"));
  expect_clean_error("inspect " + d("loop"), "Too many levels of symbolic links");
  expect_clean_error(train({{"--config", d("loop")}}), "Too many levels of symbolic links");
  const std::string m = model_with_config("loop_config", "");
  fs::remove(m + "/config.json");
  fs::create_symlink(m + "/config.json", m + "/config.json");
  expect_clean_error("inspect " + m, "Too many levels of symbolic links");
}

// A folder that cannot be read was "holds neither trainer.json nor config.json". Root reads every folder, so as root
// the command runs without the capabilities that let it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).
TEST_F(CliReliabilityJson, AnUnreadableFolderIsNamedAsOne) {
  std::string prefix;
  if (::geteuid() == 0) {
    if (std::system("setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null") != 0)
      GTEST_SKIP() << "as root, and setpriv cannot drop CAP_DAC_OVERRIDE here";
    prefix = "--bounding-set=-dac_override,-dac_read_search ";
  }
  const std::string m = model_with_config("locked", tiny_config());
  fs::permissions(m, fs::perms::none);
  const std::string args = "inspect " + m;
  const RunResult r = prefix.empty() ? run_agoq(args) : run_agoq_as("setpriv " + prefix, args);
  fs::permissions(m, fs::perms::owner_all);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("model " + m + ": cannot read the folder: Permission denied"), std::string::npos) << r.err;
}

// `--init-from ''` trained a fresh random model; an empty path given to any path flag is refused by name.
TEST_F(CliReliabilityJson, AnEmptyPathIsRefusedByItsFlag) {
  const std::string base = "train --quiet --data " + d("data") +
                           " --dim 16 --layers 1 --heads 2 --ffn 24 --seq 8 "
                           "--batch 2 --steps 1 --out " +
                           d("run");
  for (const char* flag : {"--init-from", "--resume", "--config", "--data", "--out"})
    expect_clean_error(base + " " + flag + " ''", std::string(flag) + ": an empty path names no file or folder");
  EXPECT_FALSE(fs::exists(d("run/ckpt")));
  std::ofstream(d("text.txt")) << "some text";
  expect_clean_error("eval --ckpt '' --text " + d("text.txt"), "--ckpt: an empty path");
  expect_clean_error("sample --ckpt '' --prompt hi", "--ckpt: an empty path");
  expect_clean_error("inspect ''", "an empty path names no file or folder");
  expect_clean_error("prepare --input " + d("text.txt") + " --tokenizer '' --out " + d("prep"),
                     "--tokenizer: an empty path");
  expect_clean_error("plan --model '' --gpus 1", "--model: an empty path");
}

// tokenizer.json's quoted values (model.dropout): the same SIGSEGV at depth, an unbounded line below it.
TEST_F(CliReliabilityJson, DeeplyNestedTokenizerValuesAreRefusedOrExcerpted) {
  std::ofstream(d("text.txt")) << "some text to tokenize";
  fs::create_directories(d("tok"));
  for (const size_t levels : {size_t(100000), size_t(500)}) {
    std::ofstream(d("tok/tokenizer.json")) << R"({"model": {"type": "BPE", "dropout": )" + nested(levels) + "}}";
    expect_short_line(
        "prepare --input " + d("text.txt") + " --tokenizer " + d("tok/tokenizer.json") + " --out " + d("prep"),
        levels > 512 ? "nest deeper than 512 levels" : "model.dropout [[[[", 300);
  }
}

// A checkpoint's trainer.json: its version is quoted when it is not 1.
TEST_F(CliReliabilityJson, DeeplyNestedTrainerJsonIsRefused) {
  ASSERT_EQ(run_agoq(train({{"--steps", "1"}})).exit_code, 0);
  std::string t = file_text(d("run/ckpt/trainer.json"));
  const size_t at = t.find("\"version\"");
  ASSERT_NE(at, std::string::npos);
  t.insert(at, "\"deep\": " + nested(100000) + ", ");
  std::ofstream(d("run/ckpt/trainer.json")) << t;
  std::ofstream(d("text.txt")) << "some text to score";
  expect_short_line("eval --ckpt " + d("run/ckpt") + " --text " + d("text.txt"), "nest deeper than 512 levels");
  expect_short_line(train({{"--resume", d("run/ckpt")}, {"--steps", "2"}}), "nest deeper than 512 levels");
}

}  // namespace
}  // namespace agoq

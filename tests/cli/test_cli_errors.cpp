// Bad input through the real binary: every case must end in exactly one line "agoq: error: ..." that names the
// problem, and exit status 1 (never a crash, a hang or silent garbage).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/token_file.h"
#if AGOQ_HAVE_CUDA
#include "cuda/cuda_check.h"
#endif

#include "tests/cli/cli_test_util.h"

namespace agoq {
namespace {

TEST_F(CliErrors, MissingData) { expect_clean_error(train({{"--data", d("nope")}}), "nope/train.bin"); }

TEST_F(CliErrors, CorruptTokenFile) {
  std::ofstream(d("data/train.bin"), std::ios::trunc) << "this is not a token file at all, just text.....";
  expect_clean_error(train(), "train.bin");
}

TEST_F(CliErrors, TruncatedTokenFile) {
  fs::resize_file(d("data/train.bin"), fs::file_size(d("data/train.bin")) - 10);
  expect_clean_error(train(), "train.bin");
}

TEST_F(CliErrors, VocabMismatchBetweenSplits) {
  std::vector<int32_t> tok(500, 3);
  token_file_write(d("data/val.bin"), tok, 128);
  expect_clean_error(train(), "vocab");
}

TEST_F(CliErrors, HeadsNotDividingDim) {
  expect_clean_error(train({{"--heads", "3"}, {"--kv-heads", "3"}}), "n_heads");
}

TEST_F(CliErrors, SequenceLongerThanData) { expect_clean_error(train({{"--seq", "1000"}}), "1000"); }

TEST_F(CliErrors, BadFlagValues) {
  expect_clean_error(train({{"--lr", "-1"}}), "--lr");
  expect_clean_error(train({{"--batch", "0"}}), "--batch");
  expect_clean_error(train({{"--act-store", "fp8"}}), "fp8");
  expect_clean_error(train({{"--act-policy", "attn=4,mlp=fp7"}}), "mlp=fp7");
  expect_clean_error(train({{"--stepz", "3"}}), "--stepz");
  expect_clean_error(train({{"--optim-state", "int4"}}), "--optim-state must be fp32 or q8");
  expect_clean_error(train({{"--grad-store", "q4"}}), "--grad-store must be fp32 or q8 (got 'q4')");
  expect_clean_error(train({{"--allreduce", "nccl"}}), "--allreduce must be mpi or q8 (got 'nccl')");
  expect_clean_error(train({{"--grad-rounding", "up"}}), "--grad-rounding must be stochastic or nearest (got 'up')");
  expect_clean_error(train({{"--lm-head-grad", "half"}}), "--lm-head-grad must be whole or pieces (got 'half')");
  expect_clean_error(train({{"--optim-state", "q8"}, {"--baseline", " "}}), "--optim-state");
}

// --device cuda takes what the GPU path builds (one GPU, fp32 moments) and says what it does not.
TEST_F(CliErrors, GpuFlagsTheGpuPathDoesNotBuild) {
  expect_clean_error(train({{"--device", "gpu"}}), "--device");
  expect_clean_error(train({{"--device", "cuda"}, {"--pp", "2"}}), "--device cuda: pipeline parallelism (--pp)");
  expect_clean_error(train({{"--device", "cuda"}, {"--tp", "2"}}), "--device cuda: tensor parallelism");
  expect_clean_error(train({{"--device", "cuda"}, {"--optim-state", "q8"}}), "8-bit AdamW moments");
  expect_clean_error(train({{"--device", "cuda"}, {"--compute", "tf32"}}), "--compute must be auto, bf16 or fp32");
#if AGOQ_HAVE_CUDA
  const std::string why = cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a GPU is usable here: --device cuda trains (tests/cuda_train)";
  expect_clean_error(train({{"--device", "cuda"}}), "no usable GPU: " + why);
#else
  expect_clean_error(train({{"--device", "cuda"}}), "built without the CUDA backend");
#endif
}

TEST_F(CliErrors, BadPipelineFlags) {
  expect_clean_error(train({{"--pp", "0"}}), "--pp must be >= 1");
  expect_clean_error(train({{"--pp", "2"}}), "--pp 2 needs a multiple of 2 ranks");
  expect_clean_error(train({{"--stage-layers", "1,x"}}), "'x' is not a positive layer count");
  expect_clean_error(train({{"--stage-layers", "1,"}}), "'1,' ends with a comma");
  expect_clean_error(train({{"--stage-layers", ",1"}}), "'' is not a positive layer count");
  expect_clean_error(train({{"--mem-budget", "lots"}}), "bad memory size 'lots'");
}

TEST_F(CliErrors, BadTensorParallelFlags) {
  expect_clean_error(train({{"--tp", "0"}}), "--tp must be >= 1");
  expect_clean_error(train({{"--tp", "2"}}), "--tp 2 x --pp 1 needs a multiple of 2 ranks");
}

// A model config that is not one: each case named in agoq's words, not the JSON library's.
TEST_F(CliErrors, BadModelConfigFiles) {
  expect_clean_error(train({{"--config", "/dev/null"}}),
                     "model config /dev/null: it is a character device, not a file");
  std::ofstream(d("cut.json")) << "{\"hidden_size\": 3,";
  expect_clean_error(train({{"--config", d("cut.json")}}), "is not valid JSON (it ends before the JSON does)");
  std::ofstream(d("bad.json")) << "{\"hidden_size\": x}";
  expect_clean_error(train({{"--config", d("bad.json")}}), "is not valid JSON (at byte");
  std::ofstream(d("huge.json")) << "{\"hidden_size\": 4e4444}";  // beyond a double (found by fuzz_hf_index)
  expect_clean_error(train({{"--config", d("huge.json")}}), "is not JSON agoq can read");
  std::ofstream(d("list.json")) << "[1, 2]";
  expect_clean_error(train({{"--config", d("list.json")}}), "is not a JSON object");
  expect_clean_error(train({{"--config", d("none.json")}}), "cannot open model config");
}

// A step too large to hold is named with what it asks for, before anything is allocated.
TEST_F(CliErrors, AStepTooLargeForTheMachineIsNamed) {
  expect_clean_error(train({{"--accum", "2000000000"}}),
                     "--batch 2 x --seq 8 x --accum 2000000000 tokens per step need");
}

// Benchmarks refuse counts that would print inf or negative figures, flags they would ignore, and unknown names.
TEST_F(CliErrors, BenchFlagsAreCheckedBeforeRunning) {
  expect_clean_error("bench train --steps 0", "--steps: must be >= 1 (got 0)");
  expect_clean_error("bench train --steps -3", "--steps: must be >= 1 (got -3)");
  expect_clean_error("bench ops --reps 0", "--reps: must be >= 1 (got 0)");
  expect_clean_error("bench optim --reps 0", "--reps: must be >= 1 (got 0)");
  expect_clean_error("bench optim --threads -4", "--threads: must be >= 0 (got -4)");
  expect_clean_error("bench act --steps x", "--steps: must be a whole number (got 'x')");
  expect_clean_error("bench train --policies nosuch", "--policies applies to --device cuda");
  expect_clean_error("bench nosuch", "agoq: error: bench: unknown command 'nosuch' (one of: quant, train, act, ops");
  expect_clean_error(
      "nosuch", "agoq: error: unknown command 'nosuch' (one of: prepare, train, sample, eval, inspect, plan, bench)");
  std::ofstream(d("corpus.txt")) << "plain text, not a tokenizer";  // checked before the benchmark's Python runs
  expect_clean_error("bench tokenize --bpe " + d("corpus.txt"), "corpus.txt: not a valid SentencePiece model (nor a");
}

// The planner bounds every count before it multiplies them; its cost does not grow with the GPU count
// (tests/comm AllreduceQ8Plan.BytesInConstantTimeEqualThePlans).
TEST_F(CliErrors, PlanBoundsItsCountsAndStaysFast) {
  expect_clean_error("plan --model llama-8b --gpus 1073741824", "--gpus: must be from 1 to 16777216 (got 1073741824)");
  expect_clean_error("plan --model llama-8b --micro-batch 2000000000 --num-micro-batches 2000000000",
                     "--micro-batch: must be from 1 to 16777216");
  expect_clean_error("plan --model llama-32b --micro-batch 16777216 --seq 32768", "would exceed 2^62 bytes");
  // 16M GPUs (a plan that listed its ranks took 1.6 s and 1 GB here; constant time now: run_agoq's 60 s bound).
  EXPECT_EQ(run_agoq("plan --model llama-8b --gpus 16777216").exit_code, 0);
}

TEST_F(CliErrors, DivergenceIsReported) {
  expect_clean_error(
      train({{"--lr", "1e30"}, {"--min-lr", "0"}, {"--warmup", "0"}, {"--clip", "1e30"}, {"--steps", "20"}}),
      "diverged");
}

TEST_F(CliErrors, MissingAndCorruptCheckpoint) {
  expect_clean_error("sample --ckpt " + d("no_ckpt"), "no_ckpt");
  expect_clean_error(train({{"--resume", d("no_ckpt")}}), "no_ckpt");
  // A real checkpoint, then damage its weights file.
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  fs::resize_file(d("run/ckpt/model.safetensors"), 100);
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}}), "model.safetensors");
}

TEST_F(CliErrors, MissingOrCorruptTokenizer) {
  expect_clean_error("prepare --input " + d("missing_texts") + " --out " + d("prep"), "missing_texts");
  std::ofstream(d("corpus.txt")) << "Some text.\nMore text here.\n";
  std::ofstream(d("bad.model")) << "garbage";
  expect_clean_error("prepare --input " + d("corpus.txt") + " --tokenizer " + d("bad.model") + " --out " + d("prep"),
                     "bad.model");
  // SentencePiece's own words, without its source location: what is wrong and the way out.
  const std::string small = "prepare --input " + d("corpus.txt") + " --out " + d("prep");
  expect_clean_error(small, "corpus.txt: the text (27 bytes) is too small for a 4096-piece vocabulary");
  EXPECT_EQ(run_agoq(small).err.find(".cc("), std::string::npos);
}

// Every numeric flag is checked for finiteness and range before anything runs, naming the flag; none trains to an
// unusable checkpoint (an infinite rope_theta used to be written as null into config.json).
TEST_F(CliErrors, NumericFlagsAreCheckedBeforeRunning) {
  expect_clean_error(train({{"--rope-theta", "inf"}}), "rope_theta");
  expect_clean_error(train({{"--rope-theta", "1e39"}}), "rope_theta");
  expect_clean_error(train({{"--weight-decay", "-100"}}), "--weight-decay");
  expect_clean_error(train({{"--weight-decay", "nan"}}), "--weight-decay");
  expect_clean_error(train({{"--beta1", "1"}}), "--beta1");
  expect_clean_error(train({{"--beta1", "nan"}}), "--beta1");
  expect_clean_error(train({{"--beta2", "2"}}), "--beta2");
  expect_clean_error(train({{"--adam-eps", "0"}}), "--adam-eps must be a positive number (got 0)");
  expect_clean_error(train({{"--ckpt-every", "-1"}}), "--ckpt-every");
  expect_clean_error(train({{"--stop-after", "-3"}}), "--stop-after");
  expect_clean_error(train({{"--eval-every", "-1"}}), "--eval-every");
  expect_clean_error(train({{"--clip", "nan"}}), "--clip");
  expect_clean_error(train({{"--seed", "-1"}}), "--seed");
  expect_clean_error("sample --ckpt " + d("run/ckpt") + " --top-k -5", "--top-k");
  EXPECT_FALSE(fs::exists(d("run")));  // nothing ran
}

// Sizes are checked before memory is taken: a typo'd layer count names its field, a model this machine cannot hold
// is refused by the memory model in one line (never the OOM killer), for train, sample and plan alike.
TEST_F(CliErrors, OversizeModelsAreRefusedBeforeAllocating) {
  expect_clean_error(train({{"--layers", "100000"}}), "n_layers 100000");
  expect_clean_error(
      train({{"--dim", "65536"}, {"--ffn", "65536"}, {"--heads", "256"}, {"--kv-heads", "256"}, {"--layers", "64"}}),
      "for weights, gradients and AdamW states alone");
  expect_clean_error(train({{"--batch", "4096"},
                            {"--seq", "2048"},
                            {"--dim", "4096"},
                            {"--heads", "32"},
                            {"--kv-heads", "32"},
                            {"--ffn", "64"}}),
                     "lower --batch or --seq");
  // A checkpoint whose config claims 2^24 positions (consistently in config.json and trainer.json), scored in one
  // window of all of them: the forward-only model's residual stream and attention inputs alone, 5 x 1024 floats a
  // token, are 320 GiB.
  ASSERT_EQ(run_agoq(train({{"--steps", "1"}, {"--dim", "1024"}})).exit_code, 0);
  for (const char* file : {"config.json", "trainer.json"}) {
    std::ifstream in(d("run/ckpt/") + file);
    nlohmann::json j = nlohmann::json::parse(in);
    nlohmann::json& config = std::string(file) == "config.json" ? j : j["config"];
    config["max_position_embeddings"] = 1 << 24;
    std::ofstream(d("run/ckpt/") + file) << j.dump();
  }
  std::ofstream(d("text.txt")) << "some text to score";
  expect_clean_error("eval --ckpt " + d("run/ckpt") + " --text " + d("text.txt") + " --seq 16777216",
                     "-token window) needs about");
  std::ofstream(d("huge.json")) << R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1000000000,
      "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64, "rms_norm_eps": 1e-5})";
  expect_clean_error("plan --model " + d("huge.json") + " --gpus 1", "n_layers 1000000000");
}

// The end-of-run table puts this run's measured peaks next to the baselines from the memory model: each baseline
// column must be what that baseline run measures (same shape, same data).
TEST_F(CliErrors, MemoryTableBaselinesAreWhatTheBaselinesMeasure) {
  auto table_total = [](const std::string& err, int column) {  // "  total   <this run> <fp32> <bf16>"
    const size_t at = err.find("\n  total ");
    EXPECT_NE(at, std::string::npos) << err;
    std::istringstream row(err.substr(at + 9, err.find('\n', at + 1) - at - 9));
    std::string v[6];
    for (std::string& x : v) row >> x;
    return v[2 * column] + " " + v[2 * column + 1];  // "156.66 MiB"
  };
  auto run = [&](const std::string& out, const std::string& flags) {
    std::string cmd = train({{"--out", d(out)}, {"--steps", "2"}}) + " " + flags;
    cmd.replace(cmd.find(" --quiet"), 8, "");
    const RunResult r = run_agoq(cmd);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.err;
  };
  const std::string agoq = run("agoq", ""), fp32 = run("fp32", "--baseline"),
                    bf16 = run("bf16", "--act-store bf16 --grad-store fp32 --allreduce mpi"),
                    q8 = run("q8", "--optim-state q8");
  EXPECT_EQ(table_total(agoq, 1), table_total(fp32, 0));
  EXPECT_EQ(table_total(agoq, 2), table_total(bf16, 0));
  EXPECT_EQ(table_total(fp32, 1), table_total(fp32, 0));
  EXPECT_EQ(table_total(q8, 1), table_total(fp32, 0));  // 8-bit states: the baselines keep fp32 AdamW
  // The optimizer row shows the saving: 2 bytes per value plus 8 per 128 against 8 bytes.
  auto optimizer_row = [](const std::string& err) {
    const size_t at = err.find("\n  optimizer ");
    EXPECT_NE(at, std::string::npos) << err;
    std::istringstream row(err.substr(at + 13, err.find('\n', at + 1) - at - 13));
    std::string v[4];
    for (std::string& x : v) row >> x;
    return std::make_pair(std::stod(v[0]) * (v[1] == "KiB"   ? 1
                                             : v[1] == "MiB" ? 1024
                                                             : 1.0 / 1024),
                          std::stod(v[2]) * (v[3] == "KiB"   ? 1
                                             : v[3] == "MiB" ? 1024
                                                             : 1.0 / 1024));
  };
  const auto [mine, baseline] = optimizer_row(q8);
  EXPECT_NEAR(mine / baseline, (2 + 8.0 / 128) / 8, 0.02) << q8;
}

// A fresh run never deletes or appends to an earlier run's checkpoints and metrics: it stops before the first step,
// names what is there and the two ways on; --overwrite is one of them, --resume the other.
TEST_F(CliErrors, FreshRunKeepsAnEarlierRun) {
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}})).exit_code, 0);
  const auto metrics_size = fs::file_size(d("run/metrics.jsonl"));
  expect_clean_error(train({{"--steps", "4"}, {"--ckpt-every", "1"}}), "already holds a run");
  const RunResult again = run_agoq(train({{"--steps", "4"}}));
  for (const char* way : {"--resume", "--overwrite", "ckpt-step2"})
    EXPECT_NE(again.err.find(way), std::string::npos) << way << " in: " << again.err;
  EXPECT_TRUE(fs::exists(d("run/ckpt-step2/model.safetensors")));
  EXPECT_EQ(fs::file_size(d("run/metrics.jsonl")), metrics_size);
  // A run resumed from another folder is a fresh run for this one.
  ASSERT_EQ(run_agoq(train({{"--steps", "2"}, {"--out", d("other")}})).exit_code, 0);
  expect_clean_error(train({{"--steps", "4"}, {"--resume", d("other/ckpt")}}), "already holds a run");
  EXPECT_EQ(run_agoq(train({{"--steps", "4"}, {"--resume", d("run/ckpt")}})).exit_code, 0);
  EXPECT_EQ(run_agoq(train({{"--steps", "3"}, {"--overwrite", " "}})).exit_code, 0);
  EXPECT_TRUE(fs::exists(d("run/ckpt-step3/model.safetensors")));
  // A run that saved no checkpoint (its metrics only) has nothing to resume: only --overwrite is offered.
  fs::create_directories(d("nockpt")), std::ofstream(d("nockpt/metrics.jsonl")) << "{}\n";
  const RunResult none = run_agoq(train({{"--steps", "2"}, {"--out", d("nockpt")}}));
  EXPECT_NE(none.err.find("it saved no checkpoint to continue: replace it with --overwrite"), std::string::npos)
      << none.err;
  EXPECT_EQ(none.err.find("--resume"), std::string::npos) << none.err;
}

TEST_F(CliErrors, CkptThatIsNotTheLinkIsRefusedBeforeTraining) {
  fs::create_directories(d("run/ckpt"));
  expect_clean_error(train({{"--overwrite", " "}}), "ckpt is not the link");
}

// Every metrics record must reach the file: a full disk is an error, not a silent gap.
// The log is written only to a plain file of --out: a link there (to /dev/full, or to a user's file) is refused
// before training, and what it names is left as it was.
TEST_F(CliErrors, MetricsLogThatIsALinkIsRefused) {
  fs::create_directories(d("run"));
  fs::create_symlink("/dev/full", d("run/metrics.jsonl"));
  expect_clean_error(train({{"--overwrite", " "}}), "metrics.jsonl is not a plain file");
  fs::remove(d("run/metrics.jsonl"));
  std::ofstream(d("notes.txt")) << "mine";
  fs::create_symlink(d("notes.txt"), d("run/metrics.jsonl"));
  expect_clean_error(train({{"--overwrite", " "}}), "metrics.jsonl is not a plain file");
  EXPECT_EQ(file_text(d("notes.txt")), "mine");
}

}  // namespace
}  // namespace agoq

// `agoq eval --task` against lm-evaluation-harness (tests/cli/eval_task_reference.py): the same items of every task
// form, on random LLaMA models with a byte-level BPE and with a SentencePiece tokenizer, scored by lm-eval's HF
// backend in fp32 with its own task YAMLs over the test's files, and by agoq with --compute fp32. Every item's
// log-likelihoods within 1e-4 relative, its is_greedy, acc and acc_norm identical, the aggregates equal. Skipped
// (saying why) where the .venv has no lm_eval: scripts/install-deps.sh --test installs it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/cli/cli_test_util.h"
#include "tests/common/python_ref.h"

namespace agoq {
namespace {

using json = nlohmann::json;

const char* const kTasks[] = {"hellaswag", "piqa", "arc_easy", "mmlu", "lambada", "winogrande", "mc", "ppl"};

class EvalTaskRef : public ::testing::Test {
 public:
  // agoq's --json report and its samples by (task, file), one line per item.
  struct Run {
    json report;
    std::map<std::string, std::vector<json>> samples;
  };

 protected:
  // The test's own folder with the data and the model of `kind` (bpe, spm, gguf), and lm-eval's scores of it
  // (with_lm_eval). Each test makes what it needs, so ctest can run them apart and at once.
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agoq_eval_task_" + test_name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void make(const std::string& kind, bool with_lm_eval) {
    const std::string probe = python_ref_exe() + " -c 'import lm_eval' >/dev/null 2>&1";
    if (with_lm_eval && fs::exists(python_ref_exe()) && std::system(probe.c_str()) != 0)
      GTEST_SKIP() << python_ref_exe() << " cannot import lm_eval: run scripts/install-deps.sh --test";
    const std::string d = dir_.string();
    python_ref_run("tests/cli/eval_task_reference.py", "make " + d + " " + kind);
    if (with_lm_eval)
      python_ref_run("tests/cli/eval_task_reference.py",
                     "lm-eval " + d + " " + d + "/" + kind + " " + d + "/ref_" + kind + ".json");
  }
  std::string data(const std::string& name) const { return (dir_ / "data" / name).string(); }

  Run agoq_run(const std::string& model, const std::string& tasks, const std::string& compute = "fp32") {
    const std::string samples = (dir_ / "samples.jsonl").string();
    fs::remove(samples);
    int st = 0;
    Run r;
    const std::string out = agoq_stdout(
        "eval --compute " + compute + " --ckpt " + model + tasks + " --samples-out " + samples + " --json", &st);
    EXPECT_EQ(st, 0) << out;
    if (st != 0) return r;
    r.report = json::parse(out);
    std::istringstream lines(file_text(samples));
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      r.samples[j["task"].get<std::string>() + ":" + j["file"].get<std::string>()].push_back(j);
    }
    return r;
  }
  std::string all_tasks() const {
    std::string s;
    for (const char* t : kTasks) s += std::string(" --task ") + t + ":" + data(std::string(t) + ".jsonl");
    return s + " --task piqa:" + data("valid.jsonl");  // PIQA's original form: the labels in valid-labels.lst
  }

  fs::path dir_;
};

void expect_item_equal(const json& want, const json& got, const std::string& where) {
  const json& lls = want["lls"];
  ASSERT_EQ(got["loglikelihoods"].size(), lls.size()) << where;
  for (size_t j = 0; j < lls.size(); ++j) {
    const double a = got["loglikelihoods"][j], b = lls[j];
    EXPECT_LE(std::abs(a - b), 1e-4 * std::max(1.0, std::abs(b)))
        << where << " choice " << j << ": " << a << " vs " << b;
    if (!want["greedy"].empty()) EXPECT_EQ(got["is_greedy"][j], want["greedy"][j]) << where << " choice " << j;
  }
  for (const char* m : {"acc", "acc_norm"})
    if (want.contains(m) && got.contains(m)) EXPECT_EQ(got[m].get<bool>(), want[m].get<double>() != 0) << where << m;
}

// Each metric lm-eval reports that agoq gives a value for: accuracies exactly, the rest within 1e-4 relative.
void expect_metrics_equal(const json& want, const json& got, const std::string& task) {
  for (auto [name, v] : got.items()) {
    ASSERT_TRUE(want.contains(name)) << task << " " << name;
    if (v.is_null()) continue;  // a perplexity's stderr: lm-eval bootstraps it
    const double a = v, b = want[name];
    EXPECT_LE(std::abs(a - b), 1e-4 * std::max(1.0, std::abs(b))) << task << " " << name << ": " << a << " vs " << b;
  }
}

void expect_equal_to_lm_eval(const fs::path& ref_file, const json& report,
                             const std::map<std::string, std::vector<json>>& samples) {
  const json ref = json::parse(file_text(ref_file.string()));
  ASSERT_EQ(report["tasks"].size(), std::size(kTasks) + 1);
  for (const json& t : report["tasks"]) {
    const std::string name = t["task"], key = name + ":" + t["file"].get<std::string>();
    const json& want = ref[name];
    const std::vector<json>& got = samples.at(key);
    ASSERT_EQ(got.size(), want["samples"].size()) << key;
    for (size_t i = 0; i < got.size(); ++i)
      expect_item_equal(want["samples"][i], got[i], key + " item " + std::to_string(i));
    expect_metrics_equal(want["metrics"], t["metrics"], key);
  }
}

// With bf16 GEMMs (--compute auto, where the CPU has them) the items are not expected to agree to 1e-4: the test
// says how far they are from lm-eval's fp32 numbers, and how many accuracies differ, without a bound.
void bf16_agreement_report(const json& ref, const EvalTaskRef::Run& r) {
  double worst = 0;
  int items = 0, acc_differ = 0;
  for (const auto& [key, got] : r.samples) {
    const json& want = ref[key.substr(0, key.find(':'))]["samples"];
    for (size_t i = 0; i < got.size(); ++i, ++items) {
      for (size_t j = 0; j < got[i]["loglikelihoods"].size(); ++j) {
        const double a = got[i]["loglikelihoods"][j], b = want[i]["lls"][j];
        worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
      }
      if (want[i].contains("acc") && got[i].contains("acc"))
        acc_differ += got[i]["acc"].get<bool>() != (want[i]["acc"].get<double>() != 0);
    }
  }
  std::printf(
      "compute %s: %d items, largest relative log-likelihood difference from lm-eval's fp32 %.3g, %d "
      "accuracies differ\n",
      r.report["compute"].get<std::string>().c_str(), items, worst, acc_differ);
  ::testing::Test::RecordProperty("bf16_max_rel_diff", std::to_string(worst));
  EXPECT_GT(items, 0);
}

TEST_F(EvalTaskRef, ByteLevelBpeModelScoresAsLmEval) {
  make("bpe", true);
  if (IsSkipped()) return;
  const Run r = agoq_run((dir_ / "bpe").string(), all_tasks());
  expect_equal_to_lm_eval(dir_ / "ref_bpe.json", r.report, r.samples);
  EXPECT_GT(r.report["tasks"][0]["truncated"].get<int>(), 0) << "hellaswag's first item is longer than the window";
  bf16_agreement_report(json::parse(file_text((dir_ / "ref_bpe.json").string())),
                        agoq_run((dir_ / "bpe").string(), all_tasks(), "auto"));
}

TEST_F(EvalTaskRef, SentencePieceModelScoresAsLmEval) {
  make("spm", true);
  if (IsSkipped()) return;
  const Run r = agoq_run((dir_ / "spm").string(), all_tasks());
  expect_equal_to_lm_eval(dir_ / "ref_spm.json", r.report, r.samples);
}

// The GGUF file gguf-py writes from an HF model (llama.cpp's names and q/k row order, its gpt2 tokenizer) scores as
// the HF folder does; --limit keeps the first N items.
TEST_F(EvalTaskRef, GgufConversionScoresAsItsHfModel) {
  make("gguf", false);
  if (IsSkipped()) return;
  const std::string tasks = " --limit 6 --task hellaswag:" + data("hellaswag.jsonl") +
                            " --task mc:" + data("mc.jsonl") + " --task ppl:" + data("ppl.jsonl");
  const Run hf = agoq_run((dir_ / "gguf" / "hf").string(), tasks);
  const Run gguf = agoq_run((dir_ / "gguf" / "model-F32.gguf").string(), tasks);
  ASSERT_EQ(hf.samples.size(), 3u);
  for (const auto& [key, items] : hf.samples) {
    const std::vector<json>& other = gguf.samples.at(key);
    ASSERT_EQ(items.size(), key.starts_with("ppl") ? 3u : 6u) << key;
    ASSERT_EQ(other.size(), items.size()) << key;
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t j = 0; j < items[i]["loglikelihoods"].size(); ++j) {
        const double a = other[i]["loglikelihoods"][j], b = items[i]["loglikelihoods"][j];
        EXPECT_LE(std::abs(a - b), 1e-5 * std::max(1.0, std::abs(b))) << key << " item " << i << " choice " << j;
      }
  }
}

// train --eval-task scores the tasks at its steps on the model it trains: its last step's numbers are what
// agoq eval --task gives on the checkpoint of that step.
TEST_F(EvalTaskRef, TrainScoresTasksAsEvalDoesOnItsCheckpoint) {
  make("bpe", false);
  int st = 0;
  const std::string prep = (dir_ / "prep").string(), run = (dir_ / "run").string();
  const std::string prepared = agoq_stdout(
      "prepare --input /usr/share/common-licenses/GPL-3 --tokenizer " + (dir_ / "bpe").string() + " --out " + prep,
      &st);
  ASSERT_EQ(st, 0) << prepared;
  const std::string tasks = " --task mc:" + data("mc.jsonl") + " --task lambada:" + data("lambada.jsonl");
  std::string eval_tasks = tasks;
  for (size_t at; (at = eval_tasks.find(" --task ")) != std::string::npos;) eval_tasks.replace(at, 8, " --eval-task ");
  const std::string trained = agoq_stdout("train --quiet --data " + prep + " --init-from " + (dir_ / "bpe").string() +
                                              " --out " + run + " --steps 4 --batch 2 --seq 64 --eval-batches 1" +
                                              " --compute fp32 --eval-task-every 2 --eval-task-limit 6" + eval_tasks,
                                          &st);
  ASSERT_EQ(st, 0) << trained;
  std::vector<json> scored;
  std::istringstream lines(file_text(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (const json j = json::parse(line); j.contains("eval_tasks")) scored.push_back(j);
  ASSERT_EQ(scored.size(), 2u);
  EXPECT_EQ(scored[0]["step"], 2);
  EXPECT_EQ(scored[1]["step"], 4);
  const json report =
      json::parse(agoq_stdout("eval --compute fp32 --seq 64 --limit 6 --json --ckpt " + run + "/ckpt" + tasks, &st));
  ASSERT_EQ(st, 0);
  for (const json& t : report["tasks"]) {
    const json& during = scored[1]["eval_tasks"][t["task"].get<std::string>()];
    for (const char* m : {"acc", "acc_norm", "perplexity"})
      if (t["metrics"].contains(m)) {
        const double a = during[m], b = t["metrics"][m];
        EXPECT_LE(std::abs(a - b), 1e-6 * std::max(1.0, std::abs(b))) << t["task"] << " " << m;
      }
  }
}

}  // namespace
}  // namespace agoq

namespace agoq {
namespace {

// Bad --task input is one error line naming the file and line, before any model loads.
TEST_F(CliErrors, EvalTaskBadInputIsOneLine) {
  std::ofstream(d("mc.jsonl")) << R"({"context": "q", "choices": ["a", "b"], "label": 0})"
                               << "\n"
                               << R"({"context": "q", "choices": ["a", "b"], "label": 5})"
                               << "\n";
  const std::string eval = "eval --ckpt " + d("no_model") + " --task ";
  expect_clean_error(eval + "mc:" + d("mc.jsonl"), d("mc.jsonl") + ":2: label 5 is out of range for 2 choices");
  expect_clean_error(eval + "bogus:" + d("mc.jsonl"), "unknown task \"bogus\"");
  expect_clean_error(eval + "piqa:" + d("missing.jsonl"), d("missing.jsonl"));
  expect_clean_error(eval + "mc:" + d("mc.jsonl") + " --samples-out " + d("mc.jsonl"), "--samples-out");
  expect_clean_error(eval + "mc:" + d("mc.jsonl") + " --text " + d("mc.jsonl"), "give one or the other");
}

}  // namespace
}  // namespace agoq

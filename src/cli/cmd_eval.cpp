// `agoq eval`: a model's next-token loss and perplexity on a text (any source: an agoq checkpoint, a Hugging Face
// folder, a GGUF file), or its scores on downstream tasks (--task: cli/eval_tasks.h). The text is tokenized as the
// model's tokenizer gives it to the model (its BOS included) and scored in windows of --seq tokens that do not overlap:
// every token after the first is predicted exactly once, from the tokens before it in its window.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/eval_tasks.h"
#include "cli/model_load.h"
#include "cli/path_flag.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/paths.h"
#include "data/corpus.h"

namespace agoq {
namespace {

struct EvalArgs {
  std::string ckpt, text, tokenizer, logits_out;
  ComputeMode compute = ComputeMode::automatic;
  int64_t max_tokens = 0;
  int seq = 0;
  bool json = false;
  EvalTasksArgs tasks;
};

struct EvalResult {
  size_t tokens = 0;  // predictions scored
  double loss = 0;    // mean next-token cross-entropy (nats)
  double seconds = 0;
};

// Scores ids[0..n) in windows: window k predicts ids[kS+1 .. kS+S] from ids[kS .. kS+S-1] (the last one shorter).
// A window's loss that is not finite is an error naming the window (the mean would print nan, or null in JSON).
EvalResult eval_windows(LlamaModel& model, const std::vector<int32_t>& ids, int S) {
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult r;
  double sum = 0;
  for (size_t start = 0, k = 0; start + 1 < ids.size(); start += size_t(S), ++k) {
    const int T = int(std::min<size_t>(size_t(S), ids.size() - 1 - start));
    const float loss = model.forward_loss(ids.data() + start, ids.data() + start + 1, 1, T);
    model_output_check(&loss, 1, "loss is",
                       "at window " + std::to_string(k) + " (tokens " + std::to_string(start) + ".." +
                           std::to_string(start + size_t(T)) + " of the text)");
    sum += double(loss) * T;
    r.tokens += size_t(T);
  }
  r.loss = sum / double(r.tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void cmd_eval_tasks(const EvalArgs& a) {
  AGOQ_CHECK(a.text.empty() && a.logits_out.empty() && a.max_tokens == 0,
             "--task scores tasks; --text, --max-tokens and --logits-out score a text: give one or the other");
  for (const std::string& spec : a.tasks.tasks)
    output_file_check_not_input("--samples-out", a.tasks.samples_out, "--task", spec.substr(spec.find(':') + 1));
  for (const auto& [flag, in] : {std::pair{"--ckpt", a.ckpt}, std::pair{"--tokenizer", a.tokenizer}})
    output_file_check_not_input("--samples-out", a.tasks.samples_out, flag, in);
  const EvalTasksArgs args{a.tasks.tasks, a.tasks.limit, a.tasks.samples_out, a.json};
  const std::vector<Task> tasks = eval_tasks_read(args);
  InferenceModel m = inference_model_load(a.ckpt, a.tokenizer, a.seq, a.compute);
  eval_tasks_run(args, tasks, m, a.ckpt);
}

void cmd_eval_run(const EvalArgs& a) {
  if (!a.tasks.tasks.empty()) return cmd_eval_tasks(a);
  AGOQ_CHECK(!a.text.empty(), "agoq eval needs --text FILE (a text's loss) or --task NAME:FILE (a task's scores)");
  AGOQ_CHECK(a.tasks.limit == 0 && a.tasks.samples_out.empty(), "--limit and --samples-out go with --task");
  for (const auto& [flag, in] :
       {std::pair{"--ckpt", a.ckpt}, std::pair{"--text", a.text}, std::pair{"--tokenizer", a.tokenizer}})
    output_file_check_not_input("--logits-out", a.logits_out, flag, in);
  InferenceModel m = inference_model_load(a.ckpt, a.tokenizer, a.seq, a.compute);
  const Corpus text = corpus_read(a.text);
  std::vector<int32_t> ids = m.tok.encode_for_model(text.text);
  if (a.max_tokens > 0 && ids.size() > size_t(a.max_tokens)) ids.resize(size_t(a.max_tokens));
  AGOQ_CHECK(ids.size() >= 2, "--text ", a.text, ": ", ids.size(), " token(s); scoring needs at least 2");
  const EvalResult r = eval_windows(*m.model, ids, m.window);
  if (!a.logits_out.empty()) {  // the last window's last position, as float32 (for comparisons with other tools)
    const size_t start = (ids.size() - 2) / size_t(m.window) * size_t(m.window);
    std::vector<float> logits(size_t(m.source->config().vocab_size));
    m.model->forward_last_logits(ids.data() + start, int(ids.size() - start), logits.data());
    model_output_check(logits.data(), logits.size(), "--logits-out: the logits are", "at the text's last position");
    atomic_file_write(a.logits_out,
                      std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
  }
  const double ppl = std::exp(r.loss), tps = double(r.tokens) / std::max(r.seconds, 1e-9);
  AGOQ_CHECK(std::isfinite(ppl), "the perplexity exp(loss) overflows float64 (loss ", r.loss,
             " nats per token): the model's weights or activations overflow");
  if (a.json) {
    const nlohmann::json j = {{"model", a.ckpt},
                              {"source", model_source_kind_name(m.source->kind())},
                              {"text", a.text},
                              {"seq", m.window},
                              {"tokens", r.tokens},
                              {"loss", r.loss},
                              {"perplexity", ppl},
                              {"tokens_per_s", tps},
                              {"compute", enum_name(kGemmPrecisionNames, m.compute.gemm)}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model: %s (%s), tokenizer %s, vocab %d\n", a.ckpt.c_str(), model_source_kind_name(m.source->kind()),
              m.tok.kind_name(), m.tok.vocab_size());
  std::printf("compute: %s\n", m.compute.why.c_str());
  std::printf("text: %s: %zu tokens scored in windows of %d\n", a.text.c_str(), r.tokens, m.window);
  std::printf("loss %.6f  perplexity %.4f  (%.0f tokens/s)\n", r.loss, ppl, tps);
}

const CliCommand kEval("", 35, [](CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c = app.add_subcommand("eval", "a model's loss and perplexity on a text, or its scores on tasks");
  c->add_option("--ckpt", a->ckpt, "the model: an agoq checkpoint, a Hugging Face folder or a GGUF file")
      ->required()
      ->check(cli_path());
  c->add_option("--text", a->text, "the text: a .txt file or a folder of them")->check(cli_path());
  c->add_option("--task", a->tasks.tasks,
                "a task scored as lm-evaluation-harness does, NAME:FILE (repeatable): hellaswag, piqa, arc_easy, "
                "arc_challenge, mmlu, lambada, winogrande, mc (context/choices/label lines), ppl (a text)");
  c->add_option("--limit", a->tasks.limit, "score only the first N items of each task (0: all)")
      ->check(cli_at_least(0));
  c->add_option("--samples-out", a->tasks.samples_out,
                "write every item's requests, log-likelihoods and greedy flags here (JSON lines)")
      ->check(cli_path());
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.model, tokenizer.json or a folder (default: the model's own)")
      ->check(cli_path());
  c->add_option("--max-tokens", a->max_tokens, "score only the first N tokens of the text (0: all)")
      ->check(cli_at_least(0));
  c->add_option("--seq", a->seq, "window length, lm-eval's max_length (default: the model's context, at most 2048)")
      ->check(cli_at_least(2));
  c->add_option("--logits-out", a->logits_out, "also write the last position's logits here (float32)")
      ->check(cli_path());
  c->add_flag(
      "--json", a->json,
      "print JSON (--text: tokens, loss, perplexity, tokens_per_s, compute; --task: per task its counts, speed and metrics)");
  cli_add_compute(c, a->compute);
  c->callback([a] { cmd_eval_run(*a); });
});

}  // namespace
}  // namespace agoq

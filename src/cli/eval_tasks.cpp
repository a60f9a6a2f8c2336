#include "cli/eval_tasks.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/enum_names.h"
#include "evaltask/task_metrics.h"
#include "evaltask/task_read.h"
#include "evaltask/task_score.h"

namespace agoq {
namespace {

using json = nlohmann::json;

json metrics_json(const std::vector<TaskMetric>& metrics) {
  json j = json::object();
  for (const TaskMetric& m : metrics) {
    j[m.name] = m.value;
    j[m.name + "_stderr"] = m.stderr_of ? json(*m.stderr_of) : json(nullptr);
  }
  return j;
}

size_t request_count(const Task& t) {
  size_t n = 0;
  for (const TaskItem& it : t.items) n += it.requests.size();
  return n;
}

json task_json(const Task& t, const TaskScores& s, const std::vector<TaskMetric>& metrics) {
  return {{"task", t.name},
          {"file", t.file},
          {"items", t.items.size()},
          {"requests", request_count(t)},
          {"windows", s.windows},
          {"tokens", s.request_tokens},  // as lm-eval counts them: each request run alone
          {"window_tokens", s.window_tokens},
          {"truncated", s.truncated},
          {"seconds", s.seconds},
          {"items_per_s", double(t.items.size()) / std::max(s.seconds, 1e-9)},
          {"tokens_per_s", double(s.request_tokens) / std::max(s.seconds, 1e-9)},
          {"metrics", metrics_json(metrics)}};
}

// One line per item, as lm-eval's --log_samples: its requests, their log-likelihoods and greedy flags.
std::string samples_lines(const Task& t, const TaskScores& s) {
  std::string out;
  for (size_t i = 0; i < t.items.size(); ++i) {
    const TaskItem& it = t.items[i];
    json args = json::array(), ll = json::array(), greedy = json::array(), tokens = json::array(), cut = json::array();
    for (size_t j = 0; j < it.requests.size(); ++j) {
      args.push_back({it.requests[j].context, it.requests[j].continuation});
      ll.push_back(s.items[i][j].loglik), greedy.push_back(s.items[i][j].greedy);
      tokens.push_back(s.items[i][j].tokens), cut.push_back(s.items[i][j].truncated);
    }
    json j = {{"task", t.name},    {"file", t.file},       {"doc_id", i},         {"line", it.line},
              {"arguments", args}, {"loglikelihoods", ll}, {"is_greedy", greedy}, {"continuation_tokens", tokens}};
    if (t.output == TaskOutput::multiple_choice) {
      j["gold"] = it.gold;
      j["acc"] = task_item_pred(s.items[i]) == size_t(it.gold);
      if (t.acc_norm) j["acc_norm"] = task_item_pred_norm(it, s.items[i]) == size_t(it.gold);
    }
    j["truncated"] = cut;  // per request: its context was cut to the window
    out += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  }
  return out;
}

void task_print(const Task& t, const TaskScores& s, const std::vector<TaskMetric>& metrics, int window) {
  std::printf(
      "task %s (%s): %zu items, %zu requests of %zu tokens, run as %zu windows of %zu tokens in all (a shared "
      "context once), %.2f s (%.1f items/s, %.0f request tokens/s)\n",
      t.name.c_str(), t.file.c_str(), t.items.size(), request_count(t), s.request_tokens, s.windows, s.window_tokens,
      s.seconds, double(t.items.size()) / std::max(s.seconds, 1e-9),
      double(s.request_tokens) / std::max(s.seconds, 1e-9));
  if (s.truncated)
    std::printf("  %zu request(s) longer than the window of %d tokens: their contexts were cut from the left\n",
                s.truncated, window);
  for (const TaskMetric& m : metrics) {
    std::printf("  %-16s %.6f", m.name.c_str(), m.value);
    if (m.stderr_of) std::printf("  ± %.6f", *m.stderr_of);
    std::printf("\n");
  }
}

}  // namespace

std::vector<Task> eval_tasks_read(const EvalTasksArgs& a) {
  std::vector<Task> tasks;
  for (const std::string& spec : a.tasks) tasks.push_back(task_read(spec, a.limit));
  return tasks;
}

void eval_tasks_run(const EvalTasksArgs& a, const std::vector<Task>& tasks, InferenceModel& m,
                    const std::string& model_name) {
  json report = {{"model", model_name},
                 {"source", model_source_kind_name(m.source->kind())},
                 {"seq", m.window},
                 {"compute", enum_name(kGemmPrecisionNames, m.compute.gemm)},
                 {"tasks", json::array()}};
  if (!a.json)
    std::printf("model: %s (%s), tokenizer %s; window %d tokens; compute: %s\n", model_name.c_str(),
                model_source_kind_name(m.source->kind()), m.tok.kind_name(), m.window, m.compute.why.c_str());
  std::string samples;
  for (const Task& t : tasks) {
    const TaskScores s = task_score(*m.model, m.tok, t, m.window);
    const std::vector<TaskMetric> metrics = task_metrics(t, s);
    report["tasks"].push_back(task_json(t, s, metrics));
    if (!a.samples_out.empty()) samples += samples_lines(t, s);
    if (!a.json) task_print(t, s, metrics, m.window);
  }
  if (!a.samples_out.empty()) atomic_file_write(a.samples_out, samples);
  if (a.json) std::printf("%s\n", report.dump(2).c_str());
}

}  // namespace agoq

#include "evaltask/task_metrics.h"

#include <cmath>
#include <map>
#include <numbers>

#include "evaltask/task_text.h"

namespace agoq {
namespace {

// lm-eval's mean and mean_stderr: sqrt(sum (x - mean)^2 / (n - 1)) / sqrt(n).
TaskMetric mean_metric(const std::string& name, const std::vector<double>& x) {
  TaskMetric m{name, 0, std::nullopt};
  double sum = 0, sq = 0;
  for (double v : x) sum += v;
  m.value = sum / double(x.size());
  for (double v : x) sq += (v - m.value) * (v - m.value);
  if (x.size() > 1) m.stderr_of = std::sqrt(sq / double(x.size() - 1)) / std::sqrt(double(x.size()));
  return m;
}

// A group of subtasks weighted by their sizes, as lm-eval's mmlu (one task per subject): the value is the mean over
// all items, the stderr lm-eval's pooled_sample_stderr of the subtasks' own: sqrt(sum (n_i - 1) n_i se_i^2 / (N - k)
// / N). None, as lm-eval's "N/A", when a subtask has a single item (it has no stderr).
TaskMetric group_mean_metric(const std::string& name, const std::vector<double>& x, const Task& task) {
  std::map<std::string, std::vector<double>> by_subtask;
  for (size_t i = 0; i < x.size(); ++i) by_subtask[task.items[i].subtask].push_back(x[i]);
  TaskMetric m = mean_metric(name, x);
  if (by_subtask.size() == 1) return m;
  double pooled = 0;
  for (const auto& [subtask, xs] : by_subtask) {
    const std::optional<double> se = mean_metric(name, xs).stderr_of;
    if (!se) return {name, m.value, std::nullopt};
    pooled += double(xs.size() - 1) * double(xs.size()) * *se * *se;
  }
  const double n = double(x.size());
  m.stderr_of = std::sqrt(pooled / (n - double(by_subtask.size())) / n);
  return m;
}

std::vector<TaskMetric> choice_metrics(const Task& task, const TaskScores& s) {
  std::vector<double> acc, acc_norm;
  for (size_t i = 0; i < task.items.size(); ++i) {
    acc.push_back(task_item_pred(s.items[i]) == size_t(task.items[i].gold));
    acc_norm.push_back(task_item_pred_norm(task.items[i], s.items[i]) == size_t(task.items[i].gold));
  }
  std::vector<TaskMetric> out = {group_mean_metric("acc", acc, task)};
  if (task.acc_norm) out.push_back(group_mean_metric("acc_norm", acc_norm, task));
  return out;
}

std::vector<TaskMetric> loglikelihood_metrics(const TaskScores& s) {
  std::vector<double> greedy;
  double ll = 0;
  for (const auto& r : s.items) greedy.push_back(r[0].greedy), ll += r[0].loglik;
  return {{"perplexity", std::exp(-ll / double(s.items.size())), std::nullopt}, mean_metric("acc", greedy)};
}

std::vector<TaskMetric> rolling_metrics(const Task& task, const TaskScores& s) {
  double ll = 0, words = 0, bytes = 0;
  for (size_t i = 0; i < task.items.size(); ++i) {
    ll += s.items[i][0].loglik;
    words += double(py_count_words(task.items[i].target));
    bytes += double(task.items[i].target.size());
  }
  return {{"word_perplexity", std::exp(-ll / words), std::nullopt},
          {"byte_perplexity", std::exp(-ll / bytes), std::nullopt},
          {"bits_per_byte", -ll / bytes / std::numbers::ln2, std::nullopt}};
}

}  // namespace

size_t task_item_pred(const std::vector<RequestResult>& r) {
  size_t best = 0;
  for (size_t j = 1; j < r.size(); ++j)
    if (r[j].loglik > r[best].loglik) best = j;
  return best;
}

size_t task_item_pred_norm(const TaskItem& item, const std::vector<RequestResult>& r) {
  size_t best = 0;
  double best_v = -INFINITY;
  for (size_t j = 0; j < r.size(); ++j) {
    const double v = r[j].loglik / double(py_len(item.choices[j]));
    if (j == 0 || v > best_v) best = j, best_v = v;
  }
  return best;
}

std::vector<TaskMetric> task_metrics(const Task& task, const TaskScores& scores) {
  switch (task.output) {
    case TaskOutput::multiple_choice: return choice_metrics(task, scores);
    case TaskOutput::loglikelihood: return loglikelihood_metrics(scores);
    case TaskOutput::rolling: return rolling_metrics(task, scores);
  }
  return {};
}

}  // namespace agoq

#include "evaltask/task_metrics.h"

#include <cmath>
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

std::vector<TaskMetric> choice_metrics(const Task& task, const TaskScores& s) {
  std::vector<double> acc, acc_norm;
  for (size_t i = 0; i < task.items.size(); ++i) {
    acc.push_back(task_item_pred(s.items[i]) == size_t(task.items[i].gold));
    acc_norm.push_back(task_item_pred_norm(task.items[i], s.items[i]) == size_t(task.items[i].gold));
  }
  std::vector<TaskMetric> out = {mean_metric("acc", acc)};
  if (task.acc_norm) out.push_back(mean_metric("acc_norm", acc_norm));
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

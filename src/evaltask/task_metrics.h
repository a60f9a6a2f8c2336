// lm-eval's metrics of a scored task: for multiple choice acc (the choice of the highest log-likelihood is the
// gold one) and acc_norm (log-likelihood per character of the choice), each with the standard error of the mean
// (the sample standard deviation over sqrt(n)); for loglikelihood (lambada) perplexity exp(-mean) and acc (the
// continuation is the greedy one); for rolling texts word_perplexity, byte_perplexity and bits_per_byte over the
// totals. lm-eval bootstraps the standard errors of perplexities: agoq gives none for them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "evaltask/task.h"
#include "evaltask/task_score.h"

namespace agoq {

struct TaskMetric {
  std::string name;  // lm-eval's: "acc", "acc_norm", "perplexity", "word_perplexity", ...
  double value = 0;
  std::optional<double> stderr_of;  // none for one item, and for the perplexities
};

// The index of the first highest log-likelihood, and of the first highest per character of its choice (np.argmax).
size_t task_item_pred(const std::vector<RequestResult>& r);
size_t task_item_pred_norm(const TaskItem& item, const std::vector<RequestResult>& r);

std::vector<TaskMetric> task_metrics(const Task& task, const TaskScores& scores);

}  // namespace agoq

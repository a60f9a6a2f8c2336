// `agoq eval --task`: downstream tasks scored as lm-evaluation-harness scores them (evaltask/, docs/eval.md),
// reported as text or JSON, with every item's per-choice log-likelihoods in --samples-out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/model_load.h"
#include "evaltask/task.h"

namespace agoq {

struct EvalTasksArgs {
  std::vector<std::string> tasks;  // NAME:FILE, as --task gives them
  int64_t limit = 0;               // the first N items of each (0: all)
  std::string samples_out;         // JSON lines, one per item ("" : none)
  bool json = false;
};

// Every --task read (before the model loads: a bad file fails at once).
std::vector<Task> eval_tasks_read(const EvalTasksArgs& a);
// Scores the tasks in order and prints the report; `model_name` is --ckpt as given.
void eval_tasks_run(const EvalTasksArgs& a, const std::vector<Task>& tasks, InferenceModel& m,
                    const std::string& model_name);

}  // namespace agoq

// `train --eval-task`: downstream tasks scored between steps (evaltask/, docs/eval.md), as llm.c scores HellaSwag
// while it trains. Every rank scores them on its own replica (the replicas are identical), so nothing is sent.
#include <cstdio>

#include "core/error.h"
#include "evaltask/task_metrics.h"
#include "evaltask/task_read.h"
#include "evaltask/task_score.h"
#include "train/session.h"

namespace agoq {

void TrainSession::eval_tasks_prepare() {
  if (opt_.eval_tasks.empty()) return;
  AGOQ_CHECK(!gpu_ && grid_.P == 1 && !grid_.tp,
             "--eval-task scores on the whole model on the CPU: not with --device cuda, --pp or --tp");
  AGOQ_CHECK(data_tokenizer_, "--eval-task: --data ", opt_.data_dir,
             " holds no tokenizer to encode the tasks' text with (prepare it with a tokenizer)");
  for (const std::string& spec : opt_.eval_tasks) eval_tasks_.push_back(task_read(spec, opt_.eval_task_limit));
}

bool TrainSession::eval_tasks_due(long step) const {
  if (eval_tasks_.empty()) return false;
  const long every = opt_.eval_task_every > 0 ? opt_.eval_task_every : opt_.eval_every;
  return (every > 0 && step % every == 0) || step == opt_.steps;
}

nlohmann::json TrainSession::eval_tasks_score(long step) {
  nlohmann::json out = nlohmann::json::object();
  std::string line = "step " + std::to_string(step) + ":";
  for (const Task& t : eval_tasks_) {
    const TaskScores s = task_score(*model_, *data_tokenizer_, t, T_);
    const std::string key = out.contains(t.name) ? t.name + ":" + t.file : t.name;  // the same task twice
    for (const TaskMetric& m : task_metrics(t, s)) {
      out[key][m.name] = m.value;
      char v[64];
      std::snprintf(v, sizeof v, " %s %s %.4f", key.c_str(), m.name.c_str(), m.value);
      line += v;
    }
    out[key]["seconds"] = s.seconds;
  }
  log_->note(line);
  return out;
}

}  // namespace agoq

// Downstream tasks scored the way EleutherAI's lm-evaluation-harness (lm-eval 0.4) scores them: each task's items
// become log-likelihood requests (a context and a continuation), and its metrics come from their results. This
// header is the data; task_read.h makes it from files, task_score.h computes the requests on a model,
// task_metrics.h turns results into lm-eval's metrics (docs/eval.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace agoq {

// lm-eval's output types: multiple_choice (one request per choice; acc, acc_norm), loglikelihood (one request;
// perplexity and greedy accuracy, as lambada), loglikelihood_rolling (a whole text; word and byte perplexity).
enum class TaskOutput : uint8_t { multiple_choice, loglikelihood, rolling };

// log p(continuation | context): with an empty context the continuation follows the tokenizer's BOS (else EOS), as
// lm-eval's prefix token. For rolling, the context is empty and the continuation is the whole text.
struct TaskRequest {
  std::string context, continuation;
};

struct TaskItem {
  size_t line = 0;                    // where it is in its file (1-based), for messages and --samples-out
  std::vector<TaskRequest> requests;  // multiple_choice: one per choice, in the file's order
  std::vector<std::string> choices;   // multiple_choice: what acc_norm divides by (characters of each)
  int gold = 0;                       // multiple_choice: the index of the right choice
  std::string target;                 // rolling: the text its word and byte counts are of
  std::string subtask;                // mmlu: its subject (lm-eval scores each subject as a task of the mmlu group)
};

struct Task {
  std::string name;  // as given to --task: "hellaswag", "mc", "ppl", ...
  std::string file;
  TaskOutput output = TaskOutput::multiple_choice;
  bool acc_norm = true;  // lm-eval's metric list has acc_norm (not mmlu's, winogrande's)
  std::vector<TaskItem> items;
};

}  // namespace agoq

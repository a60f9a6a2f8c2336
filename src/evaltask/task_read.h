// Tasks from files: `--task NAME:FILE`, the JSON-lines forms the Hugging Face datasets of those names write
// (docs/eval.md lists each form and the prompt lm-eval makes of it). Every problem is one agoq::Error naming the
// file and line: a missing or malformed file, an unknown task, a missing field, a label out of range, an empty
// choice; never a silent skip.
#pragma once
#include <cstdint>
#include <string>

#include "evaltask/task.h"

namespace agoq {

// The task names --task takes, for messages: "hellaswag, piqa, ...".
std::string task_names();

// Reads `spec` ("hellaswag:data/hellaswag_val.jsonl", "mc:my.jsonl", "ppl:book.txt"); limit > 0 keeps the first
// `limit` items, as lm-eval's --limit.
Task task_read(const std::string& spec, int64_t limit = 0);

}  // namespace agoq

// The fuzz target of `--task` files (fuzz_target.h, evaltask/task_read.h): the bytes read as every task form, then
// each item's requests encoded as lm-eval's pairs (a ppl text in rolling windows) with a byte-level tokenizer.
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"
#include "evaltask/task_read.h"
#include "evaltask/task_score.h"
#include "tests/common/bpe_byte_chars.h"
#include "tests/fuzz/fuzz_target.h"

namespace agoq::fuzz {
namespace {

// Every byte a token (no merges), then <|endoftext|> as BOS and EOS: the prefix token of an empty context.
const Tokenizer& byte_tokenizer() {
  static const Tokenizer tok = [] {
    BpeSpec s;
    s.vocab = bpe_byte_chars();
    s.added.push_back({int(s.vocab.size()), "<|endoftext|>", true});
    s.vocab.push_back("<|endoftext|>");
    s.bos_id = s.eos_id = 256;
    return Tokenizer::from_bpe(s, "fuzz tokenizer");
  }();
  return tok;
}

}  // namespace

int eval_task(const uint8_t* data, size_t size) {
  const std::string path = file_of(text_of(data, size), "task.jsonl");
  for (const char* name : {"hellaswag", "piqa", "arc_easy", "mmlu", "lambada", "winogrande", "mc", "ppl"}) {
    try {
      const Task t = task_read(std::string(name) + ":" + path, 64);
      for (const TaskItem& it : t.items)
        for (const TaskRequest& q : it.requests) {
          if (t.output == TaskOutput::rolling) (void)task_rolling_windows(byte_tokenizer(), q.continuation, 16);
          else (void)task_encode_pair(byte_tokenizer(), q.context, q.continuation, path);
        }
    } catch (const Error& e) {
      refused(e);
    }
  }
  return 0;
}

}  // namespace agoq::fuzz

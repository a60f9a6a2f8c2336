// Prompt/completion examples for fine-tuning (`agoq prepare --format prompt-completion`, docs/data-format.md): a
// JSON-lines file read into token sequences whose completion tokens alone count in the loss, then packed into
// windows of seq+1 tokens (whole examples, the rest of a window padded) as a version 2 token file holds them.
//
// One JSON object per line (blank lines skipped):
//   {"prompt": "...", "completion": "..."}
//   {"messages": [{"role": "system"|"user"|"assistant"|…, "content": "..."}, …]}   rendered as ChatML,
//     <|im_start|>{role}\n{content}<|im_end|>\n per message, when the tokenizer has those two tokens; the loss
//     counts each assistant message's content and its <|im_end|>.
// An example is [BOS when the tokenizer adds one] prompt completion EOS; the completion's tokens and the EOS
// count in the loss (the model learns to stop).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace agoq {

// What to do with an example longer than a window (seq + 1 tokens).
enum class OverlongExamples { refuse, truncate };

struct Example {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;  // per token: 1 when predicting it counts in the loss
  size_t line = 0;            // in the file, from 1
  bool truncated = false;
};

struct ExamplesRead {
  std::vector<Example> examples;
  bool chatml = false;  // some lines were `messages`
  size_t truncated = 0;
};

// Reads and tokenizes every line of `path`. Errors are one line naming the file and line: not JSON, neither form,
// a field of the wrong type, an empty completion (or no assistant message), `messages` with a tokenizer without
// ChatML tokens, an example longer than seq + 1 tokens (with `refuse`), or a prompt that leaves no room for its
// completion (with `truncate`, which cuts the completion).
ExamplesRead examples_read_jsonl(const std::string& path, const Tokenizer& tok, int seq, OverlongExamples overlong);

// Examples packed in order into windows of `window` tokens, a window closed (padded with `pad_id`) when the next
// example does not fit; flags as token_file.h defines them (a document start at each example and padding run).
struct PackedExamples {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> flags;
  size_t windows = 0, loss_tokens = 0, pad_tokens = 0;
};
PackedExamples examples_pack(std::span<const Example> examples, int window, int32_t pad_id);

}  // namespace agoq

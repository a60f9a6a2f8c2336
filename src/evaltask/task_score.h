// A task's requests on a model, as lm-eval's Hugging Face backend computes them: each request is tokenized (context
// and continuation together, split at the context's token count), cut from the left to the window, and its
// continuation's log-probabilities summed. Requests are packed into windows with document masks (no attention
// crosses two requests), and only their continuations' rows go through the vocabulary head. Where the model
// shares_contexts(), the choices of an item that share their context run it once (model/attention.h's gaps).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/tokenizer.h"
#include "evaltask/task.h"
#include "model/llama.h"

namespace agoq {

struct RequestResult {
  double loglik = 0;       // the sum of the continuation's token log-probabilities
  bool greedy = true;      // every continuation token is the argmax (lm-eval's is_greedy)
  size_t tokens = 0;       // continuation tokens scored
  bool truncated = false;  // the context was cut from the left to fit the window
};

struct TaskScores {
  std::vector<std::vector<RequestResult>> items;  // per item, per request (TaskItem::requests)
  size_t windows = 0;                             // forward passes
  size_t window_tokens = 0;                       // tokens run through the model
  size_t request_tokens = 0;  // the requests' tokens, each run alone (lm-eval's count; shared contexts count each time)
  size_t truncated = 0;       // requests whose context was cut (not counting a rolling text's windows)
  double seconds = 0;
};

// A request's tokens: `context` then `continuation`, the last continuation.size() of them scored.
struct TokenRequest {
  std::vector<int32_t> context, continuation;
};

// lm-eval's _encode_pair: the context's trailing whitespace moved onto the continuation, the two encoded together
// and split at the context's own token count; an empty context is the prefix token (BOS, else EOS). `at` names
// the item in errors (an empty continuation, a context of whitespace only).
TokenRequest task_encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation,
                              const std::string& at);
// lm-eval's loglikelihood_rolling: the text's tokens after the prefix token, in disjoint windows of up to `window`
// predictions, each seeing up to `window` tokens before it.
std::vector<TokenRequest> task_rolling_windows(const Tokenizer& tok, const std::string& text, int window);

// Scores every request of `task` on `model` (whole, host backend), in windows of `window` tokens (the model's
// max_seq; lm-eval's max_length).
TaskScores task_score(LlamaModel& model, const Tokenizer& tok, const Task& task, int window);

}  // namespace agoq

#include "evaltask/task_score.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "evaltask/task_text.h"

namespace agoq {
namespace {

int32_t prefix_token(const Tokenizer& tok) {
  const int32_t id = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
  AGOQ_CHECK(id >= 0, "the tokenizer has neither a BOS nor an EOS token to put before a text with no context");
  return id;
}

// One request as the model runs it: (context + continuation)[-(W + 1):][:-1], its last targets.size() positions
// predicting the continuation; its result is items[item][request].
struct Branch {
  std::vector<int32_t> input, targets;
  size_t request = 0;
};
// One document of a window: a request, or the requests of an item that share their context. Those run the
// context but its last token once (prefix), then each request's rows from that token on, each skipping the others'
// (model/attention.h's gaps): every row sees what it sees when its request runs alone, at the same position.
struct Seq {
  std::vector<int32_t> prefix;
  std::vector<Branch> branches;
  size_t item = 0;
  size_t rows() const {
    size_t n = prefix.size();
    for (const Branch& b : branches) n += b.input.size();
    return n;
  }
};

Seq seq_make(const TokenRequest& r, int W, size_t item, size_t request, const std::string& at, bool* truncated) {
  AGOQ_CHECK(r.continuation.size() <= size_t(W), at, "the continuation has ", r.continuation.size(),
             " tokens, more than the window of ", W);
  std::vector<int32_t> full = r.context;
  full.insert(full.end(), r.continuation.begin(), r.continuation.end());
  const size_t begin = full.size() > size_t(W) + 1 ? full.size() - size_t(W) - 1 : 0;
  *truncated = begin > 0;
  Seq s;
  s.branches.push_back({{full.begin() + ptrdiff_t(begin), full.end() - 1}, r.continuation, request});
  s.item = item;
  return s;
}

// The requests of one item as one document, if they share a context of two tokens or more and fit the window
// together (no context cut); else none.
std::optional<Seq> seq_shared(const std::vector<TokenRequest>& parts, int W, size_t item) {
  if (parts.size() < 2 || parts[0].context.size() < 2) return std::nullopt;
  const std::vector<int32_t>& ctx = parts[0].context;
  size_t rows = ctx.size() - 1;
  for (const TokenRequest& p : parts) {
    if (p.context != ctx) return std::nullopt;
    rows += p.continuation.size();
  }
  if (rows > size_t(W)) return std::nullopt;
  Seq s;
  s.prefix.assign(ctx.begin(), ctx.end() - 1);
  s.item = item;
  for (size_t j = 0; j < parts.size(); ++j) {
    Branch b{{ctx.back()}, parts[j].continuation, j};
    b.input.insert(b.input.end(), parts[j].continuation.begin(), parts[j].continuation.end() - 1);
    s.branches.push_back(std::move(b));
  }
  return s;
}

// One forward pass over the sequences packed into one window, each its own document.
void window_run(LlamaModel& model, const std::vector<const Seq*>& seqs, TaskScores& out) {
  std::vector<int32_t> in, tgt, doc, gaps;
  bool shared = false;
  for (const Seq* s : seqs) {
    const int32_t start = int32_t(in.size()), prefix_end = start + int32_t(s->prefix.size());
    in.insert(in.end(), s->prefix.begin(), s->prefix.end());
    tgt.insert(tgt.end(), s->prefix.size(), -1);
    for (size_t r = 0; r < s->prefix.size(); ++r) gaps.insert(gaps.end(), {start, start});
    for (const Branch& b : s->branches) {
      const int32_t branch_start = int32_t(in.size());
      in.insert(in.end(), b.input.begin(), b.input.end());
      tgt.insert(tgt.end(), b.input.size() - b.targets.size(), -1);
      tgt.insert(tgt.end(), b.targets.begin(), b.targets.end());
      for (size_t r = 0; r < b.input.size(); ++r) gaps.insert(gaps.end(), {prefix_end, branch_start});
    }
    doc.insert(doc.end(), in.size() - size_t(start), start);
    shared = shared || !s->prefix.empty();
  }
  const int T = int(in.size());
  std::vector<float> logprob(in.size());
  std::vector<uint8_t> greedy(in.size());
  MicroBatchRun run;
  run.doc_start = doc.data();
  run.gaps = shared ? gaps.data() : nullptr;
  model.forward_target_logprobs(in.data(), tgt.data(), 1, T, run, logprob.data(), greedy.data());
  size_t end = 0;
  for (const Seq* s : seqs) {
    end += s->prefix.size();
    for (const Branch& b : s->branches) {
      end += b.input.size();
      RequestResult& r = out.items[s->item][b.request];
      for (size_t i = end - b.targets.size(); i < end; ++i) r.loglik += logprob[i], r.greedy = r.greedy && greedy[i];
      AGOQ_CHECK(std::isfinite(r.loglik), "a log-likelihood is not finite (item ", s->item,
                 "): the model's weights or activations overflow float32");
    }
  }
  out.windows += 1, out.window_tokens += in.size();
}

// Every request of the task as sequences, with their results' token counts and truncation marked; an item's
// requests that share their context are one sequence where the model can (share).
std::vector<Seq> task_seqs(const Tokenizer& tok, const Task& task, int W, bool share, TaskScores& out) {
  std::vector<Seq> seqs;
  for (size_t i = 0; i < task.items.size(); ++i) {
    const TaskItem& it = task.items[i];
    const std::string at = task.file + ":" + std::to_string(it.line) + ": ";
    out.items[i].resize(it.requests.size());
    std::vector<TokenRequest> parts;
    std::vector<size_t> request_of;  // parts[k] is of request request_of[k]
    for (size_t j = 0; j < it.requests.size(); ++j) {
      const TaskRequest& q = it.requests[j];
      const size_t before = parts.size();
      if (task.output == TaskOutput::rolling) {
        const std::vector<TokenRequest> w = task_rolling_windows(tok, q.continuation, W);
        parts.insert(parts.end(), w.begin(), w.end());
      } else {
        parts.push_back(task_encode_pair(tok, q.context, q.continuation, at));
      }
      request_of.resize(parts.size(), j);
      for (size_t k = before; k < parts.size(); ++k) out.items[i][j].tokens += parts[k].continuation.size();
    }
    std::optional<Seq> one =
        share && task.output == TaskOutput::multiple_choice ? seq_shared(parts, W, i) : std::nullopt;
    for (size_t k = 0; k < parts.size(); ++k) {
      bool cut = false;
      Seq s = seq_make(parts[k], W, i, request_of[k], at, &cut);
      out.request_tokens += s.rows();
      if (!one) seqs.push_back(std::move(s));
      RequestResult& r = out.items[i][request_of[k]];
      r.truncated = cut && task.output != TaskOutput::rolling;
      out.truncated += r.truncated;
    }
    if (one) seqs.push_back(std::move(*one));
  }
  return seqs;
}
}  // namespace

TokenRequest task_encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation,
                              const std::string& at) {
  TokenRequest r;
  if (context.empty()) {
    r.context = {prefix_token(tok)};
    r.continuation = tok.encode(continuation);
  } else {
    const std::string ctx = py_rstrip(context);
    const std::string cont = context.substr(ctx.size()) + continuation;
    r.context = tok.encode(ctx);
    const std::vector<int32_t> whole = tok.encode(ctx + cont);
    AGOQ_CHECK(!r.context.empty(), at, "the context is whitespace only: it has no tokens to condition on");
    r.continuation.assign(whole.begin() + ptrdiff_t(std::min(r.context.size(), whole.size())), whole.end());
  }
  AGOQ_CHECK(!r.continuation.empty(), at, "the continuation \"", continuation.substr(0, 40),
             "\" has no tokens of its own after the context's");
  return r;
}

std::vector<TokenRequest> task_rolling_windows(const Tokenizer& tok, const std::string& text, int window) {
  std::vector<int32_t> s = {prefix_token(tok)};  // s[1 + p] is the text's token p
  const std::vector<int32_t> ids = tok.encode(text);
  s.insert(s.end(), ids.begin(), ids.end());
  const size_t n = ids.size(), W = size_t(window);
  std::vector<TokenRequest> out;
  for (size_t p = 0; p < n;) {
    const size_t k = std::min(n - p, W), start = p + k > W ? p + k - W : 0;
    out.push_back({{s.begin() + ptrdiff_t(start), s.begin() + ptrdiff_t(1 + p)},
                   {s.begin() + ptrdiff_t(1 + p), s.begin() + ptrdiff_t(1 + p + k)}});
    p += k;
  }
  return out;
}

TaskScores task_score(LlamaModel& model, const Tokenizer& tok, const Task& task, int window) {
  const auto t0 = std::chrono::steady_clock::now();
  TaskScores out;
  out.items.resize(task.items.size());
  const std::vector<Seq> seqs = task_seqs(tok, task, window, model.shares_contexts(), out);
  // Longest first, each into the current window while it fits: windows fill with few tokens left over.
  std::vector<size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return seqs[a].rows() > seqs[b].rows(); });
  std::vector<const Seq*> pack;
  size_t used = 0;
  for (size_t k : order) {
    if (used + seqs[k].rows() > size_t(window)) window_run(model, pack, out), pack.clear(), used = 0;
    pack.push_back(&seqs[k]), used += seqs[k].rows();
  }
  if (!pack.empty()) window_run(model, pack, out);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace agoq

#include "data/examples.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_read.h"
#include "data/token_file.h"
#include "data/utf8.h"

namespace agoq {
namespace {

using nlohmann::json;

// One line's example as it is built: tokens with their loss flags, segment by segment.
struct ExampleBuilder {
  const Tokenizer& tok;
  Example ex;
  void add(std::string_view text, bool loss) {
    for (int32_t id : tok.encode(text)) ex.tokens.push_back(id), ex.loss.push_back(loss);
  }
  void add_id(int32_t id, bool loss) { ex.tokens.push_back(id), ex.loss.push_back(loss); }
};

// "FILE:LINE: " for messages.
std::string where(const std::string& path, size_t line) { return path + ":" + std::to_string(line) + ": "; }

const std::string& string_field(const json& obj, const char* key, const std::string& at) {
  const auto it = obj.find(key);
  AGOQ_CHECK(it != obj.end() && it->is_string(), at, "\"", key, "\" must be a string");
  return it->get_ref<const std::string&>();
}

void add_prompt_completion(ExampleBuilder& b, const json& obj, const std::string& at) {
  const std::string& prompt = string_field(obj, "prompt", at);
  const std::string& completion = string_field(obj, "completion", at);
  AGOQ_CHECK(!completion.empty(), at, "the completion is empty: there is nothing to train on");
  b.add(prompt, false);
  b.add(completion, true);
  b.add_id(b.tok.eos_id(), true);
}

// ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message; an assistant's content and <|im_end|> count.
void add_messages(ExampleBuilder& b, const json& messages, const std::string& at) {
  const int start = b.tok.piece_id("<|im_start|>"), end = b.tok.piece_id("<|im_end|>");
  AGOQ_CHECK(start >= 0 && end >= 0, at,
             "\"messages\" are rendered with ChatML's <|im_start|> and <|im_end|>, and "
             "this tokenizer has no such tokens (write \"prompt\" and \"completion\" instead)");
  AGOQ_CHECK(messages.is_array() && !messages.empty(), at, "\"messages\" must be a non-empty array");
  bool assistant = false;
  for (const json& m : messages) {
    AGOQ_CHECK(m.is_object(), at, "each message must be an object with \"role\" and \"content\"");
    const std::string& role = string_field(m, "role", at);
    const std::string& content = string_field(m, "content", at);
    const bool trained = role == "assistant";
    AGOQ_CHECK(!trained || !content.empty(), at, "an assistant message is empty: there is nothing to train on");
    assistant |= trained;
    b.add_id(start, false);
    b.add(role + "\n", false);
    b.add(content, trained);
    b.add_id(end, trained);
    b.add("\n", false);
  }
  AGOQ_CHECK(assistant, at, "no assistant message: there is nothing to train on");
  b.add_id(b.tok.eos_id(), false);  // the separator; <|im_end|> is what the model learns to stop with
}

// Longer than a window: refused, or its end cut (never its prompt: the cut must leave a completion token).
void fit_window(Example& ex, int seq, OverlongExamples overlong, const std::string& at) {
  const size_t window = size_t(seq) + 1;
  if (ex.tokens.size() <= window) return;
  AGOQ_CHECK(overlong == OverlongExamples::truncate, at, "the example does not fit a window of --seq + 1 = ", window,
             " tokens (it has ", ex.tokens.size(), "; --overlong truncate cuts such examples)");
  ex.tokens.resize(window), ex.loss.resize(window);
  bool any = false;
  for (size_t i = 1; i < window; ++i) any |= ex.loss[i] != 0;
  AGOQ_CHECK(any, at, "the prompt alone fills a window of --seq + 1 = ", window,
             " tokens, so truncating leaves nothing to train on");
  ex.truncated = true;
}

}  // namespace

ExamplesRead examples_read_jsonl(const std::string& path, const Tokenizer& tok, int seq, OverlongExamples overlong) {
  std::ifstream f(path, std::ios::binary);
  AGOQ_CHECK(f, "--input ", path, ": cannot open");
  AGOQ_CHECK(tok.eos_id() >= 0, "tokenizer ", tok.origin(), " has no EOS token to end examples with");
  ExamplesRead out;
  std::string line;
  for (size_t n = 1; std::getline(f, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string at = where(path, n);
    // JSON text is UTF-8 (RFC 8259): said as such, not as nlohmann's "ill-formed UTF-8" parse error.
    AGOQ_CHECK(utf8_valid(line), at, "not valid UTF-8 (byte ", utf8_invalid_at(line) + 1, " of the line)");
    const json obj = json_parse(line, at + "not a JSON object (one example per line): the line");
    AGOQ_CHECK(obj.is_object(), at, "not a JSON object (one example per line)");
    ExampleBuilder b{tok, {}};
    b.ex.line = n;
    if (tok.add_bos() && tok.bos_id() >= 0) b.add_id(tok.bos_id(), false);
    if (obj.contains("messages")) {
      add_messages(b, obj["messages"], at);
      out.chatml = true;
    } else {
      AGOQ_CHECK(obj.contains("prompt") && obj.contains("completion"), at,
                 "needs \"prompt\" and \"completion\", or \"messages\"");
      add_prompt_completion(b, obj, at);
    }
    fit_window(b.ex, seq, overlong, at);
    out.truncated += b.ex.truncated;
    out.examples.push_back(std::move(b.ex));
  }
  AGOQ_CHECK(f.eof(), "--input ", path, ": read failed");
  AGOQ_CHECK(!out.examples.empty(), "--input ", path, ": no examples (one JSON object per line)");
  return out;
}

PackedExamples examples_pack(std::span<const Example> examples, int window, int32_t pad_id) {
  PackedExamples p;
  const size_t W = size_t(window);
  auto close_window = [&] {
    const size_t used = p.tokens.size() % W;
    if (used == 0) return;
    for (size_t i = used; i < W; ++i) {
      p.tokens.push_back(pad_id);
      p.flags.push_back(i == used ? kTokenFlagDocStart : 0);
    }
    p.pad_tokens += W - used;
  };
  for (const Example& ex : examples) {
    AGOQ_CHECK(!ex.tokens.empty() && ex.tokens.size() <= W, "example of line ", ex.line,
               " does not fit a window (internal)");
    if (p.tokens.size() % W + ex.tokens.size() > W) close_window();
    for (size_t i = 0; i < ex.tokens.size(); ++i) {
      p.tokens.push_back(ex.tokens[i]);
      p.flags.push_back(uint8_t((i == 0 ? kTokenFlagDocStart : 0) | (ex.loss[i] ? kTokenFlagLoss : 0)));
      p.loss_tokens += ex.loss[i] && i > 0;
    }
  }
  close_window();
  p.windows = p.tokens.size() / W;
  return p;
}

}  // namespace agoq

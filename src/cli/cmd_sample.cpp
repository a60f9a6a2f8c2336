// `agoq sample`: generate text from a model (an agoq checkpoint, a Hugging Face folder or a GGUF file) with its
// tokenizer (temperature, top-k, seed).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "cli/commands.h"
#include "cli/model_load.h"
#include "cli/path_flag.h"
#include "core/error.h"
#include "core/rng.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct SampleArgs {
  std::string ckpt, tokenizer, prompt = "\n";
  int tokens = 200, top_k = 40;
  float temperature = 0.8f;
  uint64_t seed = 1;
  bool json = false;
  ComputeMode compute = ComputeMode::automatic;
};

// Draws a token from softmax(logits / temperature) restricted to the top_k largest logits.
int sample_token(std::vector<float>& logits, float temperature, int top_k, Rng& rng) {
  const int V = int(logits.size());
  if (temperature <= 0) return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const float top = logits[idx[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp(double(logits[idx[i]] - top) / temperature);
  double u = rng.uniform() * sum;
  for (int i = 0; i < k; ++i)
    if ((u -= p[i]) <= 0) return idx[i];
  return idx[k - 1];
}

void cmd_sample_run(const SampleArgs& a) {
  AGOQ_CHECK(a.tokens >= 1, "--tokens must be >= 1");
  AGOQ_CHECK(std::isfinite(a.temperature) && a.temperature >= 0, "--temperature must be >= 0");
  InferenceModel m = inference_model_load(a.ckpt, a.tokenizer, 0, a.compute);
  const Tokenizer& tok = m.tok;
  LlamaModel& model = *m.model;
  const int window = m.window;
  const LlamaConfig& cfg = m.source->config();
  // The prompt as the model's tokenizer gives it to the model (with its BOS, when it adds one).
  std::vector<int32_t> ids = tok.encode_for_model(a.prompt);
  if (ids.empty()) ids.push_back(tok.bos_id() >= 0 ? tok.bos_id() : 0);
  const std::vector<int32_t> prompt_ids = ids;
  if (!a.json) std::printf("%s", a.prompt.c_str());
  Rng rng(a.seed);
  std::vector<float> logits(cfg.vocab_size);
  const size_t ids_known = size_t(tok.vocab_size());  // (rows past the tokenizer's ids are padding: never drawn)
  std::vector<int32_t> generated;
  size_t printed = 0;
  for (int i = 0; i < a.tokens; ++i) {
    // Recompute over the last `window` tokens (no KV cache: simple, and fast enough for small models).
    const int T = std::min<int>(int(ids.size()), window);
    logits.resize(size_t(cfg.vocab_size));
    model.forward_last_logits(ids.data() + ids.size() - T, T, logits.data());
    logits.resize(ids_known);
    model_output_check(logits.data(), logits.size(), "logits are", "at generated token " + std::to_string(i));
    const int next = sample_token(logits, a.temperature, a.top_k, rng);
    ids.push_back(next);
    generated.push_back(next);
    // Byte-fallback tokens may hold part of a UTF-8 character: print once the text decodes cleanly.
    if (a.json) continue;
    const std::string text = tok.decode(generated);
    if (text.size() >= printed && !text.ends_with("\xEF\xBF\xBD")) {
      std::printf("%s", text.c_str() + printed);
      std::fflush(stdout);
      printed = text.size();
    }
  }
  if (a.json) {
    const nlohmann::json j = {{"prompt_ids", prompt_ids}, {"ids", generated}, {"text", tok.decode(generated)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("\n");
}

const CliCommand kSample("", 30, [](CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* c = app.add_subcommand("sample", "generate text from a model");
  c->add_option("--ckpt", a->ckpt,
                "the model: an agoq checkpoint (runs/demo/ckpt), a Hugging Face folder or a GGUF file")
      ->required()
      ->check(cli_path());
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.model, tokenizer.json or a folder (default: the model's own)")
      ->check(cli_path());
  c->add_option("--prompt", a->prompt, "text to continue")->capture_default_str();
  c->add_option("--tokens", a->tokens, "tokens to generate")->capture_default_str();
  c->add_option("--temperature", a->temperature, "softmax temperature (0: greedy)")->capture_default_str();
  c->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0: all)")
      ->check(cli_in_range(0, INT_MAX))
      ->capture_default_str();
  c->add_option("--seed", a->seed, "sampling seed (the same seed, the same text)")
      ->check(cli_unsigned())
      ->capture_default_str();
  c->add_flag("--json", a->json, "print the prompt's and the generated token ids and the text as JSON");
  cli_add_compute(c, a->compute);
  c->callback([a] { cmd_sample_run(*a); });
});

}  // namespace
}  // namespace agoq

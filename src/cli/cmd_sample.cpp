// `agoq sample`: generate text from a checkpoint (temperature, top-k, seed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/llama.h"
#include "plan/memory_model.h"
#include "formats/checkpoint.h"
#include "data/tokenizer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct SampleArgs {
  std::string ckpt, tokenizer, prompt = "\n";
  int tokens = 200, top_k = 40;
  float temperature = 0.8f;
  uint64_t seed = 1;
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

// The model for one sequence of `window` tokens (weights, their gradient buffer, activations, workspace; no
// optimizer), from the memory model, against this machine: one line instead of the OOM killer.
void memory_check(const LlamaConfig& cfg, const ActPolicy& policy, int window) {
  PlanCpuOptions o;
  o.batch = 1, o.seq = window;
  const PlanMemory need = plan_memory_cpu_trainer(cfg, policy, o);
  const size_t bytes = need.total() - need[MemCategory::optimizer], have = memory_physical_bytes();
  AGOQ_CHECK(have == 0 || bytes <= have, "sampling this checkpoint (", cfg.param_count(), " parameters, a ", window,
             "-token window) needs about ", format_bytes(bytes), "; this machine has ", format_bytes(have));
}

void cmd_sample_run(const SampleArgs& a) {
  AGOQ_CHECK(a.tokens >= 1, "--tokens must be >= 1");
  AGOQ_CHECK(std::isfinite(a.temperature) && a.temperature >= 0, "--temperature must be >= 0");
  const std::string tok_path = a.tokenizer.empty() ? (fs::path(a.ckpt) / "tokenizer.model").string() : a.tokenizer;
  const LlamaConfig cfg = checkpoint_inspect(a.ckpt).config;
  const int window = cfg.max_seq_len;
  const ActPolicy policy = ActPolicy::parse("fp32", cfg.n_layers);
  memory_check(cfg, policy, window);
  const Tokenizer tok = Tokenizer::load(tok_path);
  AGOQ_CHECK(tok.vocab_size() == cfg.vocab_size, "tokenizer ", tok_path, " has ", tok.vocab_size(),
             " tokens but the model's vocabulary is ", cfg.vocab_size);
  LlamaModel model(cfg, 1, window, policy);
  NamedTensors weights;
  for (const ParamTensor& t : model.params().named()) weights.push_back({t.name, t.shape, t.data});
  checkpoint_load(a.ckpt, cfg, weights, {});

  std::vector<int32_t> ids = tok.encode(a.prompt);
  if (ids.empty()) ids.push_back(0);
  std::printf("%s", a.prompt.c_str());
  Rng rng(a.seed);
  std::vector<float> logits(cfg.vocab_size);
  std::vector<int32_t> generated;
  size_t printed = 0;
  for (int i = 0; i < a.tokens; ++i) {
    // Recompute over the last `window` tokens (no KV cache: simple, and fast enough for small models).
    const int T = std::min<int>(int(ids.size()), window);
    model.forward_last_logits(ids.data() + ids.size() - T, T, logits.data());
    const int next = sample_token(logits, a.temperature, a.top_k, rng);
    ids.push_back(next);
    generated.push_back(next);
    // Byte-fallback tokens may hold part of a UTF-8 character: print once the text decodes cleanly.
    const std::string text = tok.decode(generated);
    if (text.size() >= printed && !text.ends_with("\xEF\xBF\xBD")) {
      std::printf("%s", text.c_str() + printed);
      std::fflush(stdout);
      printed = text.size();
    }
  }
  std::printf("\n");
}

const CliCommand kSample("", 30, [](CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* c = app.add_subcommand("sample", "generate text from a checkpoint");
  c->add_option("--ckpt", a->ckpt, "checkpoint directory (e.g. runs/demo/ckpt)")->required();
  c->add_option("--tokenizer", a->tokenizer, "tokenizer .model (default: the one in the checkpoint)");
  c->add_option("--prompt", a->prompt, "text to continue")->capture_default_str();
  c->add_option("--tokens", a->tokens, "tokens to generate")->capture_default_str();
  c->add_option("--temperature", a->temperature, "softmax temperature (0: greedy)")->capture_default_str();
  c->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--seed", a->seed)->check(CLI::NonNegativeNumber)->capture_default_str();
  c->callback([a] { cmd_sample_run(*a); });
});

}  // namespace
}  // namespace agoq

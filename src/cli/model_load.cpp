#include "cli/model_load.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory.h"
#include "plan/memory_model.h"

namespace agoq {
namespace {

// The forward-only model for one sequence of `window` tokens (weights, the forward's workspace; no gradients, no
// saved activations but the norms' and attention's statistics, no optimizer), from the memory model, against this
// machine: one line instead of the OOM killer.
void memory_check(const LlamaConfig& cfg, const ActPolicy& policy, int window) {
  PlanCpuOptions o;
  o.batch = 1, o.seq = window;
  const PlanMemory need = plan_memory_cpu_trainer(cfg, policy, o);
  const size_t bytes = need.total(), have = memory_physical_bytes();
  AGOQ_CHECK(have == 0 || bytes <= have, "running this model (", cfg.param_count(), " parameters, a ", window,
             "-token window) needs about ", format_bytes(bytes), "; this machine has ", format_bytes(have));
}

}  // namespace

int inference_window_default(const LlamaConfig& cfg) { return std::min(cfg.max_seq_len, 2048); }

void model_output_check(const float* x, size_t n, const std::string& what, const std::string& where) {
  const float* bad = std::find_if(x, x + n, [](float v) { return !std::isfinite(v); });
  if (bad == x + n) return;
  const char* value = std::isnan(*bad) ? "nan" : *bad > 0 ? "inf" : "-inf";
  fail(what, " not finite (", value, n > 1 ? " at index " + std::to_string(bad - x) : "", ") ", where,
       ": the model's weights or activations overflow float32");
}

InferenceModel inference_model_load(const std::string& src, const std::string& tokenizer_path, int window,
                                    ComputeMode compute) {
  InferenceModel m;
  m.compute = model_compute_choose(compute, false);
  m.source = model_reader_open(src);
  const LlamaConfig& cfg = m.source->config();
  m.window = window > 0 ? window : inference_window_default(cfg);
  AGOQ_CHECK(m.window <= cfg.max_seq_len, "--seq ", m.window, " is beyond the model's context of ", cfg.max_seq_len,
             " tokens (max_position_embeddings)");
  const ActPolicy policy = ActPolicy::forward_only(cfg.n_layers);
  memory_check(cfg, policy, m.window);
  m.tok = tokenizer_path.empty() ? m.source->tokenizer() : Tokenizer::load(tokenizer_path);
  // Models often pad their embedding beyond the tokenizer's ids (to a multiple of 64 or 128); never the reverse.
  AGOQ_CHECK(m.tok.vocab_size() <= cfg.vocab_size, "tokenizer ", tokenizer_path.empty() ? src : tokenizer_path, " has ",
             m.tok.vocab_size(), " tokens but the model's vocabulary is ", cfg.vocab_size);
  if (m.compute.gemm == GemmPrecision::bf16) m.backend = model_backend_cpu_bf16();
  m.model = std::make_unique<LlamaModel>(m.backend ? *m.backend : model_backend_cpu(), cfg, 1, m.window, policy);
  NamedTensors weights;
  for (const ParamTensor& t : m.model->params().named()) weights.push_back({t.name, t.shape, t.data});
  model_reader_load(*m.source, weights);
  m.model->backend().weights_changed();
  return m;
}

}  // namespace agoq

// `agoq inspect SRC`: what a model is (any source: an agoq checkpoint, a Hugging Face folder, a GGUF file): its
// config, parameter count, how its weights are stored, its tokenizer, and the memory one CPU process needs to train
// it (from the memory model, plan/memory_model.h) with AGoQ's default recipe, with 8-bit optimizer states too, and
// with --baseline.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_load.h"
#include "cli/path_flag.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/memory_json.h"
#include "plan/memory_model.h"

namespace agoq {
namespace {

struct InspectArgs {
  std::string src;
  int seq = 0, batch = 1;
  bool json = false;
  ComputeMode compute = ComputeMode::automatic;  // as train: the recipes' GEMMs, resolved for this CPU
  Bf16Weights bf16_weights = Bf16Weights::cached;
};

struct Recipe {
  const char* name;
  bool agoq, optim_q8, lm_head_pieces;  // the last: for tied embeddings only
};
constexpr Recipe kRecipes[] = {
    {"agoq", true, false, false}, {"agoq+q8", true, true, true}, {"baseline", false, false, false}};

PlanMemory recipe_memory(const LlamaConfig& cfg, const Recipe& r, const InspectArgs& a, int seq, bool bf16) {
  PlanCpuOptions p;
  p.batch = a.batch, p.seq = seq, p.gemm_bf16 = bf16, p.bf16_weights = a.bf16_weights;
  p.grad_q8 = r.agoq, p.optim_q8 = r.optim_q8, p.lm_head_pieces = r.lm_head_pieces && cfg.tie_embeddings;
  return plan_memory_cpu_trainer(cfg, ActPolicy::parse(r.agoq ? "agoq" : "fp32", cfg.n_layers), p);
}

std::string rope_text(const LlamaConfig& c) {
  char buf[128];
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::none) std::snprintf(buf, sizeof buf, "theta %g", c.rope_theta);
  else std::snprintf(buf, sizeof buf, "theta %g, %s scaling x%g", c.rope_theta, rope_scaling_name(r.type), r.factor);
  return buf;
}

void cmd_inspect_run(const InspectArgs& a) {
  const std::unique_ptr<ModelReader> src = model_reader_open(a.src);
  const LlamaConfig& c = src->config();
  const int seq = a.seq > 0 ? a.seq : inference_window_default(c);
  const ComputeChoice compute = model_compute_choose(a.compute, false);
  const bool bf16 = compute.gemm == GemmPrecision::bf16;
  AGOQ_CHECK(seq <= c.max_seq_len, "--seq ", seq, " is beyond the model's context of ", c.max_seq_len);
  nlohmann::json j = {{"model", a.src},
                      {"source", model_source_kind_name(src->kind())},
                      {"config", config_to_hf_json(c)},
                      {"parameters", c.param_count()},
                      {"compute", enum_name(kGemmPrecisionNames, compute.gemm)}};
  for (const auto& [type, n] : src->storage_types()) j["storage"][type] = n;
  std::string tok_line;
  try {
    const Tokenizer tok = src->tokenizer();
    j["tokenizer"] = {{"kind", tok.kind_name()}, {"vocab", tok.vocab_size()}, {"bos_id", tok.bos_id()},
                      {"eos_id", tok.eos_id()},  {"add_bos", tok.add_bos()},  {"identity", tok.identity()}};
    tok_line = std::string(tok.kind_name()) + ", vocab " + std::to_string(tok.vocab_size()) + ", bos " +
               std::to_string(tok.bos_id()) + (tok.add_bos() ? " (added)" : "") + ", eos " +
               std::to_string(tok.eos_id());
  } catch (const Error& e) {
    j["tokenizer"] = {{"error", e.what()}};
    tok_line = std::string("none usable: ") + e.what();
  }
  for (const Recipe& r : kRecipes) {
    const PlanMemory m = recipe_memory(c, r, a, seq, bf16);
    j["train_memory"][r.name] = mem_bytes_json(m.bytes);
    j["train_memory"][r.name]["total"] = m.total();
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model: %s (%s)\n", a.src.c_str(), model_source_kind_name(src->kind()));
  std::printf("config: vocab %d, hidden %d, %d layers, %d heads (%d kv), ffn %d, context %d, rope %s, %s embeddings\n",
              c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.max_seq_len, rope_text(c).c_str(),
              c.tie_embeddings ? "tied" : "untied");
  const double params = double(c.param_count());
  std::printf("parameters: %zu (%.3g %s)\n", c.param_count(), params >= 1e9 ? params / 1e9 : params / 1e6,
              params >= 1e9 ? "B" : "M");
  std::string storage;
  for (const auto& [type, n] : src->storage_types())
    storage += (storage.empty() ? "" : ", ") + type + " x" + std::to_string(n);
  std::printf("weights: %s\n", storage.c_str());
  std::printf("tokenizer: %s\n", tok_line.c_str());
  std::printf("training memory of one CPU process, micro-batch %d x %d tokens, %s GEMMs%s (memory model):\n", a.batch,
              seq, enum_name(kGemmPrecisionNames, compute.gemm),
              bf16 ? (std::string(", --bf16-weights ") + enum_name(kBf16WeightsNames, a.bf16_weights)).c_str() : "");
  std::printf("  %-14s", "category");
  for (const Recipe& r : kRecipes) std::printf(" %14s", r.name);
  std::printf("\n");
  for (int k = 0; k <= kMemCategoryCount; ++k) {
    std::printf("  %-14s", k < kMemCategoryCount ? mem_category_name(MemCategory(k)) : "total");
    for (const Recipe& r : kRecipes) {
      const PlanMemory m = recipe_memory(c, r, a, seq, bf16);
      std::printf(" %14s", format_bytes(k < kMemCategoryCount ? m.bytes[k] : m.total()).c_str());
    }
    std::printf("\n");
  }
  std::printf(
      "  (flags: agoq = train's default, agoq+q8 = --optim-state q8%s, baseline = --baseline; this machine "
      "has %s)\n",
      c.tie_embeddings ? " --lm-head-grad pieces" : "", format_bytes(memory_physical_bytes()).c_str());
}

const CliCommand kInspect("", 36, [](CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* c = app.add_subcommand("inspect", "what a model is, and the memory training it needs");
  c->add_option("src", a->src, "an agoq checkpoint, a Hugging Face folder or a GGUF file")
      ->required()
      ->check(cli_path());
  c->add_option("--seq", a->seq, "training sequence length (default: the context, at most 2048)")
      ->check(cli_at_least(1));
  c->add_option("--batch", a->batch, "micro-batch size")->check(cli_at_least(1))->capture_default_str();
  c->add_flag("--json", a->json, "print JSON");
  cli_add_compute(c, a->compute);
  cli_add_bf16_weights(c, a->bf16_weights);
  c->callback([a] { cmd_inspect_run(*a); });
});

}  // namespace
}  // namespace agoq

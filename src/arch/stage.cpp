#include "arch/stage.h"

#include <sstream>

#include "core/error.h"

namespace agoq {

void model_tp_check(const LlamaConfig& cfg, int T) {
  AGOQ_CHECK(T >= 1, "--tp must be >= 1 (got ", T, ")");
  AGOQ_CHECK(cfg.n_heads % T == 0, "--tp ", T, " does not divide the model's ", cfg.n_heads, " attention heads");
  AGOQ_CHECK(cfg.n_kv_heads % T == 0, "--tp ", T, " does not divide the model's ", cfg.n_kv_heads,
             " kv heads (agoq does not replicate kv heads over tensor-parallel ranks)");
  AGOQ_CHECK(cfg.ffn_dim % T == 0, "--tp ", T, " does not divide the MLP width (--ffn) ", cfg.ffn_dim);
  AGOQ_CHECK(cfg.vocab_size % T == 0, "--tp ", T, " does not divide the vocabulary of ", cfg.vocab_size,
             " tokens (agoq does not pad it: prepare the data with a vocabulary that is a multiple of ", T, ")");
}

ModelStage model_stage_shard(const LlamaConfig& cfg, ModelStage stage, int T, int tp_rank, bool sp) {
  model_tp_check(cfg, T);
  AGOQ_CHECK(!sp || T > 1, "--sp (sequence parallelism) shards over the tensor-parallel ranks: it needs --tp > 1");
  AGOQ_CHECK(tp_rank >= 0 && tp_rank < T, "tensor-parallel rank ", tp_rank, " of ", T, " (internal)");
  stage.tp = T, stage.tp_rank = tp_rank, stage.sp = sp;
  return stage;
}

void model_sp_check(int T, int B, int seq) {
  AGOQ_CHECK(int64_t(B) * seq % T == 0, "--sp: --tp ", T, " does not divide the ", int64_t(B) * seq, " rows (batch ", B,
             " x seq ", seq, ") of a micro-batch");
}

ShardDims model_shard_dims(const LlamaConfig& cfg, const ModelStage& stage) {
  const int T = stage.tp, hd = cfg.head_dim();
  ShardDims d{cfg.dim, hd, cfg.n_heads / T, cfg.n_kv_heads / T, 0, 0, cfg.ffn_dim / T, cfg.vocab_size / T, 0};
  d.Q = d.H * hd, d.KV = d.Hkv * hd, d.v_begin = stage.tp_rank * d.V;
  return d;
}

size_t model_stage_param_count(const LlamaConfig& cfg, const ModelStage& stage) {
  const ShardDims d = model_shard_dims(cfg, stage);
  const size_t C = d.C, V = d.V, layer = 2 * C + 2 * size_t(d.Q) * C + 2 * size_t(d.KV) * C + 3 * size_t(d.F) * C;
  return (stage.embed ? V * C : 0) + size_t(stage.layer_count()) * layer +
         (stage.head ? C + (cfg.tie_embeddings ? 0 : V * C) : 0);
}

std::vector<ModelStage> model_stages_split(const LlamaConfig& cfg, int P, const std::string& layers_per_stage) {
  const int L = cfg.n_layers;
  AGOQ_CHECK(P >= 1, "--pp must be >= 1 (got ", P, ")");
  AGOQ_CHECK(P <= L, "--pp ", P, " is more stages than the model's ", L, " layers");
  AGOQ_CHECK(P == 1 || !cfg.tie_embeddings,
             "tied embeddings need the embedding and the lm_head on one pipeline stage (use --pp 1 or untie them)");
  std::vector<int> counts;
  if (layers_per_stage.empty()) {
    for (int r = 0; r < P; ++r) counts.push_back(L / P + (r >= P - L % P ? 1 : 0));
  } else {
    AGOQ_CHECK(layers_per_stage.back() != ',', "--stage-layers: '", layers_per_stage,
               "' ends with a comma (expected e.g. 3,5)");
    std::stringstream ss(layers_per_stage);
    std::string part;
    while (std::getline(ss, part, ',')) {
      size_t used = 0;
      int n = -1;
      try {
        n = std::stoi(part, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      AGOQ_CHECK(used == part.size() && !part.empty() && n >= 1, "--stage-layers: '", part,
                 "' is not a positive layer count (expected e.g. 3,5)");
      counts.push_back(n);
    }
    AGOQ_CHECK(int(counts.size()) == P, "--stage-layers gives ", counts.size(), " stages but --pp is ", P);
    int64_t sum = 0;  // each count is an int, their sum need not be (found by fuzz_flags)
    for (int n : counts) sum += n;
    AGOQ_CHECK(sum == L, "--stage-layers '", layers_per_stage, "' sums to ", sum, " layers, the model has ", L);
  }
  std::vector<ModelStage> stages;
  int at = 0;
  for (int r = 0; r < P; ++r) {
    stages.push_back({at, at + counts[r], r == 0, r == P - 1});
    at += counts[r];
  }
  return stages;
}

}  // namespace agoq

#include "model/stage.h"

#include <sstream>

#include "core/error.h"

namespace agoq {

size_t model_stage_param_count(const LlamaConfig& cfg, const ModelStage& stage) {
  const size_t C = cfg.dim, V = cfg.vocab_size;
  return (stage.embed ? V * C : 0) + size_t(stage.layer_count()) * cfg.layer_param_count() +
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

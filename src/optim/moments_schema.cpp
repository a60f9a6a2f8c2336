#include "optim/moments_schema.h"

namespace agoq {

std::string moments_unit_name(const ModelStage& s, size_t u) {
  if (s.embed && u == 0) return "embed";
  const int layer = s.first_layer + int(u) - (s.embed ? 1 : 0);
  return layer < s.end_layer ? "layers." + std::to_string(layer) : "head";
}

std::string moments_shard_prefix(int tp_rank) { return "tp" + std::to_string(tp_rank) + "."; }

std::string moments_weight_of(const std::string& name) {
  for (const char* prefix : {"adam.m.", "adam.v."})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
  return name;
}

}  // namespace agoq

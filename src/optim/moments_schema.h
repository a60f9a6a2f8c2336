// How checkpoints name AdamW's moments (docs/checkpoint-format.md), written once for every engine that saves or
// loads them: CpuStep's DpMoments (any ZeRO sharding), the GPU's step and the resume of another TP degree.
//
//   fp32:   adam.m.<weight>, adam.v.<weight>                 F32, the weight's shape
//   8-bit:  adam.m.<weight>, adam.v.<weight>                 I8 / U8 codes, the weight's shape
//           adam.m.scales.<unit>, adam.v.scales.<unit>       F32, one per block of the gradient unit
//                                                             (unit: embed, layers.<global layer>, head)
//   8-bit under tensor parallelism: each shard's own tensors, prefixed tp<r>.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/hf.h"
#include "arch/params.h"
#include "optim/adam_q8.h"

namespace agoq {

// The checkpoint's name of a stage's gradient unit u (model_grad_units): embed, layers.<global layer> or head, the
// same on any pipeline split and any tensor-parallel shard.
std::string moments_unit_name(const ModelStage& stage, size_t u);
// "tp<r>.": a tensor-parallel shard's 8-bit moments in a checkpoint.
std::string moments_shard_prefix(int tp_rank);
// The weight a moment's name belongs to ("adam.m.x" -> "x"); the name itself when it is no moment's.
std::string moments_weight_of(const std::string& name);

// Where a stage's moments are in memory, unit by unit (units tile the flat layout in order): unit u's values from
// its first one (fp32: m[u], v[u]; 8-bit: m_codes[u], v_codes[u]) and, 8-bit, its block scales from its first block.
struct MomentsPlace {
  std::vector<float*> m, v;
  std::vector<int8_t*> m_codes;
  std::vector<uint8_t*> v_codes;
  std::vector<float*> m_scales, v_scales;
  int block = 0;  // 8-bit: values per scale; 0: fp32
};

// The named views of a stage's moments: its tensors (ParamSet::named() or hf_tensors: anything with a name and a
// shape, in layout order) over its units, at `place`; `prefix` before every name (moments_shard_prefix, or none).
template <class Tensors>
NamedTensors moments_views(const Tensors& tensors, const ModelStage& stage, const std::vector<ParamSegment>& units,
                           const MomentsPlace& place, const std::string& prefix = "") {
  NamedTensors out;
  size_t at = 0, u = 0;
  for (const auto& t : tensors) {
    while (at >= units[u].end) ++u;
    const size_t in_unit = at - units[u].begin;
    if (place.block > 0) {
      out.push_back({prefix + "adam.m." + t.name, t.shape, nullptr, "I8", place.m_codes[u] + in_unit});
      out.push_back({prefix + "adam.v." + t.name, t.shape, nullptr, "U8", place.v_codes[u] + in_unit});
    } else {
      out.push_back({prefix + "adam.m." + t.name, t.shape, place.m[u] + in_unit});
      out.push_back({prefix + "adam.v." + t.name, t.shape, place.v[u] + in_unit});
    }
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    at += n;
  }
  for (size_t k = 0; place.block > 0 && k < units.size(); ++k) {
    const int64_t blocks = int64_t(adam_q8_blocks(units[k].end - units[k].begin, place.block));
    const std::string unit = moments_unit_name(stage, k);
    out.push_back({prefix + "adam.m.scales." + unit, {blocks}, place.m_scales[k]});
    out.push_back({prefix + "adam.v.scales." + unit, {blocks}, place.v_scales[k]});
  }
  return out;
}

}  // namespace agoq

#include "arch/act_policy.h"

#include <map>
#include <sstream>

#include "arch/stage.h"
#include "core/error.h"

namespace agoq {

namespace {

const char* kSlotNames[kActSlotCount] = {
    "attn_norm_in", "attn_rstd", "attn_norm_out", "q",    "k",  "v",         "attn_out", "attn_lse",
    "mlp_norm_in",  "mlp_rstd",  "mlp_norm_out",  "gate", "up", "swiglu_out"};

bool slot_always_fp32(ActSlot s) { return s == ActSlot::attn_rstd || s == ActSlot::mlp_rstd || s == ActSlot::attn_lse; }

// Symmetric (abs-max) for the residual stream, gate and up, which are centred near zero: asymmetric would cost
// 6% more bytes for 6-10% less error. The SwiGLU output is heavy-tailed and skewed, and asymmetric nearly halves
// its error (measurements in docs/activations.md).
bool slot_symmetric(ActSlot s) { return s != ActSlot::swiglu_out; }

// Slot classes used by specs.
std::vector<ActSlot> slot_class(const std::string& name) {
  using S = ActSlot;
  if (name == "attn") return {S::q, S::k, S::v, S::attn_out};
  if (name == "norm") return {S::attn_norm_in, S::mlp_norm_in};
  if (name == "norm_out") return {S::attn_norm_out, S::mlp_norm_out};
  if (name == "mlp") return {S::gate, S::up};
  if (name == "swiglu") return {S::swiglu_out};
  for (int s = 0; s < kActSlotCount; ++s)
    if (name == kSlotNames[s] && !slot_always_fp32(ActSlot(s))) return {ActSlot(s)};
  return {};
}

SlotStorage int_storage(ActSlot s, int bits) {
  return {true, quant_format_int(bits, 128, slot_symmetric(s), QuantRounding::stochastic)};
}

// A value of a spec for slot s: fp32, bf16, 2/3/4/8, recompute, or a full quant format name.
SlotStorage parse_value(ActSlot s, const std::string& value, const std::string& part) {
  if (value == "recompute") {
    AGOQ_CHECK(act_slot_recomputable(s), "activation policy '", part, "': slot ", kSlotNames[int(s)],
               " cannot be recomputed (only norm outputs and swiglu_out can)");
    return {false, {}};
  }
  if (value == "2" || value == "3" || value == "4" || value == "8") return int_storage(s, std::stoi(value));
  try {
    return {true, quant_format_parse(value)};
  } catch (const Error& e) {
    fail("activation policy '", part, "': bad format '", value, "' (", e.what(), ")");
  }
}

ActPolicy policy_all(int n_layers, const std::string& name, const SlotStorage& every) {
  ActPolicy p;
  p.name = name;
  p.slots.assign(n_layers, {});
  for (auto& layer : p.slots)
    for (int s = 0; s < kActSlotCount; ++s) layer[s] = slot_always_fp32(ActSlot(s)) ? SlotStorage{} : every;
  return p;
}

ActPolicy policy_agoq(int n_layers, bool attention_int4) {
  ActPolicy p = policy_all(n_layers, attention_int4 ? "uniform4" : "agoq", {true, quant_format_bf16()});
  for (auto& layer : p.slots) {
    for (ActSlot s : {ActSlot::attn_norm_in, ActSlot::mlp_norm_in, ActSlot::gate, ActSlot::up})
      layer[int(s)] = int_storage(s, 4);
    for (ActSlot s : {ActSlot::attn_norm_out, ActSlot::mlp_norm_out, ActSlot::swiglu_out}) layer[int(s)] = {false, {}};
    if (attention_int4)
      for (ActSlot s : slot_class("attn")) layer[int(s)] = int_storage(s, 4);
  }
  return p;
}

// "layers[a..b]" or "layers[a]" -> [a, b]; errors name the part.
std::pair<int, int> parse_layer_range(const std::string& key, int n_layers, const std::string& part) {
  const size_t open = key.find('['), close = key.find(']');
  AGOQ_CHECK(open != std::string::npos && close != std::string::npos && close > open + 1, "activation policy '", part,
             "': expected layers[a..b]");
  const std::string inner = key.substr(open + 1, close - open - 1);
  const size_t dots = inner.find("..");
  int a, b;
  try {
    a = std::stoi(inner.substr(0, dots));
    b = dots == std::string::npos ? a : std::stoi(inner.substr(dots + 2));
  } catch (const std::exception&) {
    fail("activation policy '", part, "': bad layer range '", inner, "'");
  }
  AGOQ_CHECK(0 <= a && a <= b && b < n_layers, "activation policy '", part, "': layers ", a, "..", b, " outside 0..",
             n_layers - 1);
  return {a, b};
}

}  // namespace

const char* act_slot_name(ActSlot s) { return kSlotNames[int(s)]; }

bool act_slot_is_attention(ActSlot s) {
  return s == ActSlot::q || s == ActSlot::k || s == ActSlot::v || s == ActSlot::attn_out || s == ActSlot::attn_lse;
}

bool act_slot_recomputable(ActSlot s) {
  return s == ActSlot::attn_norm_out || s == ActSlot::mlp_norm_out || s == ActSlot::swiglu_out;
}

bool act_slot_is_residual(ActSlot s) {
  return s == ActSlot::attn_norm_in || s == ActSlot::attn_rstd || s == ActSlot::attn_norm_out ||
         s == ActSlot::mlp_norm_in || s == ActSlot::mlp_rstd || s == ActSlot::mlp_norm_out;
}

ActPolicy ActPolicy::uniform(int n_layers, const QuantFormat& f) {
  return policy_all(n_layers, quant_format_name(f), {true, f});
}

ActPolicy ActPolicy::forward_only(int n_layers) {
  ActPolicy p = policy_all(n_layers, "forward-only", {false, {}});
  p.backward = false;
  return p;
}

ActPolicy ActPolicy::parse(const std::string& spec, int n_layers) {
  AGOQ_CHECK(n_layers >= 1, "activation policy needs at least one layer");
  if (spec == "fp32") return uniform(n_layers, quant_format_fp32());
  if (spec == "baseline-bf16" || spec == "bf16") {
    ActPolicy p = uniform(n_layers, quant_format_bf16());
    p.name = "baseline-bf16";
    return p;
  }
  if (spec == "agoq") return policy_agoq(n_layers, false);
  if (spec == "uniform4") return policy_agoq(n_layers, true);
  AGOQ_CHECK(spec.find('=') != std::string::npos, "unknown activation policy '", spec,
             "' (expected fp32, baseline-bf16, agoq, uniform4 or a spec such as attn=bf16,mlp=4)");

  ActPolicy p = policy_agoq(n_layers, false);
  p.name = spec;
  std::stringstream parts(spec);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const size_t eq = part.find('=');
    AGOQ_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < part.size(), "activation policy: '", part,
               "' is not key=value");
    std::string key = part.substr(0, eq);
    const std::string value = part.substr(eq + 1);
    int first = 0, last = n_layers - 1;
    std::vector<ActSlot> targets;
    if (key.rfind("layers", 0) == 0) {
      std::tie(first, last) = parse_layer_range(key, n_layers, part);
      const size_t dot = key.find("].");
      if (dot == std::string::npos) {
        for (int s = 0; s < kActSlotCount; ++s)
          if (!act_slot_is_attention(ActSlot(s)) && !slot_always_fp32(ActSlot(s))) targets.push_back(ActSlot(s));
      } else {
        key = key.substr(dot + 2);
      }
    }
    if (targets.empty()) targets = slot_class(key);
    AGOQ_CHECK(!targets.empty(), "activation policy '", part, "': unknown slot or class '", key,
               "' (classes: attn, norm, norm_out, mlp, swiglu; or a slot name)");
    for (int l = first; l <= last; ++l)
      for (ActSlot s : targets) {
        // A layer range sets the bits of what is stored; it does not bring back recomputed slots.
        if (key.rfind("layers", 0) == 0 && !p.slots[l][int(s)].stored) continue;
        p.slots[l][int(s)] = parse_value(s, value, part);
      }
  }
  return p;
}

std::string ActPolicy::describe() const {
  auto layer_line = [&](int l) {
    std::string line;
    for (int s = 0; s < kActSlotCount; ++s) {
      if (slot_always_fp32(ActSlot(s))) continue;
      const SlotStorage& st = slots[l][s];
      line += std::string(line.empty() ? "" : ", ") + kSlotNames[s] + "=" +
              (st.stored ? quant_format_name(st.format) : "recompute");
    }
    return line;
  };
  std::ostringstream os;
  os << "activation policy " << name << ":\n";
  for (int l = 0; l < int(slots.size());) {
    int e = l;
    while (e + 1 < int(slots.size()) && slots[e + 1] == slots[l]) ++e;
    os << "  layers " << l << "-" << e << ": " << layer_line(l) << "\n";
    l = e + 1;
  }
  return os.str();
}

std::array<int, kActSlotCount> act_slot_cols(const LlamaConfig& cfg, int tp) {
  ModelStage shard = model_stage_whole(cfg);
  shard.tp = tp;
  const ShardDims d = model_shard_dims(cfg, shard);
  return {d.C, 1, d.C, d.Q, d.KV, d.KV, d.Q, d.H, d.C, 1, d.C, d.F, d.F, d.F};
}

size_t act_slot_rows(ActSlot s, size_t rows, int tp, bool sp) {
  return sp && act_slot_is_residual(s) ? rows / size_t(tp) : rows;
}

size_t act_store_bytes(const ActPolicy& policy, const LlamaConfig& cfg, size_t rows, bool attention, int tp, bool sp) {
  const auto cols = act_slot_cols(cfg, tp);
  size_t total = 0;
  for (const auto& layer : policy.slots)
    for (int s = 0; s < kActSlotCount; ++s)
      if (layer[s].stored && act_slot_is_attention(ActSlot(s)) == attention)
        total += quant_bytes(layer[s].format, act_slot_rows(ActSlot(s), rows, tp, sp), size_t(cols[s]));
  return total;
}

}  // namespace agoq

#include "model/act_store.h"

#include <cstring>

#include "core/error.h"

namespace agoq {

namespace {
const char* kSlotNames[kActSlotCount] = {"attn_norm_in", "attn_rstd", "attn_norm_out", "q",        "k",
                                         "v",            "attn_out",  "attn_lse",      "mlp_norm_in", "mlp_rstd",
                                         "mlp_norm_out", "gate",      "up",            "swiglu_out"};

bool slot_always_fp32(ActSlot s) { return s == ActSlot::attn_rstd || s == ActSlot::mlp_rstd || s == ActSlot::attn_lse; }

// TODO(quant): replace with the quant library's bf16 keep format.
uint16_t bf16_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f32_from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

const char* act_slot_name(ActSlot s) { return kSlotNames[int(s)]; }

bool act_slot_is_attention(ActSlot s) {
  return s == ActSlot::q || s == ActSlot::k || s == ActSlot::v || s == ActSlot::attn_out || s == ActSlot::attn_lse;
}

const char* act_format_name(ActFormat f) { return f == ActFormat::fp32 ? "fp32" : "bf16"; }

ActFormat act_format_parse(const std::string& s) {
  if (s == "fp32") return ActFormat::fp32;
  if (s == "bf16") return ActFormat::bf16;
  fail("unknown activation store format '", s, "' (expected fp32 or bf16)");
}

ActPolicy ActPolicy::uniform(int n_layers, ActFormat f) {
  ActPolicy p;
  p.formats.assign(n_layers, {});
  for (auto& layer : p.formats) layer.fill(f);
  return p;
}

ActivationStore::ActivationStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy)
    : max_rows_(max_rows), policy_(policy) {
  AGOQ_CHECK(int(policy_.formats.size()) == cfg.n_layers, "activation policy has ", policy_.formats.size(),
             " layers, model has ", cfg.n_layers);
  const int C = cfg.dim, KV = cfg.kv_dim(), F = cfg.ffn_dim;
  cols_ = {C, 1, C, C, KV, KV, C, cfg.n_heads, C, 1, C, F, F, F};
  for (auto& layer : policy_.formats)
    for (int s = 0; s < kActSlotCount; ++s)
      if (slot_always_fp32(ActSlot(s))) layer[s] = ActFormat::fp32;

  stored_.resize(cfg.n_layers);
  std::array<bool, kActSlotCount> needs_staging{};
  for (int l = 0; l < cfg.n_layers; ++l) {
    for (int s = 0; s < kActSlotCount; ++s) {
      const size_t n = size_t(max_rows) * cols_[s];
      const char* tag = act_slot_is_attention(ActSlot(s)) ? "act.attention" : "act.other";
      if (policy_.formats[l][s] == ActFormat::fp32) {
        stored_[l][s].f32 = Buffer<float>(n, MemCategory::activations, tag);
      } else {
        stored_[l][s].b16 = Buffer<uint16_t>(n, MemCategory::activations, tag);
        needs_staging[s] = true;
      }
    }
  }
  for (int s = 0; s < kActSlotCount; ++s)
    if (needs_staging[s]) staging_[s] = Buffer<float>(size_t(max_rows) * cols_[s], MemCategory::workspace, "act.staging");
}

float* ActivationStore::produce(int layer, ActSlot s) {
  Stored& st = stored_[layer][int(s)];
  return format(layer, s) == ActFormat::fp32 ? st.f32.data() : staging_[int(s)].data();
}

void ActivationStore::commit(int layer, ActSlot s, int rows) {
  if (format(layer, s) == ActFormat::fp32) return;
  const size_t n = size_t(rows) * cols_[int(s)];
  const float* src = staging_[int(s)].data();
  uint16_t* dst = stored_[layer][int(s)].b16.data();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}

const float* ActivationStore::consume(int layer, ActSlot s, int rows) {
  if (format(layer, s) == ActFormat::fp32) return stored_[layer][int(s)].f32.data();
  const size_t n = size_t(rows) * cols_[int(s)];
  float* dst = staging_[int(s)].data();
  const uint16_t* src = stored_[layer][int(s)].b16.data();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(src[i]);
  return dst;
}

size_t ActivationStore::stored_bytes(bool attention) const {
  size_t total = 0;
  for (const auto& layer : stored_)
    for (int s = 0; s < kActSlotCount; ++s)
      if (act_slot_is_attention(ActSlot(s)) == attention) total += layer[s].f32.bytes() + layer[s].b16.bytes();
  return total;
}

}  // namespace agoq

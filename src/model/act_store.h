// The activation store: every tensor the forward pass saves for the backward pass goes in and comes out here,
// through a named slot per layer. Each (layer, slot) has a storage format chosen at run time, so the memory the
// saved activations take is one decision in one place (AGoQ's quantized formats plug in here).
//
// Protocol: forward calls produce() to get an fp32 buffer for a slot, computes into it, then commit(); backward
// calls consume() to read it back as fp32. For fp32 slots produce()/consume() return the stored tensor itself;
// for other formats they return a staging buffer (one per slot kind, shared by all layers) and commit()/consume()
// encode/decode it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/config.h"

namespace agoq {

enum class ActSlot : int {
  attn_norm_in,   // (N, C)  residual stream entering the layer
  attn_rstd,      // (N)     RMSNorm 1/rms, always fp32 (tiny)
  attn_norm_out,  // (N, C)
  q,              // (N, C)  after RoPE
  k,              // (N, KV) after RoPE
  v,              // (N, KV)
  attn_out,       // (N, C)  attention output before o_proj
  attn_lse,       // (B, H, T) softmax log-sum-exp, always fp32
  mlp_norm_in,    // (N, C)  residual stream after attention
  mlp_rstd,       // (N)
  mlp_norm_out,   // (N, C)
  gate,           // (N, F)
  up,             // (N, F)
  swiglu_out,     // (N, F)
  count
};
constexpr int kActSlotCount = int(ActSlot::count);
const char* act_slot_name(ActSlot s);
// AGoQ keeps attention's saved tensors in high precision; this is the split the policies and reports use.
bool act_slot_is_attention(ActSlot s);

enum class ActFormat { fp32, bf16 };
const char* act_format_name(ActFormat f);
ActFormat act_format_parse(const std::string& s);  // "fp32" | "bf16", else Error

// Storage format for every (layer, slot).
struct ActPolicy {
  std::vector<std::array<ActFormat, kActSlotCount>> formats;
  static ActPolicy uniform(int n_layers, ActFormat f);
  ActFormat at(int layer, ActSlot s) const { return formats[layer][int(s)]; }
};

class ActivationStore {
 public:
  // Capacity: up to max_rows tokens (B*T) per forward.
  ActivationStore(const LlamaConfig& cfg, int max_rows, const ActPolicy& policy);

  float* produce(int layer, ActSlot s);
  void commit(int layer, ActSlot s, int rows);
  const float* consume(int layer, ActSlot s, int rows);

  // Values per token of a slot (the "cols" of its (rows, cols) view).
  int slot_cols(ActSlot s) const { return cols_[int(s)]; }
  // Bytes held by the stored (not staging) tensors, split by slot class.
  size_t stored_bytes(bool attention) const;
  const ActPolicy& policy() const { return policy_; }

 private:
  struct Stored {
    Buffer<float> f32;
    Buffer<uint16_t> b16;
  };
  const ActFormat& format(int layer, ActSlot s) const { return policy_.formats[layer][int(s)]; }
  std::array<int, kActSlotCount> cols_{};
  int max_rows_;
  ActPolicy policy_;
  std::vector<std::array<Stored, kActSlotCount>> stored_;  // [layer][slot]
  std::array<Buffer<float>, kActSlotCount> staging_;       // allocated only for slot kinds that need it
};

}  // namespace agoq

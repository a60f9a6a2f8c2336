// Activation slots and the policy that picks each one's storage format, per layer.
//
// AGoQ's layer-aware rule: attention's saved tensors (q, k, v, attn_out) stay in high precision; everything else
// is stored in ~4 bits. Norm outputs and the SwiGLU output are not stored at all under AGoQ: they are recomputed
// in backward from the norm input (x * rstd * w) and from gate/up (silu(gate) * up), which costs a few flops per
// value and no memory.
//
// Policies by name:
//   fp32           everything fp32 (the reference)
//   baseline-bf16  everything bf16, all slots stored (Megatron-like)
//   agoq           attention bf16; norm inputs, gate, up int4 (G=128, stochastic); norm outputs, SwiGLU recomputed
//   uniform4       agoq with attention int4 too (the ablation that shows why attention stays high precision)
// or a spec, applied on top of agoq: "attn=bf16,mlp=4,norm=4,layers[0..1]=8,swiglu=recompute"
//   keys: a slot class (attn, norm, norm_out, mlp, swiglu), a slot name (q, gate, ...), layers[a..b] (every
//   non-attention stored slot of layers a..b), or layers[a..b].<class or slot>;
//   values: fp32, bf16, 2, 3, 4, 8 (int, G=128, stochastic, the slot's symmetry), recompute, or a full
//   quant format name such as int4.g64.asym.sr.
// rstd and the attention log-sum-exp are tiny and always fp32.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "arch/config.h"
#include "quant/format.h"

namespace agoq {

enum class ActSlot : int {
  attn_norm_in,   // (N, C)  residual stream entering the layer (the RMSNorm input)
  attn_rstd,      // (N)     RMSNorm 1/rms, always fp32
  attn_norm_out,  // (N, C)  input of q/k/v projections
  q,              // (N, C)  after RoPE
  k,              // (N, KV) after RoPE
  v,              // (N, KV)
  attn_out,       // (N, C)  attention output, input of o_proj
  attn_lse,       // (B, H, T) softmax log-sum-exp, always fp32
  mlp_norm_in,    // (N, C)  residual stream after attention
  mlp_rstd,       // (N)
  mlp_norm_out,   // (N, C)  input of gate/up projections
  gate,           // (N, F)
  up,             // (N, F)
  swiglu_out,     // (N, F)  input of down_proj
  count
};
constexpr int kActSlotCount = int(ActSlot::count);
const char* act_slot_name(ActSlot s);
// The split the policies and memory reports use: q, k, v, attn_out, attn_lse.
bool act_slot_is_attention(ActSlot s);
// Slots that backward can rebuild from others (norm outputs, SwiGLU output).
bool act_slot_recomputable(ActSlot s);
// The residual stream's C-wide slots (norm inputs and outputs) and their rstd: the ones sequence parallelism
// shards by rows over the tensor-parallel ranks.
bool act_slot_is_residual(ActSlot s);

struct SlotStorage {
  bool stored = true;  // false: recomputed in backward
  QuantFormat format;
  bool operator==(const SlotStorage&) const = default;
};

struct ActPolicy {
  std::string name;
  std::vector<std::array<SlotStorage, kActSlotCount>> slots;  // [layer][slot]
  bool backward = true;  // false: a forward-only model (scoring, sampling), which keeps nothing for a backward pass

  const SlotStorage& at(int layer, ActSlot s) const { return slots[layer][int(s)]; }
  // A policy name or spec (see above); errors name the bad part.
  static ActPolicy parse(const std::string& spec, int n_layers);
  static ActPolicy uniform(int n_layers, const QuantFormat& f);  // every slot stored in f (rstd/lse fp32)
  // Inference: no slot stored but the forward's own fp32 outputs (rstd, the log-sum-exp), and no backward.
  static ActPolicy forward_only(int n_layers);
  // One line per distinct layer pattern: "layers 0-5: attn_norm_in=int4.g128.sym.sr, ...".
  std::string describe() const;
};

// ---- what a policy stores: the activation store's exact bytes (model/act_store_cpu.h on the CPU,
// cuda/act_store_cuda.h on the device, plan/ for a planned run) ----

// Values per token of each slot for a model on one of tp tensor-parallel ranks (the cols of its (rows, cols) view):
// q, k, v, attn_out, the log-sum-exp and the MLP's slots are the rank's heads and units; the residual stream and
// the norm slots are whole.
std::array<int, kActSlotCount> act_slot_cols(const LlamaConfig& cfg, int tp = 1);
// Rows a slot holds of a micro-batch of `rows` tokens on one of tp ranks: with sequence parallelism (sp) the
// residual slots (act_slot_is_residual) hold rows / tp, the others all rows.
size_t act_slot_rows(ActSlot s, size_t rows, int tp, bool sp);
// Exact bytes the store allocates for `rows` tokens under a policy, for one slot class (attention or not), summed
// over layers, on one of tp ranks (sequence-parallel when sp). Memory planning and reports use it; the store
// allocates exactly this.
size_t act_store_bytes(const ActPolicy& policy, const LlamaConfig& cfg, size_t rows, bool attention, int tp = 1,
                       bool sp = false);

}  // namespace agoq

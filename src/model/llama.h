// The LLaMA model: parameters, their gradients, the activation store and the forward/backward pass that wires
// the ops (model/ops.h) together. Read llama.cpp top to bottom: layer forward, layer backward, the fused head.
#pragma once
#include <cstdint>
#include <functional>

#include "core/memory.h"
#include "model/act_store.h"
#include "model/config.h"
#include "model/params.h"

namespace agoq {

class LlamaModel {
 public:
  // Buffers are sized for micro-batches of up to max_batch sequences of up to max_seq tokens.
  LlamaModel(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy);

  const LlamaConfig& config() const { return cfg_; }
  ParamSet& params() { return params_; }
  ParamSet& grads() { return grads_; }
  ActivationStore& store() { return store_; }

  // Hugging Face's initialisation: every matrix ~ N(0, 0.02), norm weights 1.
  void init_weights(uint64_t seed);

  // One micro-batch: forward, loss, backward. Adds grad_scale * d(mean loss)/d(param) into grads().
  // inputs/targets: (B, T) token ids; targets < 0 are ignored. Returns the mean loss over counted targets.
  float forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale);
  // Forward only: mean loss over the targets (no gradients, store contents unspecified afterwards).
  float forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Logits (V) of the last position of one sequence of T tokens (T <= max_seq), for sampling.
  void forward_last_logits(const int32_t* tokens, int T, float* logits);

  // Called by forward_backward as soon as a part's gradients in grads() are final for this micro-batch, so a
  // caller can overlap their communication or compression with the rest of backward. Order: n_layers (final norm
  // and an untied lm_head), n_layers-1 .. 0 (decoder layers), -1 (embedding; also the lm_head when tied).
  std::function<void(int layer)> on_grads_ready;

 private:
  void forward_layer(int l, int B, int T);
  void backward_layer(int l, int B, int T);
  // Final norm -> lm_head -> cross-entropy, in chunks of rows so the (N, V) logits never exist; when dx is
  // given it also runs the backward of those three (dx = dloss/dx_final) and accumulates their weight gradients.
  float head_forward_backward(const float* x, const int32_t* targets, int N, float grad_scale, float* dx);
  void forward_trunk(const int32_t* inputs, int B, int T);  // embedding + layers -> resid_
  float run(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale, bool backward);
  // fp32 view of an attention slot for the whole batch: the stored tensor when fp32, else the workspace buffer.
  float* attention_buffer(int l, ActSlot s, Buffer<float>& workspace);
  // Rows per tile for sequences of length T: whole sequences, so RoPE positions are row % T inside a tile.
  int tile_rows(int T, int N) const;

  LlamaConfig cfg_;
  int max_rows_, max_seq_;
  ParamSet params_, grads_;
  ActivationStore store_;
  Buffer<float> rope_cos_, rope_sin_;  // (max_seq, hd/2)
  // Whole-batch workspace, shapes for N = B*T rows.
  Buffer<float> resid_;                // (N, C)  the residual stream, updated in place layer by layer
  Buffer<float> dx_;                   // (N, C)  its gradient
  Buffer<float> q_, k_, v_, o_;        // attention inputs/output in fp32 when their slots are not fp32
  Buffer<float> dq_, dk_, dv_, do_;    // (N, C), (N, KV), (N, KV), (N, C)
  // Tile workspace: a few rows at a time. c: (R, C), f: (R, F).
  Buffer<float> t_x_, t_xn_, t_c_, t_o_;
  Buffer<float> t_gate_, t_up_, t_s_, t_ds_, t_dgate_, t_dup_;
  Buffer<float> head_norm_, head_rstd_, head_dnorm_;  // (chunk, C), (chunk), (chunk, C)
  Buffer<float> head_logits_;                         // (chunk, V)
  Buffer<float> losses_;                              // (N)
};

}  // namespace agoq

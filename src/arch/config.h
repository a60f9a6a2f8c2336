// LLaMA model shape. Field names follow Hugging Face's LlamaConfig where one exists (see arch/hf.h).
#pragma once
#include <cstddef>
#include <string>

namespace agoq {

struct LlamaConfig {
  static constexpr int kMaxLayers = 4096, kMaxWidth = 1 << 20, kMaxVocab = 1 << 24, kMaxPositions = 1 << 24;
  int vocab_size = 4096;
  int dim = 256;         // hidden_size
  int n_layers = 6;      // num_hidden_layers
  int n_heads = 8;       // num_attention_heads
  int n_kv_heads = 8;    // num_key_value_heads (grouped-query attention when < n_heads)
  int ffn_dim = 688;     // intermediate_size
  int max_seq_len = 256; // max_position_embeddings
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;  // rms_norm_eps
  bool tie_embeddings = false;

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  // Throws agoq::Error naming the first invalid field.
  void validate() const;
  size_t param_count() const;
  size_t layer_param_count() const;  // one decoder layer: 2 norms, q/o, k/v, gate/up/down
};

}  // namespace agoq

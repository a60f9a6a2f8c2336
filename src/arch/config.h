// LLaMA model shape. Field names follow Hugging Face's LlamaConfig where one exists (see arch/hf.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace agoq {

// How the rotary frequencies are stretched for long contexts (HF's rope_scaling): none; linear (every frequency
// divided by factor); llama3 (Llama 3.1/3.2: low frequencies divided by factor, high ones kept, a smooth blend
// between, set by low/high_freq_factor and the original context).
struct RopeScaling {
  enum class Type : uint8_t { none, linear, llama3 };
  Type type = Type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int original_max_positions = 8192;  // original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};
const char* rope_scaling_name(RopeScaling::Type t);  // "none", "linear", "llama3"

struct LlamaConfig {
  static constexpr int kMaxLayers = 4096, kMaxWidth = 1 << 20, kMaxVocab = 1 << 24, kMaxPositions = 1 << 24;
  int vocab_size = 4096;
  int dim = 256;          // hidden_size
  int n_layers = 6;       // num_hidden_layers
  int n_heads = 8;        // num_attention_heads
  int n_kv_heads = 8;     // num_key_value_heads (grouped-query attention when < n_heads)
  int ffn_dim = 688;      // intermediate_size
  int max_seq_len = 256;  // max_position_embeddings
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;  // rms_norm_eps
  bool tie_embeddings = false;
  RopeScaling rope_scaling;
  int sliding_window = 0;  // Mistral's attention window; 0: none. Sequences longer than it are refused.

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  // Throws agoq::Error naming the first invalid field.
  void validate() const;
  size_t param_count() const;
  size_t layer_param_count() const;  // one decoder layer: 2 norms, q/o, k/v, gate/up/down
  // The rotary inverse frequencies, head_dim()/2 of them, in double precision, scaling included (as HF's
  // ROPE_INIT_FUNCTIONS compute them): frequency i of a head turns position t by t * rope_inv_freqs()[i].
  std::vector<double> rope_inv_freqs() const;
};

}  // namespace agoq

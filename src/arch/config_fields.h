// The model shape's fields, each listed once: the LlamaConfig member, its key in a Hugging Face config.json and the
// `agoq train` flag that sets it (none for the two the data and --seq decide). The HF reader and writer
// (arch/hf.h), config_diff, the train command's flags and the check that flags agree with a checkpoint all walk
// this table; what is not a plain number (rope_scaling, sliding_window, head_dim) stays with the HF code.
#pragma once
#include <variant>

#include "arch/config.h"

namespace agoq {

struct ConfigField {
  std::variant<int LlamaConfig::*, float LlamaConfig::*, bool LlamaConfig::*> member;
  const char* hf_key;
  const char* flag;  // null: no flag sets it
  const char* help;
  bool hf_required;  // a config.json without it is refused (else LlamaConfig's HF default)
};

// In the order config_diff reports the first difference.
inline constexpr ConfigField kConfigFields[] = {
    {&LlamaConfig::vocab_size, "vocab_size", nullptr, "", true},
    {&LlamaConfig::dim, "hidden_size", "--dim", "hidden size", true},
    {&LlamaConfig::n_layers, "num_hidden_layers", "--layers", "decoder layers", true},
    {&LlamaConfig::n_heads, "num_attention_heads", "--heads", "attention heads", true},
    {&LlamaConfig::n_kv_heads, "num_key_value_heads", "--kv-heads",
     "key/value heads, grouped-query attention (default: --heads)", false},
    {&LlamaConfig::ffn_dim, "intermediate_size", "--ffn", "MLP hidden size", true},
    {&LlamaConfig::max_seq_len, "max_position_embeddings", nullptr, "", true},
    {&LlamaConfig::rope_theta, "rope_theta", "--rope-theta", "rotary embedding base", false},
    {&LlamaConfig::norm_eps, "rms_norm_eps", nullptr, "", true},
    {&LlamaConfig::tie_embeddings, "tie_word_embeddings", "--tie-embeddings", "share the embedding and LM head weights",
     false},
};

}  // namespace agoq

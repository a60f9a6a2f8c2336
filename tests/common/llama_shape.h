// A LLaMA shape for tests, field by field in one call (the rest LlamaConfig's defaults).
#pragma once
#include "arch/config.h"

namespace agoq {

inline LlamaConfig llama_shape(int vocab, int dim, int layers, int heads, int kv_heads, int ffn, int max_seq) {
  LlamaConfig c;
  c.vocab_size = vocab, c.dim = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads;
  c.ffn_dim = ffn, c.max_seq_len = max_seq;
  return c;
}

}  // namespace agoq

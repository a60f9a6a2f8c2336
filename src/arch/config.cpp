#include "arch/config.h"

#include <cmath>

#include "core/error.h"

namespace agoq {

void LlamaConfig::validate() const {
  // Far beyond any LLaMA (405B: 126 layers, dim 16384, ffn 53248, vocab 128256, 131072 positions), but small enough
  // that sizes derived from them cannot overflow and a typo fails here, naming the field, before memory is taken.
  AGOQ_CHECK(n_layers <= kMaxLayers, "config: n_layers ", n_layers, " is beyond agoq's limit of ", kMaxLayers);
  AGOQ_CHECK(dim <= kMaxWidth && ffn_dim <= kMaxWidth, "config: dim ", dim, " / ffn_dim ", ffn_dim,
             " beyond agoq's limit of ", kMaxWidth);
  AGOQ_CHECK(vocab_size <= kMaxVocab, "config: vocab_size ", vocab_size, " is beyond agoq's limit of ", kMaxVocab);
  AGOQ_CHECK(max_seq_len <= kMaxPositions, "config: max_seq_len ", max_seq_len, " is beyond agoq's limit of ",
             kMaxPositions);
  AGOQ_CHECK(vocab_size >= 2, "config: vocab_size must be >= 2 (got ", vocab_size, ")");
  AGOQ_CHECK(dim >= 1, "config: dim must be positive (got ", dim, ")");
  AGOQ_CHECK(n_layers >= 1, "config: n_layers must be positive (got ", n_layers, ")");
  AGOQ_CHECK(n_heads >= 1, "config: n_heads must be positive (got ", n_heads, ")");
  AGOQ_CHECK(dim % n_heads == 0, "config: n_heads (", n_heads, ") must divide dim (", dim, ")");
  AGOQ_CHECK(head_dim() % 2 == 0, "config: head dim (dim / n_heads = ", head_dim(),
             ") must be even for rotary embeddings");
  AGOQ_CHECK(n_kv_heads >= 1 && n_heads % n_kv_heads == 0, "config: n_kv_heads (", n_kv_heads,
             ") must divide n_heads (", n_heads, ")");
  AGOQ_CHECK(ffn_dim >= 1, "config: ffn_dim must be positive (got ", ffn_dim, ")");
  AGOQ_CHECK(max_seq_len >= 1, "config: max_seq_len must be positive (got ", max_seq_len, ")");
  // Checked for finiteness too: an inf would train, then be written as null into config.json, unloadable.
  AGOQ_CHECK(std::isfinite(rope_theta) && rope_theta > 0, "config: rope_theta must be a positive number (got ",
             rope_theta, ")");
  AGOQ_CHECK(sliding_window >= 0, "config: sliding_window must be >= 0 (got ", sliding_window, ")");
  const RopeScaling& rs = rope_scaling;
  AGOQ_CHECK(rs.type == RopeScaling::Type::none || (std::isfinite(rs.factor) && rs.factor >= 1),
             "config: rope_scaling factor must be a number >= 1 (got ", rs.factor, ")");
  AGOQ_CHECK(rs.type != RopeScaling::Type::llama3 ||
                 (std::isfinite(rs.low_freq_factor) && std::isfinite(rs.high_freq_factor) && rs.low_freq_factor > 0 &&
                  rs.high_freq_factor > rs.low_freq_factor && rs.original_max_positions >= 1),
             "config: llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and "
             "original_max_position_embeddings >= 1 (got ",
             rs.low_freq_factor, ", ", rs.high_freq_factor, ", ", rs.original_max_positions, ")");
  AGOQ_CHECK(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1, "config: norm_eps must be in (0, 1) (got ",
             norm_eps, ")");
}

const char* rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::linear: return "linear";
    case RopeScaling::Type::llama3: return "llama3";
    default: return "none";
  }
}

std::vector<double> LlamaConfig::rope_inv_freqs() const {
  const int hd = head_dim(), half = hd / 2;
  AGOQ_CHECK(sliding_window >= 0, "config: sliding_window must be >= 0 (got ", sliding_window, ")");
  const RopeScaling& rs = rope_scaling;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) {
    double inv = std::pow(double(rope_theta), -2.0 * i / hd);
    if (rs.type == RopeScaling::Type::linear) inv /= rs.factor;
    if (rs.type == RopeScaling::Type::llama3) {
      // Wavelengths longer than the original context / low_freq_factor are slowed by factor, shorter than
      // context / high_freq_factor kept; between, a linear blend in context / wavelength.
      const double wavelen = 2 * M_PI / inv, ctx = rs.original_max_positions;
      if (wavelen > ctx / rs.low_freq_factor) {
        inv /= rs.factor;
      } else if (wavelen >= ctx / rs.high_freq_factor) {
        const double smooth = (ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        inv = (1 - smooth) * inv / rs.factor + smooth * inv;
      }
    }
    f[i] = inv;
  }
  return f;
}

size_t LlamaConfig::layer_param_count() const {
  const size_t d = dim, kv = kv_dim(), f = ffn_dim;
  return 2 * d + d * d * 2 + 2 * d * kv + 3 * d * f;
}

size_t LlamaConfig::param_count() const {
  const size_t d = dim, v = vocab_size;
  return v * d * (tie_embeddings ? 1 : 2) + n_layers * layer_param_count() + d;
}

}  // namespace agoq

#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "model/ops.h"

namespace agoq {

namespace {
constexpr int kHeadChunkRows = 256;  // rows of logits alive at once in the fused head
}

LlamaModel::LlamaModel(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy)
    : cfg_(cfg),
      max_rows_(max_batch * max_seq),
      max_seq_(max_seq),
      params_((cfg.validate(), cfg), MemCategory::weights),
      grads_(cfg, MemCategory::gradients),
      store_(cfg, max_batch * max_seq, policy) {
  AGOQ_CHECK(max_batch >= 1, "batch size must be positive (got ", max_batch, ")");
  AGOQ_CHECK(max_seq >= 1 && max_seq <= cfg.max_seq_len, "sequence length ", max_seq,
             " must be between 1 and the model's max_seq_len ", cfg.max_seq_len);
  const size_t N = max_rows_, C = cfg.dim, KV = cfg.kv_dim(), F = cfg.ffn_dim, V = cfg.vocab_size;
  const int hd = cfg.head_dim();
  rope_cos_ = Buffer<float>(size_t(max_seq) * hd / 2, MemCategory::workspace);
  rope_sin_ = Buffer<float>(size_t(max_seq) * hd / 2, MemCategory::workspace);
  rope_init_tables(rope_cos_.data(), rope_sin_.data(), max_seq, hd, cfg.rope_theta);
  x_final_ = Buffer<float>(N * C, MemCategory::workspace);
  tmp_c_ = Buffer<float>(N * C, MemCategory::workspace);
  dx_ = Buffer<float>(N * C, MemCategory::workspace);
  dq_ = Buffer<float>(N * C, MemCategory::workspace);
  dk_ = Buffer<float>(N * KV, MemCategory::workspace);
  dv_ = Buffer<float>(N * KV, MemCategory::workspace);
  dgate_ = Buffer<float>(N * F, MemCategory::workspace);
  dup_ = Buffer<float>(N * F, MemCategory::workspace);
  dff_ = Buffer<float>(N * F, MemCategory::workspace);
  const size_t chunk = std::min<size_t>(N, kHeadChunkRows);
  head_norm_ = Buffer<float>(chunk * C, MemCategory::workspace);
  head_rstd_ = Buffer<float>(chunk, MemCategory::workspace);
  head_dnorm_ = Buffer<float>(chunk * C, MemCategory::workspace);
  head_logits_ = Buffer<float>(chunk * V, MemCategory::workspace);
  losses_ = Buffer<float>(N, MemCategory::workspace);
}

void LlamaModel::init_weights(uint64_t seed) {
  for (const ParamTensor& t : params_.named()) {
    // Each tensor draws from its own stream, so a tensor's values do not depend on the others' sizes.
    Rng rng(seed, std::hash<std::string>{}(t.name));
    const size_t n = t.numel();
    if (t.shape.size() == 1) std::fill(t.data, t.data + n, 1.0f);
    else for (size_t i = 0; i < n; ++i) t.data[i] = 0.02f * rng.normal();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// One decoder layer, forward. Everything backward needs is saved in the activation store.
//   x (attn_norm_in) -> RMSNorm -> q,k,v -> RoPE -> attention -> o_proj -> + x = h (mlp_norm_in)
//   h -> RMSNorm -> gate, up -> SwiGLU -> down_proj -> + h = x_next
void LlamaModel::forward_layer(int l, int B, int T, float* x_next) {
  const LayerParams& P = params_.layers[l];
  const int N = B * T, C = cfg_.dim, KV = cfg_.kv_dim(), F = cfg_.ffn_dim, H = cfg_.n_heads,
            Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim();
  ActivationStore& S = store_;

  const float* x = S.produce(l, ActSlot::attn_norm_in);  // written by the previous layer (or the embedding)
  float* rstd1 = S.produce(l, ActSlot::attn_rstd);
  float* xn = S.produce(l, ActSlot::attn_norm_out);
  rmsnorm_forward(xn, rstd1, x, P.attn_norm, N, C, cfg_.norm_eps);
  S.commit(l, ActSlot::attn_rstd, N);
  S.commit(l, ActSlot::attn_norm_out, N);

  float* q = S.produce(l, ActSlot::q);
  float* k = S.produce(l, ActSlot::k);
  float* v = S.produce(l, ActSlot::v);
  matmul_forward(q, xn, P.wq, N, C, C);
  matmul_forward(k, xn, P.wk, N, C, KV);
  matmul_forward(v, xn, P.wv, N, C, KV);
  rope_forward(q, rope_cos_.data(), rope_sin_.data(), N, T, H, hd);
  rope_forward(k, rope_cos_.data(), rope_sin_.data(), N, T, Hkv, hd);
  S.commit(l, ActSlot::q, N);
  S.commit(l, ActSlot::k, N);
  S.commit(l, ActSlot::v, N);

  float* o = S.produce(l, ActSlot::attn_out);
  float* lse = S.produce(l, ActSlot::attn_lse);
  attention_forward(o, lse, q, k, v, B, T, H, Hkv, hd);
  S.commit(l, ActSlot::attn_out, N);
  S.commit(l, ActSlot::attn_lse, N);

  float* attn_proj = tmp_c_.data();
  matmul_forward(attn_proj, o, P.wo, N, C, C);
  float* h = S.produce(l, ActSlot::mlp_norm_in);
  residual_add(h, x, attn_proj, size_t(N) * C);
  S.commit(l, ActSlot::mlp_norm_in, N);

  float* rstd2 = S.produce(l, ActSlot::mlp_rstd);
  float* hn = S.produce(l, ActSlot::mlp_norm_out);
  rmsnorm_forward(hn, rstd2, h, P.mlp_norm, N, C, cfg_.norm_eps);
  S.commit(l, ActSlot::mlp_rstd, N);
  S.commit(l, ActSlot::mlp_norm_out, N);

  float* gate = S.produce(l, ActSlot::gate);
  float* up = S.produce(l, ActSlot::up);
  matmul_forward(gate, hn, P.w_gate, N, C, F);
  matmul_forward(up, hn, P.w_up, N, C, F);
  S.commit(l, ActSlot::gate, N);
  S.commit(l, ActSlot::up, N);
  float* s = S.produce(l, ActSlot::swiglu_out);
  swiglu_forward(s, gate, up, size_t(N) * F);
  S.commit(l, ActSlot::swiglu_out, N);

  float* mlp_out = tmp_c_.data();
  matmul_forward(mlp_out, s, P.w_down, N, F, C);
  residual_add(x_next, h, mlp_out, size_t(N) * C);
}

// One decoder layer, backward. dx holds dloss/dx_next on entry and dloss/dx on exit (the residual stream's
// gradient flows through both residual connections in place).
void LlamaModel::backward_layer(int l, int B, int T, float* dx) {
  const LayerParams& P = params_.layers[l];
  LayerParams& G = grads_.layers[l];
  const int N = B * T, C = cfg_.dim, KV = cfg_.kv_dim(), F = cfg_.ffn_dim, H = cfg_.n_heads,
            Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim();
  ActivationStore& S = store_;

  // MLP: x_next = h + down(silu(gate) * up), gate/up = hn W^T, hn = rmsnorm(h)
  const float* s = S.consume(l, ActSlot::swiglu_out, N);
  matmul_backward(dff_.data(), G.w_down, dx, s, P.w_down, N, F, C);
  const float* gate = S.consume(l, ActSlot::gate, N);
  const float* up = S.consume(l, ActSlot::up, N);
  swiglu_backward(dgate_.data(), dup_.data(), dff_.data(), gate, up, size_t(N) * F);
  const float* hn = S.consume(l, ActSlot::mlp_norm_out, N);
  float* dhn = tmp_c_.data();
  matmul_backward(dhn, G.w_gate, dgate_.data(), hn, P.w_gate, N, C, F);
  matmul_backward(dhn, G.w_up, dup_.data(), hn, P.w_up, N, C, F, /*accumulate_din=*/true);
  const float* h = S.consume(l, ActSlot::mlp_norm_in, N);
  const float* rstd2 = S.consume(l, ActSlot::mlp_rstd, N);
  rmsnorm_backward(dx, G.mlp_norm, dhn, h, P.mlp_norm, rstd2, N, C);  // dx += : now dloss/dh

  // Attention: h = x + o_proj(attn(rope(q), rope(k), v)), q/k/v = xn W^T, xn = rmsnorm(x)
  const float* o = S.consume(l, ActSlot::attn_out, N);
  float* dout = tmp_c_.data();
  matmul_backward(dout, G.wo, dx, o, P.wo, N, C, C);
  const float* q = S.consume(l, ActSlot::q, N);
  const float* k = S.consume(l, ActSlot::k, N);
  const float* v = S.consume(l, ActSlot::v, N);
  const float* lse = S.consume(l, ActSlot::attn_lse, N);
  attention_backward(dq_.data(), dk_.data(), dv_.data(), dout, q, k, v, o, lse, B, T, H, Hkv, hd);
  rope_backward(dq_.data(), rope_cos_.data(), rope_sin_.data(), N, T, H, hd);
  rope_backward(dk_.data(), rope_cos_.data(), rope_sin_.data(), N, T, Hkv, hd);
  const float* xn = S.consume(l, ActSlot::attn_norm_out, N);
  float* dxn = tmp_c_.data();
  matmul_backward(dxn, G.wq, dq_.data(), xn, P.wq, N, C, C);
  matmul_backward(dxn, G.wk, dk_.data(), xn, P.wk, N, C, KV, /*accumulate_din=*/true);
  matmul_backward(dxn, G.wv, dv_.data(), xn, P.wv, N, C, KV, /*accumulate_din=*/true);
  const float* x = S.consume(l, ActSlot::attn_norm_in, N);
  const float* rstd1 = S.consume(l, ActSlot::attn_rstd, N);
  rmsnorm_backward(dx, G.attn_norm, dxn, x, P.attn_norm, rstd1, N, C);  // dx += : now dloss/dx
}

// ---------------------------------------------------------------------------------------------------------------
// The head: x -> RMSNorm -> lm_head -> cross-entropy, chunk by chunk, forward and backward fused.
float LlamaModel::head_forward_backward(const float* x, const int32_t* targets, int N, float grad_scale, float* dx) {
  const int C = cfg_.dim, V = cfg_.vocab_size;
  long counted = 0;
  for (int i = 0; i < N; ++i) counted += targets[i] >= 0;
  AGOQ_CHECK(counted > 0, "batch has no targets to compute a loss on");
  const float dloss_scale = grad_scale / float(counted);
  double loss_sum = 0;
  for (int r0 = 0; r0 < N; r0 += kHeadChunkRows) {
    const int rows = std::min(kHeadChunkRows, N - r0);
    const float* xc = x + size_t(r0) * C;
    rmsnorm_forward(head_norm_.data(), head_rstd_.data(), xc, params_.final_norm, rows, C, cfg_.norm_eps);
    matmul_forward(head_logits_.data(), head_norm_.data(), params_.lm_head, rows, C, V);
    crossentropy_forward_backward(head_logits_.data(), losses_.data() + r0, targets + r0, rows, V, dloss_scale);
    if (dx) {
      matmul_backward(head_dnorm_.data(), grads_.lm_head, head_logits_.data(), head_norm_.data(), params_.lm_head,
                      rows, C, V);
      float* dxc = dx + size_t(r0) * C;
      std::fill(dxc, dxc + size_t(rows) * C, 0.0f);
      rmsnorm_backward(dxc, grads_.final_norm, head_dnorm_.data(), xc, params_.final_norm, head_rstd_.data(), rows, C);
    }
  }
  for (int i = 0; i < N; ++i) loss_sum += losses_[i];  // fixed order: deterministic
  return float(loss_sum / double(counted));
}

void LlamaModel::forward_trunk(const int32_t* inputs, int B, int T) {
  AGOQ_CHECK(B >= 1 && T >= 1 && B * T <= max_rows_ && T <= max_seq_, "batch ", B, "x", T,
             " exceeds the model's buffers (", max_rows_ / max_seq_, "x", max_seq_, ")");
  const int N = B * T, C = cfg_.dim, V = cfg_.vocab_size;
  for (int i = 0; i < N; ++i)
    AGOQ_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id ", inputs[i], " out of range for vocab size ", V);
  embedding_forward(store_.produce(0, ActSlot::attn_norm_in), inputs, params_.embed, N, C);
  store_.commit(0, ActSlot::attn_norm_in, N);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const bool last = l + 1 == cfg_.n_layers;
    float* x_next = last ? x_final_.data() : store_.produce(l + 1, ActSlot::attn_norm_in);
    forward_layer(l, B, T, x_next);
    if (!last) store_.commit(l + 1, ActSlot::attn_norm_in, N);
  }
}

float LlamaModel::run(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale, bool backward) {
  for (int i = 0; i < B * T; ++i)
    AGOQ_CHECK(targets[i] < cfg_.vocab_size, "target id ", targets[i], " out of range for vocab size ",
               cfg_.vocab_size);
  forward_trunk(inputs, B, T);
  const float loss = head_forward_backward(x_final_.data(), targets, B * T, grad_scale, backward ? dx_.data() : nullptr);
  if (!backward) return loss;
  for (int l = cfg_.n_layers - 1; l >= 0; --l) backward_layer(l, B, T, dx_.data());
  embedding_backward(grads_.embed, dx_.data(), inputs, B * T, cfg_.dim);
  return loss;
}

float LlamaModel::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  return run(inputs, targets, B, T, grad_scale, true);
}

float LlamaModel::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) {
  return run(inputs, targets, B, T, 0.0f, false);
}

void LlamaModel::forward_last_logits(const int32_t* tokens, int T, float* logits) {
  forward_trunk(tokens, 1, T);
  const int C = cfg_.dim, V = cfg_.vocab_size;
  const float* x_last = x_final_.data() + size_t(T - 1) * C;
  rmsnorm_forward(head_norm_.data(), head_rstd_.data(), x_last, params_.final_norm, 1, C, cfg_.norm_eps);
  matmul_forward(logits, head_norm_.data(), params_.lm_head, 1, C, V);
}

}  // namespace agoq

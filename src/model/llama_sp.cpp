// The sequence-parallel layout of a tensor-parallel shard (Megatron-SP, docs/parallel.md): the residual stream
// resid_, its gradient dx_ and the norms hold this rank's n = N/T rows of the batch, rows [t·n, (t+1)·n). The
// column-parallel GEMMs (q/k/v, gate/up, lm_head) need every row: the norm output is all-gathered before them;
// the row-parallel ones (o_proj, down_proj) give partial sums of every row, reduce-scattered to each rank's rows
// before the residual add. Backward mirrors it. Attention runs on the gathered rows of the rank's heads, unchanged.
// Host memory only (the tensor group's collectives are the host's; the constructor checks).
#include <algorithm>

#include "model/llama.h"

namespace agoq {

void LlamaModel::sp_gather(const float* part, float* whole, int n) {
  tensor_->all_gather(part, whole, size_t(n) * d_.C);
}
void LlamaModel::sp_scatter(const float* whole, float* part, int n) {
  tensor_->reduce_scatter(whole, part, size_t(n) * d_.C);
}

// Forward: xn (this rank's rows) -> all-gather -> q, k, v -> attention -> o_proj -> reduce-scatter -> + x = h ->
// hn (this rank's rows) -> all-gather -> gate, up, SwiGLU, down -> reduce-scatter -> + h. sp_whole_ (N, C) holds
// the gathered norm output, then the row-parallel GEMM's partial sums; sp_part_ (n, C) their reduced rows.
void LlamaModel::forward_layer_sp(int l, int B, int T) {
  const LayerParams& P = params_.layers[l];
  const int N = B * T, n = stage().rows_held(N), C = d_.C, Q = d_.Q, R = llama_tile_rows(T, N);
  ActStore& S = active_store();
  float* whole = sp_whole_.data();
  float* mine = whole + size_t(stage().tp_rank) * n * C;  // this rank's rows of the gathered tensor
  float* rstd1 = S.fp32_data(l, ActSlot::attn_rstd);
  float* rstd2 = S.fp32_data(l, ActSlot::mlp_rstd);

  llama_tiles_for_each(n, T, R, [&](int r0, int rows) {
    const float* x = resid_.data() + size_t(r0) * C;
    float* xn = mine + size_t(r0) * C;
    be_.rmsnorm_forward(xn, rstd1 + r0, x, P.attn_norm, rows, C, cfg_.norm_eps);
    S.save_rows(l, ActSlot::attn_norm_in, r0, rows, x);
    S.save_rows(l, ActSlot::attn_norm_out, r0, rows, xn);
  });
  sp_gather(mine, whole, n);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) { qkv_forward_rows(l, T, r0, rows, whole + size_t(r0) * C); });

  attention_forward_layer(l, B, T);

  const float* o = attention_buffer(l, ActSlot::attn_out, o_);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    const float* orow = o + size_t(r0) * Q;
    S.save_rows(l, ActSlot::attn_out, r0, rows, orow);
    be_.matmul_forward(whole + size_t(r0) * C, orow, P.wo, rows, Q, C);  // partial sums of every row
  });
  sp_scatter(whole, sp_part_.data(), n);
  llama_tiles_for_each(n, T, R, [&](int r0, int rows) {
    float* h = resid_.data() + size_t(r0) * C;  // x becomes h, then x_next, in place
    be_.residual_add(h, h, sp_part_.data() + size_t(r0) * C, size_t(rows) * C);
    S.save_rows(l, ActSlot::mlp_norm_in, r0, rows, h);
    float* hn = mine + size_t(r0) * C;
    be_.rmsnorm_forward(hn, rstd2 + r0, h, P.mlp_norm, rows, C, cfg_.norm_eps);
    S.save_rows(l, ActSlot::mlp_norm_out, r0, rows, hn);
  });
  sp_gather(mine, whole, n);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    float* rows_of = whole + size_t(r0) * C;
    mlp_forward_rows(l, r0, rows, rows_of, rows_of);  // hn's rows become down's partial sums
  });
  sp_scatter(whole, sp_part_.data(), n);
  be_.residual_add(resid_.data(), resid_.data(), sp_part_.data(), size_t(n) * C);
}

// This rank's rows of a norm output (stored, or rebuilt from its input), gathered into sp_whole2_ (N, C).
void LlamaModel::norm_out_gather(int l, ActSlot in, ActSlot out, const float* rstd, const float* w, int N, int R) {
  const int n = stage().rows_held(N), C = d_.C;
  float* mine = sp_whole2_.data() + size_t(stage().tp_rank) * n * C;
  llama_tiles_for_each(n, /*T=*/n, R, [&](int r0, int rows) {  // no RoPE here: any tiles
    const float* x = active_store().load_rows(l, in, r0, rows, t_x_.data());
    const float* xn = norm_out_rows(l, out, x, rstd + r0, w, r0, rows, t_xn_.data());
    std::copy(xn, xn + size_t(rows) * C, mine + size_t(r0) * C);
  });
  sp_gather(mine, sp_whole2_.data(), n);
}

// The norm's backward on this rank's rows from dxn (n, C), reduced: dx_ += d(norm input); its weight's gradient
// covers this rank's rows only, so it is summed over the group before it is added (the weight is replicated).
void LlamaModel::norm_backward_sp(int l, ActSlot in, const float* dxn, const float* rstd, const float* w, float* dw,
                                  int n, int R) {
  const int C = d_.C;
  be_.zero(norm_dw_.data(), size_t(C));
  llama_tiles_for_each(n, /*T=*/n, R, [&](int r0, int rows) {  // no RoPE here: any tiles
    const float* x = active_store().load_rows(l, in, r0, rows, t_x_.data());
    be_.rmsnorm_backward(dx_.data() + size_t(r0) * C, norm_dw_.data(), dxn + size_t(r0) * C, x, w, rstd + r0, rows, C);
  });
  tp_sum(norm_dw_.data(), size_t(C));
  be_.residual_add(dw, dw, norm_dw_.data(), size_t(C));
}

// Backward: the mirror. dx_ (n, C) is all-gathered before each row-parallel GEMM's backward (into sp_whole_), the
// norm outputs are gathered again for the column-parallel GEMMs' weight gradients (into sp_whole2_), and the
// partial d(norm output) of every row is reduce-scattered to this rank's rows before the norm's backward.
void LlamaModel::backward_layer_sp(int l, int B, int T) {
  const LayerParams& P = params_.layers[l];
  LayerParams& G = grads_.layers[l];
  const int N = B * T, n = stage().rows_held(N), C = d_.C, R = llama_tile_rows(T, N);
  ActStore& S = active_store();
  const float* rstd1 = S.fp32_data(l, ActSlot::attn_rstd);
  const float* rstd2 = S.fp32_data(l, ActSlot::mlp_rstd);
  float* whole = sp_whole_.data();

  sp_gather(dx_.data(), whole, n);  // dloss/dx_next of every row
  norm_out_gather(l, ActSlot::mlp_norm_in, ActSlot::mlp_norm_out, rstd2, P.mlp_norm, N, R);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    float* rows_of = whole + size_t(r0) * C;
    mlp_backward_rows(l, r0, rows, rows_of, sp_whole2_.data() + size_t(r0) * C, rows_of);  // -> partial dhn
  });
  sp_scatter(whole, sp_part_.data(), n);
  norm_backward_sp(l, ActSlot::mlp_norm_in, sp_part_.data(), rstd2, P.mlp_norm, G.mlp_norm, n, R);  // dloss/dh

  sp_gather(dx_.data(), whole, n);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) { o_backward_rows(l, r0, rows, whole + size_t(r0) * C); });

  attention_backward_layer(l, B, T);

  norm_out_gather(l, ActSlot::attn_norm_in, ActSlot::attn_norm_out, rstd1, P.attn_norm, N, R);
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    qkv_backward_rows(l, T, r0, rows, sp_whole2_.data() + size_t(r0) * C, whole + size_t(r0) * C);
  });
  sp_scatter(whole, sp_part_.data(), n);
  norm_backward_sp(l, ActSlot::attn_norm_in, sp_part_.data(), rstd1, P.attn_norm, G.attn_norm, n, R);  // dloss/dx
}

// The head on this rank's rows x (n, C): the final norm, all-gathered (sp_whole_), then the lm_head and the
// cross-entropy chunk by chunk over every row (every rank computes every row's loss from the reduced statistics);
// backward: the partial d(norm output) of every row (sp_whole2_), reduce-scattered, then the norm's backward into
// dx (n, C, overwritten).
void LlamaModel::head_rows_sp(const float* x, const int32_t* targets, int N, float dloss_scale, float* dx,
                              const MicroBatchRun& run) {
  const int n = stage().rows_held(N), C = d_.C;
  float* whole = sp_whole_.data();
  float* mine = whole + size_t(stage().tp_rank) * n * C;
  be_.rmsnorm_forward(mine, head_rstd_.data(), x, params_.final_norm, n, C, cfg_.norm_eps);
  sp_gather(mine, whole, n);
  if (dx && head_pieces_) {
    head_pieces(whole, targets, N, dloss_scale, sp_whole2_.data(), run);
  } else {
    for (int r0 = 0; r0 < N; r0 += kLlamaHeadChunkRows) {
      const int rows = std::min(kLlamaHeadChunkRows, N - r0);
      head_chunk(whole + size_t(r0) * C, targets, r0, rows, dloss_scale,
                 dx ? sp_whole2_.data() + size_t(r0) * C : nullptr);
    }
  }
  if (!dx) return;
  sp_scatter(sp_whole2_.data(), sp_part_.data(), n);
  be_.zero(dx, size_t(n) * C);
  be_.zero(norm_dw_.data(), size_t(C));
  be_.rmsnorm_backward(dx, norm_dw_.data(), sp_part_.data(), x, params_.final_norm, head_rstd_.data(), n, C);
  tp_sum(norm_dw_.data(), size_t(C));
  be_.residual_add(grads_.final_norm, grads_.final_norm, norm_dw_.data(), size_t(C));
}

}  // namespace agoq

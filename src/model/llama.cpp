#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/gemm_bf16.h"  // gemm_bf16_weight_block_rows
#include "model/ops.h"        // rope_init_tables

namespace agoq {

namespace {
// Rows per tile: 512 was the fastest on SmolLM's shape with 2,048-token windows (scoring, bf16, 2 threads): 13%
// faster than whole sequences (whose elementwise ops stream from L3), 28% faster than 256 (smaller GEMMs).
constexpr int kTileRows = 512;

// Attention runs over the whole batch from fp32: a slot needs an fp32 workspace when some layer of the stage
// stores it in another format.
bool attention_workspace_needed(const ActPolicy& policy, const ModelStage& stage, ActSlot s) {
  for (int l = stage.first_layer; l < stage.end_layer; ++l)
    if (!(policy.at(l, s).stored && policy.at(l, s).format.kind == QuantKind::fp32)) return true;
  return false;
}
}  // namespace

int llama_tile_rows(int T, int N) { return std::min(N, T >= kTileRows ? kTileRows : T * (kTileRows / T)); }

std::vector<LlamaModel::WorkspaceBuffer> LlamaModel::workspace_list(const LlamaConfig& cfg, int max_batch, int max_seq,
                                                                    const ActPolicy& policy, const ModelStage& stage,
                                                                    bool head_pieces) {
  using M = LlamaModel;
  const ShardDims d = model_shard_dims(cfg, stage);
  const size_t N = size_t(max_batch) * max_seq, C = d.C, Q = d.Q, KV = d.KV, F = d.F, V = d.V;
  const size_t n = size_t(stage.rows_held(int(N))), R = size_t(llama_tile_rows(max_seq, int(N)));
  const size_t table = size_t(max_seq) * cfg.head_dim() / 2;
  std::vector<WorkspaceBuffer> list = {{&M::rope_cos_, table}, {&M::rope_sin_, table},  // (max_seq, hd/2)
                                       {&M::resid_, n * C},                             // the residual stream
                                       {&M::t_xn_, R * C},     {&M::t_gate_, R * F},
                                       {&M::t_up_, R * F}};  // forward's tiles
  // With backward: SwiGLU's output, the residual stream's gradient, attention's input gradients, backward's tiles.
  if (policy.backward)
    list.insert(list.end(), {{&M::t_s_, R * F},
                             {&M::dx_, n * C},
                             {&M::dq_, N * Q},
                             {&M::dk_, N * KV},
                             {&M::dv_, N * KV},
                             {&M::do_, N * Q},
                             {&M::t_x_, R * C},
                             {&M::t_o_, R * Q},
                             {&M::t_ds_, R * F},
                             {&M::t_dgate_, R * F},
                             {&M::t_dup_, R * F}});
  else  // scoring's shared contexts: each row's RoPE at its own position (run_use)
    list.insert(list.end(), {{&M::rope_at_cos_, N * cfg.head_dim() / 2}, {&M::rope_at_sin_, N * cfg.head_dim() / 2}});
  // Attention reads its inputs and output in fp32 for the whole batch: a buffer where the slot is stored otherwise.
  const std::pair<BackendBuffer<float> M::*, std::pair<ActSlot, size_t>> attention[] = {
      {&M::q_, {ActSlot::q, Q}},
      {&M::k_, {ActSlot::k, KV}},
      {&M::v_, {ActSlot::v, KV}},
      {&M::o_, {ActSlot::attn_out, Q}}};
  for (const auto& [member, slot_cols] : attention)
    list.push_back(
        {member, attention_workspace_needed(policy, stage, slot_cols.first) ? N * slot_cols.second : 0, true});
  if (stage.sp)
    list.insert(list.end(),
                {{&M::sp_whole_, N * C}, {&M::sp_whole2_, N * C}, {&M::sp_part_, n * C}, {&M::norm_dw_, C}});
  else list.push_back({&M::t_c_, R * C});
  if (!stage.head) return list;
  const size_t chunk = std::min<size_t>(N, kLlamaHeadChunkRows);
  if (stage.sp) list.push_back({&M::head_rstd_, n});
  else
    list.insert(list.end(),
                {{&M::head_norm_, chunk * C}, {&M::head_rstd_, head_pieces ? N : chunk}, {&M::head_dnorm_, chunk * C}});
  list.insert(list.end(), {{&M::head_logits_, chunk * V}, {&M::head_stats_, 3 * chunk}, {&M::losses_, N}});
  if (!head_pieces) return list;
  if (!stage.sp) list.insert(list.end(), {{&M::head_xn_, N * C}, {&M::head_dxn_, N * C}});
  list.insert(list.end(), {{&M::head_stats_all_, 3 * N}, {&M::head_dw_, std::min<size_t>(V, kLlamaHeadPieceRows) * C}});
  return list;
}

size_t llama_workspace_bytes(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy,
                             const ModelStage& stage, bool lm_head_pieces) {
  size_t floats = 0;
  const bool head_pieces = stage.head && lm_head_pieces && cfg.tie_embeddings;
  for (const auto& b : LlamaModel::workspace_list(cfg, max_batch, max_seq, policy, stage, head_pieces))
    floats += b.floats;
  return floats * sizeof(float);
}

// Every GEMM of a training step (forward and backward, layer tiles of R rows, head chunks), keep in step with the
// calls below: the largest input (scratch 0) and output gradient (scratch 1) rounded to bf16, and each weight read.
LlamaGemmBf16Bytes llama_gemm_bf16_bytes(const LlamaConfig& cfg, int max_batch, int max_seq, const ModelStage& stage,
                                         bool lm_head_pieces, Bf16Weights copies) {
  const ShardDims d = model_shard_dims(cfg, stage);
  const size_t N = size_t(max_batch) * max_seq, C = d.C, Q = d.Q, KV = d.KV, F = d.F, V = d.V;
  const size_t R = size_t(llama_tile_rows(max_seq, int(N))), layers = size_t(stage.end_layer - stage.first_layer);
  size_t weights = layers * (2 * Q * C + 2 * KV * C + 3 * F * C);  // wq, wo; wk, wv; w_gate, w_up, w_down
  // The largest block of a weight a GEMM rounds at once (Bf16Weights::per_gemm): wq/wo, wk/wv, the MLP's three.
  auto block = [](size_t rows, size_t cols) { return gemm_bf16_weight_block_rows(rows, cols) * cols; };
  size_t largest = layers > 0 ? std::max({block(Q, C), block(C, Q), block(KV, C), block(F, C), block(C, F)}) : 0;
  size_t in = R * std::max({C, F, Q}), dout = R * std::max({C, F, Q, KV});
  if (stage.head) {
    const size_t chunk = std::min<size_t>(N, kLlamaHeadChunkRows);
    const bool pieces = lm_head_pieces && cfg.tie_embeddings;
    weights += V * C;
    largest = std::max(largest, block(V, C));  // the forward reads the whole lm_head, also with pieces
    in = std::max(in, chunk * C);
    dout = std::max(dout, chunk * (pieces ? std::min<size_t>(V, kLlamaHeadPieceRows) : V));
  }
  if (copies == Bf16Weights::per_gemm) return {0, (in + dout + largest) * sizeof(uint16_t)};
  return {weights * sizeof(uint16_t), (in + dout) * sizeof(uint16_t)};
}

LlamaModel::LlamaModel(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy,
                       const ModelStage& stage, int in_flight, const GradStoreView& grad_store_view,
                       TensorGroup* tensor, ModelBackend& backend)
    : cfg_(cfg),
      d_(model_shard_dims(cfg, stage)),
      tensor_(stage.tp > 1 ? tensor : nullptr),
      be_(backend),
      max_rows_(max_batch * max_seq),
      max_seq_(max_seq) {
  cfg.validate();
  const std::vector<ParamSegment>& segments = grad_store_view.segments;
  const bool sparse_embedding =
      std::any_of(segments.begin(), segments.end(), [](const ParamSegment& g) { return g.data == nullptr; });
  grad_rows_ = sparse_embedding ? grad_store_view.rows : nullptr;
  head_pieces_ = stage.head && cfg.tie_embeddings && sparse_embedding;
  AGOQ_CHECK(be_.host_memory() || (stage.tp == 1 && !sparse_embedding), "a model on ", mem_device_name(be_.device()),
             " runs unsharded (tp 1), with its gradients in device memory (its own or a store's)");
  AGOQ_CHECK(!sparse_embedding || grad_store_view.rows,
             "the gradient storage leaves the embedding out and takes no sparse embedding gradient (internal)");
  for (ModelOp op :
       {ModelOp::crossentropy_shard_max, ModelOp::crossentropy_shard_exp, ModelOp::crossentropy_shard_finish})
    AGOQ_CHECK(stage.tp == 1 || !stage.head || be_.supports(op), "a sharded head needs ", model_op_name(op),
               ", which the ", mem_device_name(be_.device()), " backend does not have");
  if (be_.host_memory()) {  // the flat buffers as ParamSet owns them (the memory model counts them so)
    params_ = ParamSet(cfg, stage, MemCategory::weights);
  } else {
    params_mem_ = be_.buffer<float>(model_stage_param_count(cfg, stage), MemCategory::weights);
    params_ = ParamSet(cfg, stage, {{0, params_mem_.size(), params_mem_.data()}});
  }
  if (!policy.backward) {
    AGOQ_CHECK(segments.empty(), "a forward-only model writes no gradients (internal)");  // grads_ stays empty
  } else if (be_.host_memory() || !segments.empty()) {
    grads_ = segments.empty() ? ParamSet(cfg, stage, MemCategory::gradients) : ParamSet(cfg, stage, segments);
  } else {
    grads_mem_ = be_.buffer<float>(model_stage_param_count(cfg, stage), MemCategory::gradients);
    grads_ = ParamSet(cfg, stage, {{0, grads_mem_.size(), grads_mem_.data()}});
  }
  AGOQ_CHECK(max_batch >= 1, "batch size must be positive (got ", max_batch, ")");
  AGOQ_CHECK(max_seq >= 1 && max_seq <= cfg.max_seq_len, "sequence length ", max_seq,
             " must be between 1 and the model's max_seq_len ", cfg.max_seq_len);
  AGOQ_CHECK(cfg.sliding_window == 0 || max_seq <= cfg.sliding_window, "sequence length ", max_seq,
             " is beyond the model's sliding_window ", cfg.sliding_window,
             " (agoq's attention is exact only while the window holds the whole sequence)");
  AGOQ_CHECK(in_flight >= 1, "micro-batches in flight must be >= 1 (got ", in_flight, ")");
  AGOQ_CHECK(stage.tp == 1 || (tensor && tensor->size() == stage.tp && tensor->rank() == stage.tp_rank),
             "tensor-parallel shard ", stage.tp_rank, " of ", stage.tp, " needs its group of ", stage.tp,
             " ranks (internal)");
  AGOQ_CHECK(!stage.sp || stage.tp > 1, "sequence parallelism needs tensor-parallel ranks (internal)");
  if (stage.sp) model_sp_check(stage.tp, max_batch, max_seq);
  for (const WorkspaceBuffer& b : workspace_list(cfg, max_batch, max_seq, policy, stage, head_pieces_))
    if (!b.with_policy && b.floats > 0) this->*b.member = be_.buffer<float>(b.floats, MemCategory::workspace);
  {  // the tables are made on the host (in double precision) for every backend
    const size_t table = rope_cos_.size();
    std::vector<float> cos(table), sin(table);
    rope_init_tables(cos.data(), sin.data(), max_seq, cfg.rope_inv_freqs());
    be_.upload(rope_cos_.data(), cos.data(), table * sizeof(float));
    be_.upload(rope_sin_.data(), sin.data(), table * sizeof(float));
  }
  if (!be_.host_memory()) {
    inputs_dev_ = be_.buffer<int32_t>(size_t(max_rows_), MemCategory::workspace, "tokens");
    targets_dev_ = be_.buffer<int32_t>(size_t(max_rows_), MemCategory::workspace, "tokens");
  }
  stores_allocate(policy, in_flight);
}

// One store per micro-batch in flight, and the fp32 attention workspaces that slots stored in another format
// need (attention runs over the whole batch at once).
void LlamaModel::stores_allocate(const ActPolicy& policy, int count) {
  stores_.clear();
  for (int i = 0; i < count; ++i) stores_.push_back(be_.store_make(cfg_, max_rows_, policy, stage()));
  active_ = 0;
  for (const WorkspaceBuffer& b : workspace_list(cfg_, max_rows_ / max_seq_, max_seq_, policy, stage(), head_pieces_)) {
    if (!b.with_policy) continue;
    BackendBuffer<float>& buf = this->*b.member;
    if (b.floats == 0) buf.reset();
    else if (buf.empty()) buf = be_.buffer<float>(b.floats, MemCategory::workspace);
  }
}

ActStore& LlamaModel::store(int i) {
  AGOQ_CHECK(i >= 0 && i < store_count(), "activation store ", i, " of ", store_count(), " (internal)");
  return *stores_[i];
}

void LlamaModel::set_policy(const ActPolicy& policy) { stores_allocate(policy, store_count()); }

void LlamaModel::init_weights(uint64_t seed) {
  const int T = stage().tp, r = stage().tp_rank;
  ParamSet host;  // a device backend's values are made on the host, then uploaded
  if (!be_.host_memory()) host = ParamSet(cfg_, stage(), MemCategory::workspace, "init");
  ParamSet& made = be_.host_memory() ? params_ : host;
  for (const ParamTensor& t : made.named()) {
    // Each tensor draws from its own stream, so a tensor's values do not depend on the others' sizes.
    Rng rng(seed, std::hash<std::string>{}(t.name));
    const size_t n = t.numel();
    if (t.shape.size() == 1) {
      std::fill(t.data, t.data + n, 1.0f);
      continue;
    }
    // A shard walks the whole tensor's stream and keeps its slice (unsigned: indices before it wrap around).
    const TensorSlice s = model_tensor_slice(t.shape, t.split_dim, T, r);
    for (size_t i = 0; i < s.whole_rows; ++i)
      for (size_t j = 0; j < s.whole_cols; ++j) {
        const float x = 0.02f * rng.normal();
        if (i - s.row0 < s.rows && j - s.col0 < s.cols) t.data[(i - s.row0) * s.cols + (j - s.col0)] = x;
      }
  }
  if (!be_.host_memory()) be_.upload(params_flat(), host.data(), host.size() * sizeof(float));
  be_.weights_changed();
}

float* LlamaModel::attention_buffer(int l, ActSlot s, const BackendBuffer<float>& workspace) {
  return active_store().is_fp32(l, s) ? active_store().fp32_data(l, s) : workspace.data();
}

float* LlamaModel::slot_out_rows(int l, ActSlot s, int r0, const BackendBuffer<float>& tile) {
  ActStore& S = active_store();
  return S.is_fp32(l, s) ? S.fp32_data(l, s) + size_t(r0) * S.cols(s) : tile.data();
}

const float* LlamaModel::norm_out_rows(int l, ActSlot out, const float* x, const float* rstd, const float* w, int r0,
                                       int rows, float* buf) {
  if (active_store().stored(l, out)) return active_store().load_rows(l, out, r0, rows, buf);
  be_.rmsnorm_apply(buf, x, rstd, w, rows, d_.C);  // not stored: rebuilt, bit for bit
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------
// The pieces of a layer both layouts share, on rows [r0, r0 + rows) of the batch (tiles of whole sequences).

// xn -> q, k, v (RoPE applied), saved.
void LlamaModel::qkv_forward_rows(int l, int T, int r0, int rows, const float* xn) {
  const LayerParams& P = params_.layers[l];
  ActStore& S = active_store();
  const int C = d_.C, Q = d_.Q, KV = d_.KV;
  float* qr = attention_buffer(l, ActSlot::q, q_) + size_t(r0) * Q;
  float* kr = attention_buffer(l, ActSlot::k, k_) + size_t(r0) * KV;
  float* vr = attention_buffer(l, ActSlot::v, v_) + size_t(r0) * KV;
  be_.matmul_forward_shared(xn, rows, C, {{qr, P.wq, Q}, {kr, P.wk, KV}, {vr, P.wv, KV}});
  // The tables from the tile's first position (llama_tiles_for_each), or each row's own (gaps: run_use).
  const size_t at = size_t(gaps_ ? r0 : r0 % T) * (d_.hd / 2);
  const float *cos = (gaps_ ? rope_at_cos_ : rope_cos_).data() + at,
              *sin = (gaps_ ? rope_at_sin_ : rope_sin_).data() + at;
  const int period = gaps_ ? rows : T;
  be_.rope_forward(qr, cos, sin, rows, period, d_.H, d_.hd);
  be_.rope_forward(kr, cos, sin, rows, period, d_.Hkv, d_.hd);
  S.save_rows(l, ActSlot::q, r0, rows, qr);
  S.save_rows(l, ActSlot::k, r0, rows, kr);
  S.save_rows(l, ActSlot::v, r0, rows, vr);
}

// hn -> gate, up -> s = SwiGLU (saved) -> out = down(s) (a partial sum on a shard). out may alias hn.
void LlamaModel::mlp_forward_rows(int l, int r0, int rows, const float* hn, float* out) {
  const LayerParams& P = params_.layers[l];
  ActStore& S = active_store();
  const int C = d_.C, F = d_.F;
  if (!S.policy().backward)  // nothing saved: the backend may fuse the MLP
    return be_.mlp_forward_only(out, hn, P.w_gate, P.w_up, P.w_down, rows, C, F, t_gate_.data(), t_up_.data());
  float* gate = slot_out_rows(l, ActSlot::gate, r0, t_gate_);
  float* up = slot_out_rows(l, ActSlot::up, r0, t_up_);
  be_.matmul_forward_shared(hn, rows, C, {{gate, P.w_gate, F}, {up, P.w_up, F}});
  S.save_rows(l, ActSlot::gate, r0, rows, gate);
  S.save_rows(l, ActSlot::up, r0, rows, up);
  float* s = slot_out_rows(l, ActSlot::swiglu_out, r0, t_s_);
  be_.swiglu_forward(s, gate, up, size_t(rows) * F);
  S.save_rows(l, ActSlot::swiglu_out, r0, rows, s);
  be_.matmul_forward(out, s, P.w_down, rows, F, C);
}

// The MLP's backward from dout = dloss/d(down output): weight gradients, and dhn (OVERWRITES; a partial sum on a
// shard; may alias dout).
void LlamaModel::mlp_backward_rows(int l, int r0, int rows, const float* dout, const float* hn, float* dhn) {
  const LayerParams& P = params_.layers[l];
  LayerParams& G = grads_.layers[l];
  ActStore& S = active_store();
  const int C = d_.C, F = d_.F;
  const size_t nf = size_t(rows) * F;
  const float* gate = S.load_rows(l, ActSlot::gate, r0, rows, t_gate_.data());
  const float* up = S.load_rows(l, ActSlot::up, r0, rows, t_up_.data());
  const float* s =
      S.stored(l, ActSlot::swiglu_out) ? S.load_rows(l, ActSlot::swiglu_out, r0, rows, t_s_.data()) : t_s_.data();
  if (!S.stored(l, ActSlot::swiglu_out)) be_.swiglu_forward(t_s_.data(), gate, up, nf);
  be_.matmul_backward(t_ds_.data(), G.w_down, dout, s, P.w_down, rows, F, C, /*accumulate_din=*/false);
  be_.swiglu_backward(t_dgate_.data(), t_dup_.data(), t_ds_.data(), gate, up, nf);
  be_.matmul_backward_shared(dhn, hn, rows, C,
                             {{G.w_gate, t_dgate_.data(), P.w_gate, F}, {G.w_up, t_dup_.data(), P.w_up, F}});
}

// o_proj's backward from dh = dloss/d(o_proj output): its weight gradient and do_'s rows.
void LlamaModel::o_backward_rows(int l, int r0, int rows, const float* dh) {
  const float* o = active_store().load_rows(l, ActSlot::attn_out, r0, rows, t_o_.data());
  be_.matmul_backward(do_.data() + size_t(r0) * d_.Q, grads_.layers[l].wo, dh, o, params_.layers[l].wo, rows, d_.Q,
                      d_.C, /*accumulate_din=*/false);
}

// Attention's backward over the whole batch, from its high-precision saved tensors, into dq_, dk_, dv_.
void LlamaModel::attention_backward_layer(int l, int B, int T) {
  ActStore& S = active_store();
  auto full = [&](ActSlot s, const BackendBuffer<float>& ws) {
    return S.load_rows(l, s, 0, size_t(B) * T, ws.data());  // fp32: in place; else decoded into the workspace
  };
  const float* q = full(ActSlot::q, q_);
  const float* k = full(ActSlot::k, k_);
  const float* v = full(ActSlot::v, v_);
  const float* o = full(ActSlot::attn_out, o_);
  be_.attention_backward(dq_.data(), dk_.data(), dv_.data(), do_.data(), q, k, v, o, S.fp32_data(l, ActSlot::attn_lse),
                         B, T, d_.H, d_.Hkv, d_.hd, doc_start_);
}

// RoPE's and q/k/v's backward from dq_, dk_, dv_'s rows: weight gradients, and dxn (OVERWRITES; a partial sum on a
// shard).
void LlamaModel::qkv_backward_rows(int l, int T, int r0, int rows, const float* xn, float* dxn) {
  const LayerParams& P = params_.layers[l];
  LayerParams& G = grads_.layers[l];
  const int C = d_.C, Q = d_.Q, KV = d_.KV;
  float *dq = dq_.data() + size_t(r0) * Q, *dk = dk_.data() + size_t(r0) * KV, *dv = dv_.data() + size_t(r0) * KV;
  const size_t at = size_t(r0 % T) * (d_.hd / 2);  // the tile's first position (llama_tiles_for_each)
  be_.rope_backward(dq, rope_cos_.data() + at, rope_sin_.data() + at, rows, T, d_.H, d_.hd);
  be_.rope_backward(dk, rope_cos_.data() + at, rope_sin_.data() + at, rows, T, d_.Hkv, d_.hd);
  be_.matmul_backward_shared(dxn, xn, rows, C, {{G.wq, dq, P.wq, Q}, {G.wk, dk, P.wk, KV}, {G.wv, dv, P.wv, KV}});
}

// ---------------------------------------------------------------------------------------------------------------
// One decoder layer, forward, on the residual stream resid_ (N, C), in place:
//   x -> RMSNorm -> q,k,v -> RoPE -> attention -> o_proj -> + x = h -> RMSNorm -> gate, up -> SwiGLU -> down -> + h
// Row-wise work runs tile by tile; each saved tensor is stored (quantized) while its tile is still in cache.
// A tensor-parallel shard has its heads and MLP units (q/k/v, gate/up column-parallel); the row-parallel o_proj
// and down_proj give partial sums, added over the group before the residual add. (Sequence-parallel: llama_sp.cpp.)
void LlamaModel::forward_layer(int l, int B, int T) {
  forward_layer_attention(l, B, T);
  const int N = B * T;
  llama_tiles_for_each(N, T, llama_tile_rows(T, N), [&](int r0, int rows) { forward_layer_mlp_rows(l, r0, rows); });
}

// x -> xn = RMSNorm(x) -> q, k, v (RoPE applied), tile by tile; then attention over the whole batch.
void LlamaModel::forward_layer_attention(int l, int B, int T) {
  const LayerParams& P = params_.layers[l];
  const int N = B * T, C = d_.C;
  ActStore& S = active_store();
  float* rstd1 = S.fp32_data(l, ActSlot::attn_rstd);
  llama_tiles_for_each(N, T, llama_tile_rows(T, N), [&](int r0, int rows) {
    const float* x = resid_.data() + size_t(r0) * C;
    float* xn = slot_out_rows(l, ActSlot::attn_norm_out, r0, t_xn_);
    be_.rmsnorm_forward(xn, rstd1 + r0, x, P.attn_norm, rows, C, cfg_.norm_eps);
    S.save_rows(l, ActSlot::attn_norm_in, r0, rows, x);
    S.save_rows(l, ActSlot::attn_norm_out, r0, rows, xn);
    qkv_forward_rows(l, T, r0, rows, xn);
  });
  attention_forward_layer(l, B, T);
}

// Rows [r0, r0 + rows): o -> h = x + o_proj(o) -> hn = RMSNorm(h) -> gate, up -> s = SwiGLU -> x_next = h + down(s).
void LlamaModel::forward_layer_mlp_rows(int l, int r0, int rows) {
  const LayerParams& P = params_.layers[l];
  const int C = d_.C, Q = d_.Q;
  ActStore& S = active_store();
  const float* orow = attention_buffer(l, ActSlot::attn_out, o_) + size_t(r0) * Q;
  S.save_rows(l, ActSlot::attn_out, r0, rows, orow);
  float* h = resid_.data() + size_t(r0) * C;  // x becomes h, then x_next, in place
  be_.matmul_forward(t_c_.data(), orow, P.wo, rows, Q, C);
  tp_sum(t_c_.data(), size_t(rows) * C);
  be_.residual_add(h, h, t_c_.data(), size_t(rows) * C);
  S.save_rows(l, ActSlot::mlp_norm_in, r0, rows, h);
  float* hn = slot_out_rows(l, ActSlot::mlp_norm_out, r0, t_xn_);
  be_.rmsnorm_forward(hn, S.fp32_data(l, ActSlot::mlp_rstd) + r0, h, P.mlp_norm, rows, C, cfg_.norm_eps);
  S.save_rows(l, ActSlot::mlp_norm_out, r0, rows, hn);
  mlp_forward_rows(l, r0, rows, hn, t_c_.data());
  tp_sum(t_c_.data(), size_t(rows) * C);
  be_.residual_add(h, h, t_c_.data(), size_t(rows) * C);
}

void LlamaModel::attention_forward_layer(int l, int B, int T) {
  if (gaps_)
    return be_.attention_forward_gaps(
        attention_buffer(l, ActSlot::attn_out, o_), active_store().fp32_data(l, ActSlot::attn_lse),
        attention_buffer(l, ActSlot::q, q_), attention_buffer(l, ActSlot::k, k_), attention_buffer(l, ActSlot::v, v_),
        B, T, d_.H, d_.Hkv, d_.hd, doc_start_, gaps_);
  be_.attention_forward(attention_buffer(l, ActSlot::attn_out, o_), active_store().fp32_data(l, ActSlot::attn_lse),
                        attention_buffer(l, ActSlot::q, q_), attention_buffer(l, ActSlot::k, k_),
                        attention_buffer(l, ActSlot::v, v_), B, T, d_.H, d_.Hkv, d_.hd, doc_start_);
}

// One decoder layer, backward. dx_ holds dloss/dx_next on entry and dloss/dx on exit (the residual stream's
// gradient flows through both residual connections in place). Saved tensors are read a tile at a time. On a
// tensor-parallel shard the gradients of the column-parallel projections' input (the norm outputs) are partial
// sums, added over the group before the norm's backward; dx_ stays the same on every rank of the group.
void LlamaModel::backward_layer(int l, int B, int T) {
  const LayerParams& P = params_.layers[l];
  LayerParams& G = grads_.layers[l];
  const int N = B * T, C = d_.C, R = llama_tile_rows(T, N);
  ActStore& S = active_store();
  const float* rstd1 = S.fp32_data(l, ActSlot::attn_rstd);
  const float* rstd2 = S.fp32_data(l, ActSlot::mlp_rstd);

  // MLP and o_proj, tile by tile: x_next = h + down(silu(gate) * up), gate/up = hn W^T, hn = RMSNorm(h),
  // h = x + o_proj(o).
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    float* dx = dx_.data() + size_t(r0) * C;
    const float* h = S.load_rows(l, ActSlot::mlp_norm_in, r0, rows, t_x_.data());
    const float* hn = norm_out_rows(l, ActSlot::mlp_norm_out, h, rstd2 + r0, P.mlp_norm, r0, rows, t_xn_.data());
    float* dhn = t_c_.data();
    mlp_backward_rows(l, r0, rows, dx, hn, dhn);
    tp_sum(dhn, size_t(rows) * C);
    be_.rmsnorm_backward(dx, G.mlp_norm, dhn, h, P.mlp_norm, rstd2 + r0, rows, C);  // dx += : now dloss/dh
    o_backward_rows(l, r0, rows, dx);
  });

  attention_backward_layer(l, B, T);

  // q/k/v projections and the first RMSNorm, tile by tile: q,k,v = rope(xn W^T), xn = RMSNorm(x).
  llama_tiles_for_each(N, T, R, [&](int r0, int rows) {
    float* dx = dx_.data() + size_t(r0) * C;
    const float* x = S.load_rows(l, ActSlot::attn_norm_in, r0, rows, t_x_.data());
    const float* xn = norm_out_rows(l, ActSlot::attn_norm_out, x, rstd1 + r0, P.attn_norm, r0, rows, t_xn_.data());
    float* dxn = t_c_.data();
    qkv_backward_rows(l, T, r0, rows, xn, dxn);
    tp_sum(dxn, size_t(rows) * C);
    be_.rmsnorm_backward(dx, G.attn_norm, dxn, x, P.attn_norm, rstd1 + r0, rows, C);  // dx += : now dloss/dx
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The head: x -> RMSNorm -> lm_head -> cross-entropy, chunk by chunk, forward and backward fused. A shard's
// lm_head holds its vocabulary rows: the cross-entropy reduces each row's max, sum of exponentials and target logit
// over the group (the logits are never gathered), and the lm_head's input gradient is a partial sum.
float LlamaModel::head_forward_backward(const float* x, const int32_t* targets, int N, const MicroBatchRun& run,
                                        float* dx) {
  const int C = d_.C;
  long counted = 0;
  for (int i = 0; i < N; ++i) counted += targets[i] >= 0;
  AGOQ_CHECK(counted > 0 || run.loss_tokens > 0, "batch has no targets to compute a loss on");
  const double divisor = run.loss_tokens > 0 ? run.loss_tokens : double(counted);
  const float dloss_scale =
      run.loss_tokens > 0 ? float(double(run.grad_scale) / run.loss_tokens) : run.grad_scale / float(counted);
  targets = ids_on_backend(targets, targets_dev_, N);
  if (stage().sp) {
    head_rows_sp(x, targets, N, dloss_scale, dx, run);
  } else if (dx && head_pieces_) {  // every piece reads every row: the whole batch's norm output at once
    be_.rmsnorm_forward(head_xn_.data(), head_rstd_.data(), x, params_.final_norm, N, C, cfg_.norm_eps);
    head_pieces(head_xn_.data(), targets, N, dloss_scale, head_dxn_.data(), run);
    tp_sum(head_dxn_.data(), size_t(N) * C);
    be_.zero(dx, size_t(N) * C);
    be_.rmsnorm_backward(dx, grads_.final_norm, head_dxn_.data(), x, params_.final_norm, head_rstd_.data(), N, C);
  } else {
    for (int r0 = 0; r0 < N; r0 += kLlamaHeadChunkRows) {
      const int rows = std::min(kLlamaHeadChunkRows, N - r0);
      const float* xc = x + size_t(r0) * C;
      be_.rmsnorm_forward(head_norm_.data(), head_rstd_.data(), xc, params_.final_norm, rows, C, cfg_.norm_eps);
      head_chunk(head_norm_.data(), targets, r0, rows, dloss_scale, dx ? head_dnorm_.data() : nullptr);
      if (!dx) continue;
      tp_sum(head_dnorm_.data(), size_t(rows) * C);
      float* dxc = dx + size_t(r0) * C;
      be_.zero(dxc, size_t(rows) * C);
      be_.rmsnorm_backward(dxc, grads_.final_norm, head_dnorm_.data(), xc, params_.final_norm, head_rstd_.data(), rows,
                           C);
    }
  }
  std::vector<float> copied;
  const float* losses = losses_.data();
  if (!be_.host_memory())
    copied.resize(N), be_.download(copied.data(), losses, N * sizeof(float)), losses = copied.data();
  double loss_sum = 0;
  for (int i = 0; i < N; ++i) loss_sum += losses[i];  // fixed order: deterministic
  return float(loss_sum / divisor);
}

// Rows [r0, r0 + rows) of the head from their final-norm output xn: lm_head -> cross-entropy into losses_; with
// dxn, the lm_head's weight gradient and dxn (rows, C) = dloss/dxn (a partial sum on a shard).
void LlamaModel::head_chunk(const float* xn, const int32_t* targets, int r0, int rows, float dloss_scale, float* dxn) {
  const int C = d_.C, V = d_.V;
  float* logits = head_logits_.data();
  be_.matmul_forward(logits, xn, params_.lm_head, rows, C, V);
  float *row_max = head_stats_.data(), *sums = row_max + rows;
  if (!tensor_) {
    be_.crossentropy_forward_backward(logits, losses_.data() + r0, targets + r0, rows, V, dloss_scale, row_max);
  } else {  // the statistics of the vocabulary shards reduced between the phases
    be_.crossentropy_shard_max(logits, rows, V, row_max);
    tp_max(row_max, size_t(rows));
    be_.crossentropy_shard_exp(logits, targets + r0, rows, V, d_.v_begin, row_max, sums);
    tp_sum(sums, 2 * size_t(rows));
    be_.crossentropy_shard_finish(logits, losses_.data() + r0, targets + r0, rows, V, d_.v_begin, row_max, sums,
                                  dloss_scale);
  }
  if (dxn)
    be_.matmul_backward(dxn, grads_.lm_head, head_logits_.data(), xn, params_.lm_head, rows, C, V,
                        /*accumulate_din=*/false);
}

// So that no (V, C) fp32 gradient exists: every row's cross-entropy statistics first (the shard phases 1-2,
// reduced over the shards), then piece by piece the logits again for all rows, their gradient (phase 3 from the
// whole rows' statistics) and the piece's weight gradient, handed out before the next piece. One lm_head GEMM
// more than the fused head.
void LlamaModel::head_pieces(const float* xn, const int32_t* targets, int N, float dloss_scale, float* dxn,
                             const MicroBatchRun& run) {
  const int C = d_.C, V = d_.V, chunk = kLlamaHeadChunkRows;
  float *logits = head_logits_.data(), *stats = head_stats_all_.data();  // chunk r0's at 3 * r0: max, then sums
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    float *row_max = stats + 3 * size_t(r0), *sums = row_max + rows;
    be_.matmul_forward(logits, xn + size_t(r0) * C, params_.lm_head, rows, C, V);
    be_.crossentropy_shard_max(logits, rows, V, row_max);
    tp_max(row_max, size_t(rows));
    be_.crossentropy_shard_exp(logits, targets + r0, rows, V, d_.v_begin, row_max, sums);
    tp_sum(sums, 2 * size_t(rows));
  }
  for (int v0 = 0; v0 < V; v0 += kLlamaHeadPieceRows) {
    const int vp = std::min(kLlamaHeadPieceRows, V - v0);
    const float* w = params_.lm_head + size_t(v0) * C;
    float* dw = head_dw_.data();
    be_.zero(dw, size_t(vp) * C);
    for (int r0 = 0; r0 < N; r0 += chunk) {
      const int rows = std::min(chunk, N - r0);
      const float *x = xn + size_t(r0) * C, *row_max = stats + 3 * size_t(r0), *sums = row_max + rows;
      be_.matmul_forward(logits, x, w, rows, C, vp);
      be_.crossentropy_shard_exp(logits, targets + r0, rows, vp, d_.v_begin + v0, row_max, head_stats_.data());
      be_.crossentropy_shard_finish(logits, losses_.data() + r0, targets + r0, rows, vp, d_.v_begin + v0, row_max, sums,
                                    dloss_scale);
      be_.matmul_backward(dxn + size_t(r0) * C, dw, logits, x, w, rows, C, vp, /*accumulate_din=*/v0 > 0);
    }
    grad_rows_->lm_head_fold(dw, v0, vp, head_tokens_, N, run.grad_first, run.grad_seed);
  }
}

void LlamaModel::check_batch(int B, int T) const {
  AGOQ_CHECK(B >= 1 && T >= 1 && B * T <= max_rows_ && T <= max_seq_, "batch ", B, "x", T,
             " exceeds the model's buffers (", max_rows_ / max_seq_, "x", max_seq_, ")");
  if (stage().sp) model_sp_check(stage().tp, B, T);
}

void LlamaModel::run_use(const MicroBatchRun& run, int B, int T) {
  store(run.store);  // checks the index
  active_ = run.store;
  doc_start_ = nullptr, gaps_ = nullptr;
  AGOQ_CHECK(!run.gaps || run.doc_start, "gaps need document starts");
  if (!run.doc_start) return;
  attention_check_doc_start(run.doc_start, B, T, run.gaps);
  if (run.gaps) return gaps_use(run, B, T);
  if (!be_.host_memory() && !docs_dev_.data())  // packed data only: the first pass with documents makes it
    docs_dev_ = be_.buffer<int32_t>(size_t(max_rows_), MemCategory::workspace, "tokens");
  doc_start_ = ids_on_backend(run.doc_start, docs_dev_, B * T);
}

bool LlamaModel::shares_contexts() const { return !rope_at_cos_.empty() && be_.attention_gaps_supported(); }

// Shared contexts: row i's RoPE at position i − (its gap's length), from the tables of positions 0 … max_seq.
void LlamaModel::gaps_use(const MicroBatchRun& run, int B, int T) {
  AGOQ_CHECK(shares_contexts() && be_.host_memory(),
             "shared contexts need a forward-only model on a backend whose attention has gaps (the CPU's)");
  const size_t half = size_t(d_.hd / 2);
  for (int r = 0; r < B * T; ++r) {
    const int32_t* g = run.gaps + 2 * size_t(r);
    const size_t from = size_t(r % T - (g[1] - g[0])) * half, to = size_t(r) * half;
    std::copy_n(rope_cos_.data() + from, half, rope_at_cos_.data() + to);
    std::copy_n(rope_sin_.data() + from, half, rope_at_sin_.data() + to);
  }
  doc_start_ = run.doc_start, gaps_ = run.gaps;
}

void LlamaModel::stage_forward(const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  stage_forward_begin(inputs, B, T, run);
  for (int l = stage().first_layer; l < stage().end_layer; ++l) stage_forward_layer(l, B, T);
}

void LlamaModel::stage_forward_begin(const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  check_batch(B, T);
  run_use(run, B, T);
  active_store().set_seed(run.act_seed);
  const int N = B * T, V = cfg_.vocab_size;
  head_tokens_ = inputs;
  if (!stage().embed) return;
  for (int i = 0; i < N; ++i)
    AGOQ_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id ", inputs[i], " out of range for vocab size ", V);
  inputs = ids_on_backend(inputs, inputs_dev_, N);
  // Each token's row is on one shard, zeros on the others: summed (sequence-parallel: each rank's rows of the sum).
  if (stage().sp) {
    be_.embedding_forward(sp_whole_.data(), inputs, params_.embed, N, d_.C, d_.v_begin, d_.V);
    sp_scatter(sp_whole_.data(), resid_.data(), stage().rows_held(N));
  } else {
    be_.embedding_forward(resid_.data(), inputs, params_.embed, N, d_.C, d_.v_begin, d_.V);
    tp_sum(resid_.data(), size_t(N) * d_.C);
  }
}

void LlamaModel::stage_forward_layer(int l, int B, int T) {
  AGOQ_CHECK(l >= stage().first_layer && l < stage().end_layer, "layer ", l, " is not on this stage (internal)");
  if (stage().sp) forward_layer_sp(l, B, T);
  else forward_layer(l, B, T);
}

float LlamaModel::stage_head(const int32_t* targets, int B, int T, const MicroBatchRun& run, bool backward) {
  AGOQ_CHECK(stage().head, "stage_head on a pipeline stage without the head");
  for (int i = 0; i < B * T; ++i)
    AGOQ_CHECK(targets[i] < cfg_.vocab_size, "target id ", targets[i], " out of range for vocab size ",
               cfg_.vocab_size);
  if (backward) backward_check();
  const float loss = head_forward_backward(resid_.data(), targets, B * T, run, backward ? dx_.data() : nullptr);
  return loss;
}

void LlamaModel::stage_backward(const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  stage_backward_begin(B, T, run);
  for (int part : backward_parts()) stage_backward_part(part, inputs, B, T, run);
}

std::vector<int> LlamaModel::backward_parts() const {
  std::vector<int> parts;
  for (int l = stage().end_layer - 1; l >= stage().first_layer; --l) parts.push_back(l);
  if (stage().embed) parts.push_back(-1);
  return parts;
}

void LlamaModel::stage_backward_begin(int B, int T, const MicroBatchRun& run) {
  check_batch(B, T);
  run_use(run, B, T);
  backward_check();
}

void LlamaModel::backward_check() {
  AGOQ_CHECK(active_store().policy().backward, "a forward-only model (", active_store().policy().name,
             ") has no backward pass (internal)");
}

void LlamaModel::stage_backward_part(int part, const int32_t* inputs, int B, int T, const MicroBatchRun& run) {
  if (part >= 0) {
    AGOQ_CHECK(part >= stage().first_layer && part < stage().end_layer, "layer ", part,
               " is not on this stage (internal)");
    if (stage().sp) backward_layer_sp(part, B, T);
    else backward_layer(part, B, T);
    return;
  }
  AGOQ_CHECK(part == -1 && stage().embed, "backward part ", part, " is not on this stage (internal)");
  const float* dout = dx_.data();  // every row's gradient: each shard adds those of its tokens
  if (stage().sp) sp_gather(dx_.data(), sp_whole_.data(), stage().rows_held(B * T)), dout = sp_whole_.data();
  if (grads_.embed)
    be_.embedding_backward(grads_.embed, dout, ids_on_backend(inputs, inputs_dev_, B * T), B * T, d_.C, d_.v_begin,
                           d_.V);
  else grad_rows_->embedding_fold(dout, inputs, B * T, run.grad_first, run.grad_seed);
}

float LlamaModel::run_whole(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run,
                            bool backward) {
  AGOQ_CHECK(stage().whole(cfg_), "forward_backward needs the whole model (a pipeline stage runs stage by stage)");
  stage_forward(inputs, B, T, run);
  const float loss = stage_head(targets, B, T, run, backward);
  if (backward) stage_backward(inputs, B, T, run);
  return loss;
}

float LlamaModel::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                   const MicroBatchRun& run) {
  return run_whole(inputs, targets, B, T, run, true);
}

float LlamaModel::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run) {
  return run_whole(inputs, targets, B, T, run, false);
}

void LlamaModel::forward_last_logits(const int32_t* tokens, int T, float* logits) {
  AGOQ_CHECK(stage().whole(cfg_) && stage().tp == 1, "sampling needs the whole model");
  stage_forward(tokens, 1, T, {});
  const int C = cfg_.dim, V = cfg_.vocab_size;
  const float* x_last = resid_.data() + size_t(T - 1) * C;
  be_.rmsnorm_forward(head_norm_.data(), head_rstd_.data(), x_last, params_.final_norm, 1, C, cfg_.norm_eps);
  float* out = be_.host_memory() ? logits : head_logits_.data();
  be_.matmul_forward(out, head_norm_.data(), params_.lm_head, 1, C, V);
  be_.download(logits, out, size_t(V) * sizeof(float));
}

// Only the rows with a target go through the last layer's MLP and the head (a multiple-choice window's
// continuations are a few of its rows, and the vocabulary GEMM costs as much as several layers).
void LlamaModel::forward_target_logprobs(const int32_t* inputs, const int32_t* targets, int B, int T,
                                         const MicroBatchRun& run, float* logprob, uint8_t* greedy) {
  AGOQ_CHECK(stage().whole(cfg_) && stage().tp == 1 && !stage().sp && be_.host_memory(),
             "scoring needs the whole model on the host");
  const int C = cfg_.dim, V = cfg_.vocab_size, N = B * T;
  std::vector<int> rows;
  for (int i = 0; i < N; ++i) {
    AGOQ_CHECK(targets[i] < V, "target id ", targets[i], " out of range for vocab size ", V);
    if (targets[i] >= 0) rows.push_back(i);
  }
  forward_rows_kept(inputs, B, T, run, rows);
  float* logits = head_logits_.data();
  float* row_max = head_stats_.data();  // then each row's sum and target logit (cross-entropy's phases 1 and 2)
  int32_t chunk_targets[kLlamaHeadChunkRows];
  for (size_t r0 = 0; r0 < rows.size(); r0 += kLlamaHeadChunkRows) {
    const int n = int(std::min<size_t>(kLlamaHeadChunkRows, rows.size() - r0));
    for (int j = 0; j < n; ++j) chunk_targets[j] = targets[rows[r0 + j]];
    be_.rmsnorm_forward(head_norm_.data(), head_rstd_.data(), resid_.data() + r0 * C, params_.final_norm, n, C,
                        cfg_.norm_eps);
    be_.matmul_forward(logits, head_norm_.data(), params_.lm_head, n, C, V);
    be_.crossentropy_shard_max(logits, n, V, row_max);  // cross-entropy's phase 1
    for (int j = 0; j < n; ++j) {  // greedy: the target is the first maximum, as torch.argmax picks it
      const float* l = logits + size_t(j) * V;
      const int t = chunk_targets[j];
      greedy[rows[r0 + j]] = uint8_t(l[t] == row_max[j] && std::find(l, l + t, row_max[j]) == l + t);
    }
    // log p = target logit − max − log Σ exp(logit − max): the training loss's vectorized phase 2, its fp32 sums.
    float* sums = row_max + n;
    be_.crossentropy_shard_exp(logits, chunk_targets, n, V, 0, row_max, sums);
    for (int j = 0; j < n; ++j)
      logprob[rows[r0 + j]] = float(double(sums[2 * j + 1]) - double(row_max[j]) - std::log(double(sums[2 * j])));
  }
}

// The forward pass for the given rows (increasing): every layer on every row, except the last layer's o_proj and
// MLP, which run on those rows only, moved to the front of the residual stream in their order (row j <= rows[j], so
// the moves go forward in place). The last layer's attention still reads every row's k and v. Scoring keeps a few
// rows of each window (LAMBADA: the last word's), so this skips most of one layer's GEMMs.
void LlamaModel::forward_rows_kept(const int32_t* inputs, int B, int T, const MicroBatchRun& run,
                                   const std::vector<int>& rows) {
  const int last = cfg_.n_layers - 1, C = d_.C, Q = d_.Q, n = int(rows.size());
  stage_forward_begin(inputs, B, T, run);
  for (int l = 0; l < last; ++l) forward_layer(l, B, T);
  forward_layer_attention(last, B, T);
  float* o = attention_buffer(last, ActSlot::attn_out, o_);
  for (int j = 0; j < n; ++j) {
    if (rows[j] == j) continue;
    std::memcpy(resid_.data() + size_t(j) * C, resid_.data() + size_t(rows[j]) * C, size_t(C) * sizeof(float));
    std::memcpy(o + size_t(j) * Q, o + size_t(rows[j]) * Q, size_t(Q) * sizeof(float));
  }
  const int R = llama_tile_rows(T, B * T);
  for (int r0 = 0; r0 < n; r0 += R) forward_layer_mlp_rows(last, r0, std::min(R, n - r0));
}

const int32_t* LlamaModel::ids_on_backend(const int32_t* host, const BackendBuffer<int32_t>& dev, int n) {
  if (be_.host_memory()) return host;
  be_.upload(dev.data(), host, size_t(n) * sizeof(int32_t));
  return dev.data();
}

}  // namespace agoq

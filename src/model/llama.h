// The LLaMA model: parameters, their gradients, the activation store and the forward/backward pass that wires
// the ops (model/ops.h) together, on the device of its backend (model/backend.h: the CPU's ops, or the GPU's). Read
// llama.cpp top to bottom: layer forward, layer backward, the fused head; then llama_sp.cpp, the sequence-parallel
// layout of a tensor-parallel shard.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "arch/config.h"
#include "arch/params.h"
#include "arch/stage.h"
#include "core/memory.h"
#include "model/backend.h"
#include "model/grad_store_view.h"
#include "model/tensor_group.h"

namespace agoq {

// What one micro-batch's pass through the model needs besides its tokens, handed down by whoever runs it (a plain
// loop, parallel/pipeline.h) from whoever owns the step (parallel/step_cpu.h builds one per micro-batch). Data
// only: the model calls nobody back; a caller that acts on gradients as backward finishes them runs the backward
// part by part (stage_backward_part below).
struct MicroBatchRun {
  uint64_t act_seed = 0;    // stochastic rounding of the activations forward saves (the selected store's seed)
  float grad_scale = 1.0f;  // backward adds grad_scale * d(mean loss)/d(param) into grads()
  // The mean loss is the sum of the counted targets' losses over loss_tokens; 0: over this micro-batch's own
  // count. A step normalising per counted token over its whole global batch (loss masks: micro-batches count
  // different numbers) sets the step's count here and grad_scale 1.
  double loss_tokens = 0;
  // Which of the model's activation stores forward writes and backward reads (LlamaModel::store_count of them: a
  // pipeline's micro-batches in flight each have their own).
  int store = 0;
  // (B, T) on the host: where each row's document begins in its sequence (model/attention.h's document masking
  // of packed examples); null: one document per sequence. Valid during the pass.
  const int32_t* doc_start = nullptr;
  // (B, T, 2) on the host, with doc_start: the keys each row skips (model/attention.h's shared contexts), for a
  // model that shares_contexts(); null: none.
  const int32_t* gaps = nullptr;
  // The micro-batch's gradients in a gradient store that folds them into 8 bits (model/grad_store_view.h's rows):
  // whether it is the step's first (the store overwrites), and their stochastic rounding.
  bool grad_first = true;
  uint64_t grad_seed = 0;
};

constexpr int kLlamaHeadChunkRows = 256;   // rows of logits alive at once in the fused head
constexpr int kLlamaHeadPieceRows = 8192;  // vocabulary rows per piece of an lm_head gradient handed out in pieces

// Rows per tile of a layer's row-wise work, for sequences of length T in a batch of N rows: about 512 rows (a
// tile's activations stay near the core between the ops that pass them on; llama.cpp's kTileRows says how it was
// chosen), whole sequences when they are that short.
int llama_tile_rows(int T, int N);
// f(r0, rows) for the tiles of rows [0, n), at most R rows each: a tile holds whole sequences or lies inside one,
// so RoPE's positions in a tile run on from r0 % T.
template <class Fn>
void llama_tiles_for_each(int n, int T, int R, Fn&& f) {
  for (int r0 = 0, rows; r0 < n; r0 += rows) {
    rows = std::min(R, n - r0);
    if (R < T) rows = std::min(rows, T - r0 % T);
    f(r0, rows);
  }
}
// Bytes of the workspace buffers (MemCategory::workspace) of LlamaModel(cfg, max_batch, max_seq, policy, stage, ...)
// and of its set_policy(policy), for the stage's tensor-parallel shard; attention's per-call scratch is
// attention_scratch_bytes (model/attention.h). lm_head_pieces: the gradient storage leaves a tied lm_head out.
size_t llama_workspace_bytes(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy,
                             const ModelStage& stage, bool lm_head_pieces = false);
// What bf16 GEMMs (model_backend_cpu_bf16) add to a training's memory: the bf16 copies of the weights its GEMMs
// read (weights; with Bf16Weights::per_gemm none, and a third scratch for the largest weight a GEMM reads) and the
// two scratch buffers its activations and output gradients are rounded into, at the largest product's size
// (workspace).
struct LlamaGemmBf16Bytes {
  size_t weights = 0, workspace = 0;
};
LlamaGemmBf16Bytes llama_gemm_bf16_bytes(const LlamaConfig& cfg, int max_batch, int max_seq, const ModelStage& stage,
                                         bool lm_head_pieces = false, Bf16Weights copies = Bf16Weights::cached);

class LlamaModel {
 public:
  // Buffers are sized for micro-batches of up to max_batch sequences of up to max_seq tokens.
  LlamaModel(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy)
      : LlamaModel(cfg, max_batch, max_seq, policy, model_stage_whole(cfg), 1) {}
  // A pipeline stage's part of the model, with activation stores for `in_flight` micro-batches. Backward writes
  // its gradients into `grad_store_view` (a gradient store's segments and sparse sink, model/grad_store_view.h); empty:
  // into one full fp32 buffer the model owns. A tensor-parallel shard (stage.tp > 1) joins the other shards through
  // `tensor`, the group of stage.tp ranks in which it is rank stage.tp_rank (docs/parallel.md: the collectives per
  // layer). `backend`: where the model computes and its buffers live (model/backend.h). Parameters, gradients, stores
  // and workspaces are that device's memory; token ids, targets and the returned losses are the host's. A device
  // backend runs unsharded (tp 1), its gradients in device memory (its own buffer, or a store's without a sparse
  // embedding).
  LlamaModel(const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy, const ModelStage& stage,
             int in_flight, const GradStoreView& grad_store_view = {}, TensorGroup* tensor = nullptr,
             ModelBackend& backend = model_backend_cpu());
  // The whole model on `backend`.
  LlamaModel(ModelBackend& backend, const LlamaConfig& cfg, int max_batch, int max_seq, const ActPolicy& policy)
      : LlamaModel(cfg, max_batch, max_seq, policy, model_stage_whole(cfg), 1, {}, nullptr, backend) {}

  const LlamaConfig& config() const { return cfg_; }
  const ModelStage& stage() const { return params_.stage(); }
  ModelBackend& backend() { return be_; }
  // Views into the backend's memory (on the host backend, params() owns its flat buffer as before).
  ParamSet& params() { return params_; }
  ParamSet& grads() { return grads_; }
  // The flat layout of the parameters and of the gradients (model_stage_param_count values) on the backend; the
  // gradients' is null when a gradient store holds them (grad_store_view).
  float* params_flat() { return params_.data() ? params_.data() : params_mem_.data(); }
  float* grads_flat() { return grads_.data() ? grads_.data() : grads_mem_.data(); }
  // Activation store i: one per micro-batch in flight, which a micro-batch names (MicroBatchRun::store). On the host
  // backend a model/act_store_cpu.h CpuActStore.
  ActStore& store(int i = 0);
  int store_count() const { return int(stores_.size()); }
  // Replaces the activation policy (re-planned bits): the stores are reallocated, their contents are lost.
  void set_policy(const ActPolicy& policy);

  // Hugging Face's initialisation: every matrix ~ N(0, 0.02), norm weights 1. A shard holds its part of the
  // whole model's values (so any grid starts from the same weights), on any backend.
  void init_weights(uint64_t seed);

  // One micro-batch: forward, loss, backward. Adds run.grad_scale * d(mean loss)/d(param) into grads().
  // inputs/targets: (B, T) token ids; targets < 0 are ignored. Returns the mean loss over counted targets.
  float forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run = {});
  // Forward only: mean loss over the targets (no gradients, store contents unspecified afterwards).
  float forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run = {});
  // Logits (V, host) of the last position of one sequence of T tokens (T <= max_seq), for sampling.
  void forward_last_logits(const int32_t* tokens, int T, float* logits);
  // Forward only, for scoring (evaltask/): for each row i of the (B, T) batch with targets[i] >= 0, logprob[i] =
  // log p(targets[i] | the tokens before it in its document) and greedy[i] = 1 when targets[i] is the argmax of the
  // logits (the first on ties), else 0; other rows are left as they are. The whole model on the host backend.
  void forward_target_logprobs(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run,
                               float* logprob, uint8_t* greedy);
  // Whether a pass may have gaps (MicroBatchRun::gaps): a forward-only model on the CPU.
  bool shares_contexts() const;

  // ---- a pipeline stage's pieces (parallel/pipeline.h); forward_backward is stage_forward, stage_head and
  // stage_backward in a row on the whole model, with the same run ----
  // The stage's input: the previous stage's output (B*T, C; sequence-parallel: this rank's stage().rows_held(B*T)
  // rows) is written here before stage_forward (not on the first stage, which embeds token ids). The same shape
  // for stage_output, stage_output_grad and stage_input_grad.
  float* stage_input() { return resid_.data(); }
  // Forward through the stage's layers into the selected store (seeded with run.act_seed); the result is
  // stage_output() (B*T, C). Part by part: stage_forward_begin (the checks, the store, the first stage's
  // embedding), then stage_forward_layer(l) for l in stage().first_layer .. end_layer-1.
  void stage_forward(const int32_t* inputs, int B, int T, const MicroBatchRun& run);
  void stage_forward_begin(const int32_t* inputs, int B, int T, const MicroBatchRun& run);
  void stage_forward_layer(int l, int B, int T);
  const float* stage_output() const { return resid_.data(); }
  // Last stage: loss of stage_output(); with backward, also its gradient, which stage_backward then starts from.
  float stage_head(const int32_t* targets, int B, int T, const MicroBatchRun& run, bool backward);
  // dloss/d(stage output) is written here before stage_backward (not on the last stage: stage_head writes it).
  float* stage_output_grad() { return dx_.data(); }
  // Backward through the stage's layers from the selected store (and the embedding on the first stage, which
  // needs the same inputs as forward). The result is stage_input_grad() (B*T, C).
  void stage_backward(const int32_t* inputs, int B, int T, const MicroBatchRun& run);
  // The same part by part, so a caller acts on each part's finished gradients before the next runs (a step folds
  // and reduces them, a pipeline lets its transfers move): stage_backward_begin, then stage_backward_part(p) for
  // p in backward_parts(), which numbers them as the gradient units do (model_grad_unit_of_layer, arch/params.h):
  // the stage's layers from its last, then -1, the embedding, on the first stage. The head's part (n_layers) is
  // final when stage_head(..., backward = true) returns.
  std::vector<int> backward_parts() const;
  void stage_backward_begin(int B, int T, const MicroBatchRun& run);
  void stage_backward_part(int part, const int32_t* inputs, int B, int T, const MicroBatchRun& run);
  const float* stage_input_grad() const { return dx_.data(); }

 private:
  // One of the model's fp32 workspace buffers (MemCategory::workspace) and its size for the model's shapes. The
  // attention slots' buffers come and go with the activation policy (stores_allocate); the others are made once.
  struct WorkspaceBuffer {
    BackendBuffer<float> LlamaModel::*member;
    size_t floats;
    bool with_policy = false;
  };
  // Every workspace buffer, each once: the constructor and stores_allocate make them, llama_workspace_bytes sums
  // them. head_pieces: the lm_head's gradient goes out in vocabulary pieces (head_pieces_).
  static std::vector<WorkspaceBuffer> workspace_list(const LlamaConfig& cfg, int max_batch, int max_seq,
                                                     const ActPolicy& policy, const ModelStage& stage,
                                                     bool head_pieces);
  friend size_t llama_workspace_bytes(const LlamaConfig&, int, int, const ActPolicy&, const ModelStage&, bool);
  void forward_layer(int l, int B, int T);  // forward_layer_attention, then forward_layer_mlp_rows tile by tile
  void forward_layer_attention(int l, int B, int T);     // norm, q/k/v and attention over all rows
  void forward_layer_mlp_rows(int l, int r0, int rows);  // o_proj, residual, norm, MLP, residual, on these rows
  void backward_layer(int l, int B, int T);
  // Final norm -> lm_head -> cross-entropy, in chunks of rows so the (N, V) logits never exist; when dx is
  // given it also runs the backward of those three (dx = dloss/dx_final) and accumulates their weight gradients.
  float head_forward_backward(const float* x, const int32_t* targets, int N, const MicroBatchRun& run, float* dx);
  // The run's activation store (active_) and its document starts where the backend's attention reads them
  // (doc_start_), checked.
  void run_use(const MicroBatchRun& run, int B, int T);
  void gaps_use(const MicroBatchRun& run, int B, int T);  // and the gaps (gaps_), with each row's RoPE
  ActStore& active_store() { return *stores_[active_]; }
  void check_batch(int B, int T) const;
  void backward_check();  // the active store's policy keeps what a backward pass reads
  void stores_allocate(const ActPolicy& policy, int count);
  float run_whole(const int32_t* inputs, const int32_t* targets, int B, int T, const MicroBatchRun& run, bool backward);
  void forward_rows_kept(const int32_t* inputs, int B, int T, const MicroBatchRun& run, const std::vector<int>& rows);
  // fp32 view of an attention slot for the whole batch: the stored tensor when fp32, else the workspace buffer.
  float* attention_buffer(int l, ActSlot s, const BackendBuffer<float>& workspace);
  // Where a producer writes rows from r0 of a slot: straight into an fp32 slot, else into its tile buffer (then
  // save_rows stores the tile).
  float* slot_out_rows(int l, ActSlot s, int r0, const BackendBuffer<float>& tile);
  // Host token ids (n) where the backend's ops read them: themselves on the host, else copied into `dev`.
  const int32_t* ids_on_backend(const int32_t* host, const BackendBuffer<int32_t>& dev, int n);
  // A norm output's rows: the stored slot `out`, or rebuilt from its input x and rstd into buf.
  const float* norm_out_rows(int l, ActSlot out, const float* x, const float* rstd, const float* w, int r0, int rows,
                             float* buf);
  // The pieces of a layer both layouts share, on rows [r0, r0 + rows) of the batch (llama.cpp says what each does).
  void qkv_forward_rows(int l, int T, int r0, int rows, const float* xn);
  void attention_forward_layer(int l, int B, int T);
  void mlp_forward_rows(int l, int r0, int rows, const float* hn, float* out);
  void mlp_backward_rows(int l, int r0, int rows, const float* dout, const float* hn, float* dhn);
  void o_backward_rows(int l, int r0, int rows, const float* dh);
  void attention_backward_layer(int l, int B, int T);
  void qkv_backward_rows(int l, int T, int r0, int rows, const float* xn, float* dxn);
  // Rows [r0, r0 + rows) of the head from their final-norm output (llama.cpp).
  void head_chunk(const float* xn, const int32_t* targets, int r0, int rows, float dloss_scale, float* dxn);
  // The head's backward with the lm_head's weight gradient in vocabulary pieces (head_pieces_): from the final-norm
  // output of all N rows, dxn (N, C) and the pieces, into the gradient storage's rows sink.
  void head_pieces(const float* xn, const int32_t* targets, int N, float dloss_scale, float* dxn,
                   const MicroBatchRun& run);
  // The sequence-parallel layout (stage().sp, llama_sp.cpp): layer, head and their collectives.
  void forward_layer_sp(int l, int B, int T);
  void backward_layer_sp(int l, int B, int T);
  void head_rows_sp(const float* x, const int32_t* targets, int N, float dloss_scale, float* dx,
                    const MicroBatchRun& run);
  void norm_out_gather(int l, ActSlot in, ActSlot out, const float* rstd, const float* w, int N, int R);
  void norm_backward_sp(int l, ActSlot in, const float* dxn, const float* rstd, const float* w, float* dw, int n,
                        int R);
  void sp_gather(const float* part, float* whole, int n);  // n rows of C per rank
  void sp_scatter(const float* whole, float* part, int n);
  // The tensor-parallel reductions (no-ops on an unsharded model).
  void tp_sum(float* x, size_t n) {
    if (tensor_) tensor_->sum(x, n);
  }
  void tp_max(float* x, size_t n) {
    if (tensor_) tensor_->max(x, n);
  }

  LlamaConfig cfg_;
  ShardDims d_;  // the widths of this rank's shard
  TensorGroup* tensor_;
  ModelBackend& be_;
  int max_rows_, max_seq_;
  BackendBuffer<float> params_mem_, grads_mem_;  // a device backend's flat parameters and gradients
  ParamSet params_, grads_;
  std::vector<std::unique_ptr<ActStore>> stores_;
  int active_ = 0;                                   // the store of the micro-batch running
  BackendBuffer<int32_t> inputs_dev_, targets_dev_;  // (N) a device backend's copy of the token ids
  BackendBuffer<int32_t> docs_dev_;                  // (N) and of the document starts (made when first needed)
  const int32_t* doc_start_ = nullptr;               // the pass's document starts on the backend, or null
  const int32_t* gaps_ = nullptr;                    // the pass's gaps (host), or null
  BackendBuffer<float> rope_cos_, rope_sin_;         // (max_seq, hd/2)
  BackendBuffer<float> rope_at_cos_, rope_at_sin_;   // forward-only: (N, hd/2) each row's, for a pass with gaps
  // Whole-batch workspace, shapes for N = B*T rows (widths of the shard: d_); n = stage().rows_held(N).
  BackendBuffer<float> resid_;              // (n, C)  the residual stream, updated in place layer by layer
  BackendBuffer<float> dx_;                 // (n, C)  its gradient
  BackendBuffer<float> q_, k_, v_, o_;      // attention inputs/output in fp32 when their slots are not fp32
  BackendBuffer<float> dq_, dk_, dv_, do_;  // (N, Q), (N, KV), (N, KV), (N, Q)
  // Tile workspace: a few rows at a time. (R, C): x, xn, c; (R, Q): o; (R, F): the MLP's.
  BackendBuffer<float> t_x_, t_xn_, t_c_, t_o_;
  BackendBuffer<float> t_gate_, t_up_, t_s_, t_ds_, t_dgate_, t_dup_;
  // Sequence-parallel only: (N, C) the gathered norm output / the row-parallel GEMMs' partial sums; (N, C) the
  // gathered norm output in backward; (n, C) the reduce-scatter's rows; (C) a norm's weight gradient.
  BackendBuffer<float> sp_whole_, sp_whole2_, sp_part_, norm_dw_;
  BackendBuffer<float> head_norm_, head_rstd_, head_dnorm_;  // (chunk, C), (chunk; sp: n), (chunk, C); sp: rstd only
  BackendBuffer<float> head_logits_;                         // (chunk, V)
  BackendBuffer<float> head_stats_;  // (chunk, 3): the cross-entropy's row max, sum, target logit
  // The lm_head's gradient in pieces (a tied lm_head the gradient storage leaves out): the whole batch's norm output
  // and its gradient (N, C; not sp, where sp_whole_/sp_whole2_ serve), head_rstd_ then (N); every row's statistics
  // (3N, chunk by chunk as head_stats_), a piece's weight gradient (kLlamaHeadPieceRows, C); the input ids.
  bool head_pieces_ = false;
  GradRowsSink* grad_rows_ = nullptr;  // the gradient storage's sink, where the embedding's gradient is sparse
  BackendBuffer<float> head_xn_, head_dxn_, head_stats_all_, head_dw_;
  const int32_t* head_tokens_ = nullptr;
  BackendBuffer<float> losses_;  // (N)
};

}  // namespace agoq

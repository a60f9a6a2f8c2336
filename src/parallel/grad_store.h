// Gradient units and the gradient store of data-parallel training (docs/parallel.md).
//
// A unit is a part of the flat parameter layout whose gradients backward finishes at one moment: the embedding,
// each decoder layer, the final norm with an untied lm_head; on a pipeline stage only the parts it holds. Units
// tile the layout in forward order (GradBuckets' "layers"); the step's unit_ready(layer's unit) announces unit
// model_grad_unit_of_layer(stage, layer).
//
// The store owns the memory backward writes gradients into and is given to the model (LlamaModel's grad_store_view):
// - fp32: one full-size buffer in which the micro-batches accumulate;
// - q8: each unit's accumulation buffer is INT8 codes + fp32 block scales (quant/grad_q8.h), and backward writes
//   into a per-unit fp32 scratch that holds one unit at a time (plus the embedding's when embeddings are tied, as
//   the lm_head adds into it first); each finished unit is folded into its 8-bit buffer (dequantize -> add ->
//   requantize) and the scratch zeroed. The fp32 gradient of the whole stage is never allocated.
//   Untied, the embedding's gradient comes in sparse form (a token's output gradient per row, to embedding_fold:
//   the store is its storage's sink, model/grad_store_view.h) and is folded in pieces of whole vocabulary rows that fit
//   the scratch sized for the other units: each piece's tokens are scattered into the scratch and accumulated into the
//   piece's blocks. Later passes (the reduction, the optimizer) read the embedding piece by piece too, so on a
//   pipeline's first stage no fp32 buffer of the embedding's size exists (a vocabulary shard is 2-3x a decoder layer).
//   Tied, with lm_head_pieces, the same holds on the one stage with both ends: the head hands its weight gradient
//   over in vocabulary pieces (lm_head_fold); the blocks no input token of the micro-batch touches
//   are final then and folded at once, the few others kept in fp32 until the sparse embedding gradient adds into
//   them. Each block is still rounded once per micro-batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "arch/params.h"
#include "comm/grad_buckets.h"
#include "model/grad_store_view.h"
#include "quant/grad_q8.h"

namespace agoq {

// The store's precision (`--grad-store fp32|q8`). A choice apart from GradReduce (comm/allreduce_q8.h): what stays
// resident between micro-batches, not how ranks sum; every combination of the two is valid.
enum class GradStoreKind : uint8_t { fp32, q8 };

struct GradStoreOptions {
  GradStoreKind kind = GradStoreKind::fp32;
  int block = 256;  // q8 block: the store's codes, and the q8 reduction's messages and ZeRO's shards that match them
  QuantRounding rounding = QuantRounding::stochastic;  // of the q8 store's accumulation
  // q8, tied embeddings (`--lm-head-grad pieces`): no fp32 scratch of the embedding's size; the model's head
  // computes its weight gradient piece by piece (one more lm_head GEMM). max_tokens: a micro-batch's B * T.
  bool lm_head_pieces = false;
  size_t max_tokens = 0;
};

// The units of a stage's flat layout (ParamSet's), in forward order (they tile [0, model_stage_param_count)).
std::vector<GradRange> grad_units_of(const LlamaConfig& cfg, const ModelStage& stage);
// Values of the q8 store's fp32 scratch on a stage (what GradStore allocates; the memory model counts it).
size_t grad_store_scratch_floats(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& opts);

// Every unit's pieces (GradStore::pieces) on a stage, for a store with these options.
std::vector<std::vector<GradRange>> grad_store_pieces(const LlamaConfig& cfg, const ModelStage& stage,
                                                      const GradStoreOptions& opts);

class GradStore final : public GradRowsSink {
 public:
  GradStore(const LlamaConfig& cfg, const ModelStage& stage, const GradStoreOptions& opts);

  bool q8() const { return opts_.kind == GradStoreKind::q8; }
  int block() const { return opts_.block; }
  const ModelStage& stage() const { return stage_; }
  const std::vector<GradRange>& units() const { return units_; }
  size_t size() const { return units_.empty() ? 0 : units_.back().end; }  // of the flat layout
  // Where the model's backward writes: the full buffer (fp32), or each unit's scratch (q8; untied, the embedding
  // nowhere: its gradient comes to embedding_fold, this store being the storage's rows sink).
  GradStoreView model_storage();
  // The parts of unit u that are folded, reduced and read one at a time, relative to the unit: the whole unit, or
  // (q8, untied) the embedding's pieces of whole vocabulary rows and whole blocks.
  const std::vector<GradRange>& pieces(int u) const { return pieces_[u]; }
  const std::vector<std::vector<GradRange>>& pieces() const { return pieces_; }  // every unit's

  // Before a step's first backward: what backward adds into starts from zero.
  void step_begin();
  // Unit u's gradient of one micro-batch is final. q8: folds the scratch into the 8-bit buffer (`first`: the buffer
  // starts from this gradient; seed: the micro-batch's rounding stream) and zeroes the scratch. A non-finite sum
  // poisons its block (scale NaN), which the step's norm check catches. fp32: nothing, it accumulated in place.
  // q8 untied embedding: nothing, embedding_fold did it.
  void unit_ready(int u, bool first, uint64_t seed);
  // q8, untied: one micro-batch's embedding gradient in sparse form (model/grad_store_view.h) folded piece by piece,
  // with the bits unit_ready gives the same gradient written densely.
  void embedding_fold(const float* dout, const int32_t* tokens, int rows, bool first, uint64_t seed) override;
  // q8, tied, lm_head_pieces: one micro-batch's lm_head gradient for vocabulary rows [v0, v0 + rows) of the
  // shard (model/grad_store_view.h; dw: the model's buffer, left unspecified), `tokens` its n input ids. Blocks none
  // of the tokens' rows touch are folded now, the others kept for embedding_fold.
  void lm_head_fold(float* dw, int v0, int rows, const int32_t* tokens, int n, bool first, uint64_t seed) override;
  // Piece p (of pieces(u)) of unit u's accumulated gradient as fp32, its values at [0, p.size()): in place (fp32),
  // or dequantized into the scratch (q8; valid until the next call).
  float* unit_fp32(int u, GradRange p);
  // fp32: the full buffer, every unit in place (buckets reduce in it).
  float* fp32_data() { return full_.data(); }
  // Sum of squares of everything stored (q8: from the codes, without an fp32 pass).
  double sum_squares() const;

  // q8: unit u's 8-bit buffer, and storing fp32 values of its piece p (e.g. a reduced gradient) back into it,
  // rounding to nearest.
  GradQ8Buffer& q8_buffer(int u) { return q8_[u]; }
  void quantize(int u, GradRange p, const float* in);

 private:
  float* scratch(int u) { return (u == 0 && !embed_scratch_.empty()) ? embed_scratch_.data() : scratch_.data(); }
  // lm_head_pieces: the intervals of whole blocks of the embedding that a micro-batch's tokens touch, and where
  // each is kept in kept_.
  struct KeptRange {
    size_t begin, end, at;
  };
  void kept_plan(const int32_t* tokens, int n);
  // q8: the values of piece p of unit u in src folded into its blocks (stochastic stream: element i of the unit
  // uses index i, whichever piece holds it); src zeroed after.
  void fold(int u, GradRange p, float* src, bool first, uint64_t seed);

  ModelStage stage_;
  GradStoreOptions opts_;
  ShardDims dims_;
  std::vector<GradRange> units_;
  std::vector<std::vector<GradRange>> pieces_;
  size_t embed_piece_rows_ = 0;            // q8 untied, on the first stage: vocabulary rows per embedding piece
  Buffer<float> full_;                     // fp32
  std::vector<GradQ8Buffer> q8_;           // q8, per unit
  Buffer<float> scratch_, embed_scratch_;  // q8
  std::vector<KeptRange> kept_ranges_;     // lm_head_pieces
  Buffer<float> kept_;
};

}  // namespace agoq

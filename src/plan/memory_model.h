// Analytic per-rank training memory of a LLaMA model under tensor (T), pipeline (P) and data (D) parallelism, for
// the Megatron-like baseline and for AGoQ, by the tracker's categories (core/memory.h); and an exact model of
// agoq's own CPU trainer, validated against the memory tracker (tests/plan). docs/plan.md states every assumption.
//
// Parallel layout (Megatron-style): TP splits q/k/v/o heads, the MLP width and the (padded) vocabulary by T;
// norms are replicated; without sequence parallelism (sp) the residual stream and norm tensors are whole on every
// TP rank, with it (Megatron-SP) each TP rank holds 1/T of their rows. PP cuts the layers into P contiguous stages
// (extra layers go to the last stages, which hold fewer micro-batches in flight); stage 0 holds the embedding, the last
// stage the final norm and lm_head. Under non-interleaved 1F1B, stage r holds min(P - r, m) micro-batches of
// activations.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "arch/act_policy.h"
#include "arch/config.h"
#include "arch/stage.h"
#include "comm/allreduce_q8.h"
#include "core/memory.h"
#include "model/backend.h"
#include "optim/adam_q8.h"

namespace agoq {

// The largest GPU count, sequence length, micro-batch size or count (and global batch) agoq plans for: far beyond any
// run, small enough that no product of them overflows.
constexpr int kPlanMaxCount = 1 << 24;

struct PlanParallel {
  int gpus = 1, tp = 1, pp = 1;
  bool zero1 = false;  // optimizer states and fp32 master weights sharded over the D data-parallel ranks
  bool sp = false;     // sequence parallelism over the tp ranks
  int dp() const { return gpus / (tp * pp); }
};

struct PlanWorkload {
  int seq = 4096, micro_batch = 1, num_micro_batches = 8;
  size_t rows() const { return size_t(seq) * size_t(micro_batch); }  // tokens per micro-batch
};

enum class PlanSystem { baseline, agoq };
const char* plan_system_name(PlanSystem s);

struct PlanGpuOptions {
  size_t bucket_bytes = 25 << 20;     // fp32 bytes per gradient bucket (AGoQ's q8 all-to-all workspace is per bucket)
  size_t reserve_bytes = 1ull << 30;  // CUDA context, cuBLAS/NCCL workspaces, allocator slack (both systems)
  int grad_block = 256;               // values per fp32 scale of the 8-bit gradients
  int vocab_align = 128;              // Megatron pads the vocabulary to a multiple of vocab_align * T
  // AGoQ with 8-bit AdamW moments (`--optim-state q8`): 2 bytes per value plus two fp32 scales per block, instead of
  // 8 bytes; the baseline keeps fp32 moments.
  bool optim_q8 = false;
  int optim_block = AdamQ8Format{}.block;
};

// Bytes per MemCategory.
struct PlanMemory {
  std::array<size_t, kMemCategoryCount> bytes{};
  size_t& operator[](MemCategory c) { return bytes[int(c)]; }
  size_t operator[](MemCategory c) const { return bytes[int(c)]; }
  size_t total() const;
};

struct PlanStage {
  int stage = 0, first_layer = 0, n_layers = 0, in_flight = 1;
  bool embed = false, head = false;  // holds the embedding / the final norm and lm_head
  size_t params = 0;                 // parameters on one rank of this stage (after TP)
};

// Throws agoq::Error naming the bad value (GPUs not divisible by T*P, P > layers, T not dividing heads, ...).
void plan_parallel_check(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w);
std::vector<PlanStage> plan_stages(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                                   const PlanGpuOptions& opt = {});
// The vocabulary as Megatron allocates it: padded to a multiple of vocab_align * T.
int plan_padded_vocab(const LlamaConfig& cfg, int tp, int vocab_align);

// Values per token of each activation slot on one TP rank; equals act_slot_cols(cfg) when tp == 1.
std::array<int, kActSlotCount> plan_slot_cols(const LlamaConfig& cfg, int tp);
// Saved-activation bytes of one micro-batch of `rows` tokens on one TP rank, over the policy's layers (both slot
// classes); with sp the residual slots hold rows / tp (act_slot_rows). With tp == 1 this is exactly
// act_store_bytes(attention) + act_store_bytes(other).
size_t plan_act_bytes(const ActPolicy& policy, const LlamaConfig& cfg, int tp, size_t rows, bool sp = false);
size_t plan_slot_bytes(const QuantFormat& f, const LlamaConfig& cfg, int tp, size_t rows, ActSlot s, bool sp = false);

// One rank of one stage. `policy` covers the stage's layers (st.n_layers); activations = in_flight x one
// micro-batch. baseline: bf16 weights + fp32 master, fp32 gradients, fp32 Adam; AGoQ: the same but 8-bit
// gradients (INT8 + one fp32 scale per grad_block values) and its q8 all-to-all buffers.
PlanMemory plan_memory_per_rank(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                                const PlanStage& st, PlanSystem sys, const ActPolicy& policy,
                                const PlanGpuOptions& opt = {});
// Everything of plan_memory_per_rank except activations (the allocator's budget is what this leaves free).
PlanMemory plan_memory_static(const LlamaConfig& cfg, const PlanParallel& par, const PlanWorkload& w,
                              const PlanStage& st, PlanSystem sys, const PlanGpuOptions& opt = {});

// agoq's own CPU trainer, one rank: LlamaModel(cfg, batch, seq, policy, stage, in_flight) + one AdamW per gradient
// unit over its parameters (or rank 0's ZeRO-1 shard of each unit) with fp32 or 8-bit moments, fp32 weights, the
// gradient store (fp32, or 8-bit: codes, scales and one unit's fp32 scratch) plus ZeRO-1's reduced shard (weights,
// gradients and optimizer exact to the byte), the stores' activations (in_flight micro-batches of the stage's
// layers), the model's workspace buffers (llama_workspace_bytes) plus the larger attention scratch
// (attention_scratch_bytes), a pipeline stage's two send buffers (parallel/pipeline.cpp) and the 8-bit
// all-reduce's workspace of the data-parallel reduction (grad_reduce_workspace_bytes). Peaks: what the tracker
// reports as each category's own peak over training steps.
struct PlanCpuOptions {
  int batch = 1, seq = 64;
  bool grad_q8 = false;
  int grad_block = 256;
  bool lm_head_pieces = false;  // q8, tied: the lm_head's gradient in vocabulary pieces (parallel/grad_store.h)
  bool zero = false;            // ZeRO-1: rank 0's shard of every gradient unit over dp ranks (parallel/grad_reduce.h)
  int dp = 1;                   // data-parallel ranks of this stage
  GradReduce reduce = GradReduce::fp32;  // how they sum (`--allreduce`)
  bool dp_one_host = true;               // all on one host (allreduce_q8 then runs a call in one chunk)
  size_t bucket_bytes = 4 << 20;         // the fp32 store's buckets
  bool optim_q8 = false;  // 8-bit AdamW moments
  int optim_block = AdamQ8Format{}.block;
  int threads = 0;   // OpenMP threads of the attention scratch; 0: omp_get_max_threads()
  int pp = 1;        // pipeline stages; with pp > 1, `stage` and `in_flight` describe this rank's
  ModelStage stage;  // its layers are ignored when pp == 1 (the whole model); its tensor-parallel shard counts
  int in_flight = 1;
  bool gemm_bf16 = false;  // `--compute bf16`: the weights' bf16 copies and the GEMMs' rounding scratch
  Bf16Weights bf16_weights = Bf16Weights::cached;  // `--bf16-weights`
};
PlanMemory plan_memory_cpu_trainer(const LlamaConfig& cfg, const ActPolicy& policy, const PlanCpuOptions& opt);

// "80GiB", "80 GB", "1.5TiB", "512MiB", "81920M" (K/M/G/T alone are binary), or plain bytes. Throws naming `flag`
// on garbage or a size out of range.
size_t plan_parse_bytes(const std::string& text, const std::string& flag);

}  // namespace agoq

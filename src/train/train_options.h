// `agoq train`'s options, each a field with the library's default (the CLI's AGoQ defaults: cli/cmd_train.cpp), and
// the flags' spellings of their enums.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/config.h"
#include "comm/allreduce_q8.h"
#include "comm/communicator.h"
#include "core/enum_names.h"
#include "model/backend.h"
#include "optim/adamw.h"
#include "parallel/grad_store.h"

namespace agoq {

// The lm_head's weight gradient with the 8-bit store and tied embeddings (`--lm-head-grad`).
enum class LmHeadGrad : uint8_t { whole, pieces };
// Where the model computes (`--device`).
enum class TrainDevice : uint8_t { cpu, cuda };

// The flags' spellings of the options' enums (the CLI parses with them; reports and checkpoints name with them).
inline constexpr EnumName<GradStoreKind> kGradStoreNames[] = {{GradStoreKind::fp32, "fp32"}, {GradStoreKind::q8, "q8"}};
inline constexpr EnumName<GradReduce> kAllreduceNames[] = {{GradReduce::fp32, "mpi"}, {GradReduce::q8, "q8"}};
inline constexpr EnumName<QuantRounding> kGradRoundingNames[] = {{QuantRounding::stochastic, "stochastic"},
                                                                 {QuantRounding::nearest, "nearest"}};
inline constexpr EnumName<LmHeadGrad> kLmHeadGradNames[] = {{LmHeadGrad::whole, "whole"},
                                                            {LmHeadGrad::pieces, "pieces"}};
inline constexpr EnumName<TrainDevice> kDeviceNames[] = {{TrainDevice::cpu, "cpu"}, {TrainDevice::cuda, "cuda"}};

struct TrainOptions {
  std::string data_dir;               // from `agoq prepare`: train.bin, val.bin, tokenizer.model
  std::string out_dir = "runs/demo";  // metrics.jsonl, ckpt/
  LlamaConfig model;                  // vocab_size is taken from the data
  // The shape flags given ("--dim", ..., "--config"): a resumed run keeps the checkpoint's shape and refuses any of
  // these that disagrees with it.
  std::vector<std::string> model_flags;
  int batch = 8, seq = 256, accum = 1;
  long steps = 300, warmup = 30;
  float lr = 3e-3f, min_lr = 3e-4f, clip = 1.0f;
  AdamWConfig adam;
  uint64_t seed = 1337;
  long eval_every = 100;
  int eval_batches = 8;
  // Downstream tasks scored during training (evaltask/, docs/eval.md), NAME:FILE, with the data's tokenizer: at
  // every eval_task_every-th step (0: at eval_every's) and the last, on the first eval_task_limit items (0: all).
  std::vector<std::string> eval_tasks;
  long eval_task_every = 0, eval_task_limit = 0;
  long ckpt_every = 0;  // 0: only at the end
  long stop_after = 0;  // stop (with a checkpoint) after this many steps of this run; 0: run to `steps`
  int log_every = 10;
  // The library's defaults are the unquantized run; `agoq train` defaults to AGoQ (agoq, q8, q8; cli/cmd_train.cpp).
  std::string act_policy = "fp32";  // arch/act_policy.h: fp32, baseline-bf16, agoq, uniform4 or a spec
  std::string resume;               // checkpoint dir to continue from
  // A pretrained model to fine-tune (HF folder, GGUF file or agoq checkpoint): its shape and weights, with a fresh
  // optimizer and schedule. The data must have been prepared with its tokenizer. Not with `resume`.
  std::string init_from;
  bool overwrite = false;  // a fresh run may replace an earlier run's checkpoints and metrics in out_dir
  bool quiet = false;
  // Data parallelism (docs/parallel.md): D = comm's size replicas, each running `accum` micro-batches per step.
  GradStoreKind grad_store = GradStoreKind::fp32;           // gradient accumulation buffers
  GradReduce allreduce = GradReduce::fp32;                  // MPI's fp32 all-reduce, or allreduce_q8
  QuantRounding grad_rounding = QuantRounding::stochastic;  // of the q8 grad store
  // q8 grad store, tied embeddings: the lm_head's weight gradient whole (an fp32 scratch of the embedding's size)
  // or in vocabulary pieces (no such scratch; one more lm_head GEMM per micro-batch).
  LmHeadGrad lm_head_grad = LmHeadGrad::whole;
  // A folder for TensorBoard event files: every metrics record's numbers as scalars of its step (tboard/).
  std::string tensorboard;
  bool profile = false;  // time the ops by class (model/backend_timed.h): metrics.jsonl's op_seconds, the report
  int zero = 0;          // 1: ZeRO-1, AdamW state sharded over the ranks
  // Pipeline parallelism (1F1B): ranks form a pp x (ranks / pp) grid; `accum` is the micro-batches per step.
  int pp = 1;
  std::string stage_layers;  // e.g. "3,5": layers per stage (empty: even split)
  // Tensor parallelism (Megatron): each layer split over tp adjacent ranks; the grid is tp x pp x (ranks / tp / pp).
  int tp = 1;
  // Sequence parallelism (Megatron-SP) over the tp ranks: the residual stream, norms and their saved activations
  // on each rank's rows of a micro-batch (needs tp > 1 dividing batch * seq).
  bool sp = false;
  // Dynamic bit allocation: with a per-rank memory budget, after `replan_after` steps every stage's activation
  // bits are re-planned from the measured peaks (plan/bit_alloc.h) and the change is logged.
  size_t mem_budget = 0;
  long replan_after = 2;
  // Where the model computes (docs/cuda.md): cpu, or cuda (one GPU in one process: fp32 gradients and AdamW moments
  // on the device; GEMMs with bf16 inputs and fp32 accumulation, or fp32 throughout).
  TrainDevice device = TrainDevice::cpu;
  // The GEMMs' precision (model/backend.h): the library's default is the exact fp32 reference; `agoq train`'s is
  // auto (bf16 where the device multiplies bf16 natively). Independent of the stores: --baseline keeps it.
  ComputeMode compute = ComputeMode::fp32;
  Bf16Weights bf16_weights = Bf16Weights::cached;  // with bf16 GEMMs on the CPU: copies kept, or rounded per GEMM
  Communicator* comm = nullptr;                    // null: comm_world()
  // Test hook (hidden flags --debug-exit-at-step/--debug-exit-rank): that rank _exit(3)s when the step begins.
  long debug_exit_step = 0;
  int debug_exit_rank = -1;
};

}  // namespace agoq

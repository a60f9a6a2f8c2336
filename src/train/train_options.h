// `agoq train`'s options, each declared once: train_option_rows below is one row per option (the field, its flag,
// its default, its help, its check), as arch/config_fields.h is for the model's shape. From the rows come the
// defaults of TrainOptions (the library's are the CLI's: AGoQ), the CLI's flags (cli/cmd_train.cpp), the validation
// and the description ranks compare at start-up (train_options.cpp). Adding an option is adding a field and a row.
#pragma once
#include <cmath>
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
#include "parallel/step_cpu.h"

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

// A row's check and kind: a number's bounds (refused outside them: "--batch must be >= 1 (got 0)"), a path (an
// empty value is refused), required, or local (may differ between ranks: paths, logging; left out of the
// description ranks compare).
struct OptionSpec {
  double min = -HUGE_VAL, max = HUGE_VAL;
  bool min_open = false, max_open = false;  // (min, ...), [..., max)
  const char* note = nullptr;               // what a special value means, after the error: "0: only at the end"
  bool path = false, required = false, local = false;
};
inline constexpr OptionSpec kAny{};
inline constexpr OptionSpec kLocal{.local = true};
inline constexpr OptionSpec kPath{.path = true, .local = true};
constexpr OptionSpec at_least(double min, const char* note = nullptr) { return {.min = min, .note = note}; }
inline constexpr OptionSpec kPositive{.min = 0, .min_open = true};
inline constexpr OptionSpec kFraction{.min = 0, .max = 1, .max_open = true};  // [0, 1): a moment's decay
// A byte count such as 2GiB (`plan_parse_bytes`).
struct OptionBytes {};

struct TrainOptions {
  TrainOptions();  // every option at its row's default

  // The data, the output, the model's shape (its flags: arch/config_fields.h) and the batch.
  std::string data_dir, out_dir;
  LlamaConfig model;  // vocab_size is taken from the data
  // The shape flags given ("--dim", ..., "--config"): a resumed run keeps the checkpoint's shape and refuses any of
  // these that disagrees with it.
  std::vector<std::string> model_flags;
  int seq, batch, accum;
  // The schedule, AdamW, evaluation, checkpoints, logging.
  long steps, warmup;
  float lr, min_lr, clip;
  AdamWConfig adam;
  uint64_t seed;
  long eval_every;
  int eval_batches;
  std::vector<std::string> eval_tasks;  // NAME:FILE, scored with the data's tokenizer (evaltask/, docs/eval.md)
  long eval_task_every, eval_task_limit;
  long ckpt_every, stop_after;
  int log_every;
  std::string tensorboard;
  // Where the run starts from and computes, and what it reports.
  std::string resume, init_from;
  bool overwrite, quiet, profile;
  long debug_exit_step;  // test hook: that rank _exit(3)s when the step begins
  int debug_exit_rank;
  TrainDevice device;
  ComputeMode compute;
  Bf16Weights bf16_weights;
  // What is stored in how many bits.
  std::string act_policy;  // arch/act_policy.h: fp32, baseline-bf16, agoq, uniform4 or a spec
  GradStoreKind grad_store;
  GradReduce allreduce;
  QuantRounding grad_rounding;
  LmHeadGrad lm_head_grad;
  // The layout over the ranks (docs/parallel.md, docs/pipeline.md) and the memory budget that re-plans the bits.
  int zero, pp, tp;
  std::string stage_layers;
  bool sp;
  size_t mem_budget;
  long replan_after;
  Communicator* comm = nullptr;  // null: comm_world()
};

// The rows, in --help's order: v(field, flag, default, help, spec), where spec is an OptionSpec, an enum's names
// or OptionBytes. A row with no help is hidden (a test hook). Options: TrainOptions, or const TrainOptions to read.
template <class Options, class V>
void train_option_rows(Options& o, V&& v) {
  using Strings = std::vector<std::string>;
  v(o.data_dir, "--data", "", "prepared data directory (from `agoq prepare`)",
    OptionSpec{.path = true, .required = true, .local = true});
  v(o.out_dir, "--out", "runs/demo", "output directory: metrics.jsonl and ckpt/", kPath);
  v(o.seq, "--seq", 256, "sequence length", at_least(1));
  v(o.batch, "--batch", 8, "sequences per micro-batch", at_least(1));
  v(o.accum, "--accum", 1, "micro-batches per step (gradient accumulation)", at_least(1));

  v(o.steps, "--steps", 300L, "optimizer steps", at_least(1));
  v(o.lr, "--lr", 3e-3f, "peak learning rate", kPositive);
  v(o.min_lr, "--min-lr", 3e-4f, "final learning rate of the cosine decay (at most --lr)", at_least(0));
  v(o.warmup, "--warmup", 30L, "linear warm-up steps", at_least(0));
  v(o.adam.weight_decay, "--weight-decay", AdamWConfig{}.weight_decay, "AdamW decoupled weight decay (matrices only)",
    at_least(0));
  v(o.adam.beta1, "--beta1", AdamWConfig{}.beta1, "AdamW's first-moment decay", kFraction);
  v(o.adam.beta2, "--beta2", AdamWConfig{}.beta2, "AdamW's second-moment decay", kFraction);
  v(o.adam.eps, "--adam-eps", AdamWConfig{}.eps, "AdamW's epsilon, added to the root of the second moment", kPositive);
  v(o.clip, "--clip", 1.0f, "global gradient-norm clip", kPositive);
  v(o.seed, "--seed", uint64_t(1337), "seed for initialisation, data order and stochastic rounding", kAny);
  v(o.eval_every, "--eval-every", 100L, "validation every N steps (0: only at the end)",
    at_least(0, "0: only at the end"));
  v(o.eval_batches, "--eval-batches", 8, "validation batches", at_least(1));
  v(o.eval_tasks, "--eval-task", Strings{},
    "a downstream task scored during training, NAME:FILE as agoq eval --task (repeatable; docs/eval.md)", kLocal);
  v(o.eval_task_every, "--eval-task-every", 0L, "score --eval-task every N steps (0: at --eval-every's)", at_least(0));
  v(o.eval_task_limit, "--eval-task-limit", 0L, "score the first N items of each --eval-task (0: all)", at_least(0));
  v(o.ckpt_every, "--ckpt-every", 0L, "checkpoint every N steps (0: only at the end)",
    at_least(0, "0: only at the end"));
  v(o.stop_after, "--stop-after", 0L, "stop after N steps of this run (checkpointed; continue with --resume)",
    at_least(0, "0: run to --steps"));
  v(o.log_every, "--log-every", 10, "console line every N steps when not on a terminal",
    OptionSpec{.min = 0, .local = true});
  v(o.tensorboard, "--tensorboard", "",
    "folder for TensorBoard: every number of metrics.jsonl as a scalar, in a new events file there", kPath);

  v(o.resume, "--resume", "", "continue from a checkpoint directory (e.g. runs/demo/ckpt)", kPath);
  v(o.init_from, "--init-from", "",
    "fine-tune a pretrained model: a Hugging Face folder, a GGUF file or an agoq checkpoint (its shape and weights; "
    "a fresh optimizer; --data prepared with its tokenizer)",
    OptionSpec{.path = true});
  v(o.overwrite, "--overwrite", false,
    "start afresh in an --out that holds an earlier run (its checkpoint link and metrics are replaced)", kLocal);
  v(o.quiet, "--quiet", false, "no console progress", kLocal);
  v(o.profile, "--profile", false,
    "time the ops by class (GEMMs, attention, LM head + loss, activation store, other): each step's op_seconds in "
    "metrics.jsonl and the split in the final report",
    kLocal);
  v(o.debug_exit_step, "--debug-exit-at-step", 0L, "", kLocal);
  v(o.debug_exit_rank, "--debug-exit-rank", -1, "", kLocal);
  v(o.device, "--device", TrainDevice::cpu,
    "cpu, or cuda: one GPU in one process, with fp32 AdamW moments (docs/cuda.md)", kDeviceNames);
  v(o.compute, "--compute", ComputeMode::automatic, kComputeHelp, kComputeNames);
  v(o.bf16_weights, "--bf16-weights", Bf16Weights::cached, kBf16WeightsHelp, kBf16WeightsNames);

  v(o.act_policy, "--act-policy", "agoq",
    "storage of saved activations: fp32 | baseline-bf16 | agoq | uniform4 | a spec such as "
    "attn=bf16,mlp=4,norm=4,layers[0..1]=8 (docs/activations.md)",
    kAny);
  v(o.grad_store, "--grad-store", GradStoreKind::q8,
    "gradient accumulation buffers: fp32 | q8 (INT8 + a scale per 256 values; docs/parallel.md)", kGradStoreNames);
  v(o.allreduce, "--allreduce", GradReduce::q8,
    "gradient all-reduce across data-parallel ranks: mpi (fp32) | q8 (AGoQ's 8-bit all-to-all)", kAllreduceNames);
  v(o.adam.state, "--optim-state", AdamWConfig{}.state,
    "AdamW moments: fp32 | q8 (8 bits per value, a scale per 128 values; docs/optimizer.md)", kOptimStateNames);
  v(o.grad_rounding, "--grad-rounding", QuantRounding::stochastic,
    "rounding of the q8 grad store: stochastic (unbiased) | nearest", kGradRoundingNames);
  v(o.lm_head_grad, "--lm-head-grad", LmHeadGrad::whole,
    "q8 grad store, tied embeddings: the lm_head's gradient whole (an fp32 buffer of the embedding's size) | pieces "
    "(none; one more lm_head GEMM per micro-batch)",
    kLmHeadGradNames);

  v(o.zero, "--zero", 0, "1: ZeRO-1, optimizer state sharded across data-parallel ranks",
    OptionSpec{.min = 0, .max = 1});
  v(o.pp, "--pp", 1,
    "pipeline stages (1F1B); ranks form a pp x (ranks / pp) grid, --accum is the micro-batches per step", at_least(1));
  v(o.stage_layers, "--stage-layers", "", "decoder layers per pipeline stage, e.g. 3,5 (default: even)", kAny);
  v(o.tp, "--tp", 1,
    "tensor-parallel ranks (Megatron: heads, MLP and vocabulary split; innermost: adjacent ranks); the grid is "
    "tp x pp x (ranks / (tp * pp))",
    at_least(1));
  v(o.sp, "--sp", false,
    "sequence parallelism over the --tp ranks (Megatron-SP): residual stream and norms on each rank's rows of a "
    "micro-batch, all-gather / reduce-scatter around the split GEMMs",
    kAny);
  v(o.mem_budget, "--mem-budget", size_t(0),
    "memory per rank (e.g. 2GiB): after --replan-after steps, activation bits are re-planned per stage from the "
    "measured peaks (docs/plan.md)",
    OptionBytes{});
  v(o.replan_after, "--replan-after", 2L, "steps measured before re-planning (with --mem-budget)", at_least(1));
}

// --baseline: the unquantized run (fp32 activations, gradients, all-reduce and AdamW moments). The compute
// precision stays: `--baseline --compute fp32` is the exact reference.
void train_options_baseline(TrainOptions& o);
// The exact reference the tests compare against: the baseline with fp32 GEMMs.
TrainOptions train_options_reference();

// Every row's check, then the checks between options. Throws Error naming the flag.
void train_options_validate(const TrainOptions& o);
// What every rank of a run must agree on: the model, each row not local, and the resumed checkpoint's commit.
std::string train_run_description(const TrainOptions& o, const LlamaConfig& cfg, const std::string& resume_commit);
// The CPU step's options (parallel/step_cpu.h). stages, tensor: the grid's pipeline and tensor-parallel groups
// (null without --pp, --tp).
CpuStepOptions train_cpu_step_options(const TrainOptions& o, Communicator* stages, Communicator* tensor);

}  // namespace agoq

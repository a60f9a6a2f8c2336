// `agoq train`: train a LLaMA model on data prepared by `agoq prepare`.
#include <fstream>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "arch/config_fields.h"
#include "arch/hf.h"
#include "cli/commands.h"
#include "cli/layout_auto.h"
#include "cli/path_flag.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "plan/memory_model.h"
#include "train/trainer.h"

namespace agoq {
namespace {

struct TrainArgs {
  TrainOptions opt = agoq_defaults();
  std::string config_json;
  bool baseline = false;
  std::string layout = "flags", calibration;

  // `agoq train` is AGoQ unless told otherwise: 4-bit activations (attention in bf16), 8-bit gradient store,
  // 8-bit all-reduce. The library's TrainOptions stay unquantized, so a caller opts in explicitly.
  static TrainOptions agoq_defaults() {
    TrainOptions o;
    o.act_policy = "agoq", o.grad_store = GradStoreKind::q8, o.allreduce = GradReduce::q8;
    o.compute = ComputeMode::automatic;
    return o;
  }
};

void cmd_train_body(TrainArgs& a);

// A model-shape flag: a switch for a bool field; the value's default shown, but for --kv-heads (default: --heads).
template <class T>
void model_flag_add(CLI::App* c, const ConfigField& f, T& into) {
  if constexpr (std::is_same_v<T, bool>) {
    c->add_flag(f.flag, into, f.help);
  } else {
    CLI::Option* opt = c->add_option(f.flag, into, f.help);
    if (std::string(f.flag) != "--kv-heads") opt->capture_default_str();
  }
}

// A flag whose values are an enum's names (train/trainer.h's tables), parsed into it once.
template <class E, size_t N>
CLI::Option* add_enum_option(CLI::App* c, const char* flag, E& into, const EnumName<E> (&names)[N],
                             const std::string& help) {
  auto parse = [&into, &names, flag](const std::string& v) { into = enum_parse(names, v, flag); };
  return c->add_option_function<std::string>(flag, parse, help)->default_str(enum_name(names, into));
}

void cmd_train_run(TrainArgs& a) {
  // Under mpirun every rank runs this; started alone, the process is a world of one. A failure on one rank ends
  // the job (comm_run_guarded); an error all ranks agree on (a config mismatch) is printed once, by rank 0.
  Communicator& comm = comm_world();
  comm_run_guarded(comm, [&] { cmd_train_body(a); });
}

void cmd_train_body(TrainArgs& a) {
  if (!a.config_json.empty()) {
    nlohmann::json j = json_object_read_file(a.config_json, "model config");
    // The data decides the vocabulary; take the rest of the shape from the file.
    if (!j.contains("vocab_size")) j["vocab_size"] = 2;
    a.opt.model = config_from_hf_json(j);
  }
  if (a.layout == "auto") train_layout_auto(a.opt, comm_world(), a.calibration);
  if (train_run(a.opt).stop_signal != 0) {  // stopped early, with a checkpoint: say so in the exit status
    std::fflush(stdout);
    std::exit(kExitStopped);
  }
}

// The data, the output and the model's shape and batch.
void train_flags_data_model(CLI::App* c, TrainArgs& a) {
  TrainOptions& o = a.opt;
  c->add_option("--data", o.data_dir, "prepared data directory (from `agoq prepare`)")->required()->check(cli_path());
  c->add_option("--out", o.out_dir, "output directory: metrics.jsonl and ckpt/")
      ->capture_default_str()
      ->check(cli_path());
  c->add_option("--config", a.config_json, "model shape from a Hugging Face config.json (overrides the flags below)")
      ->check(cli_path());
  for (const ConfigField& f : kConfigFields)  // the model shape's flags (arch/config_fields.h)
    if (f.flag) std::visit([&](auto member) { model_flag_add(c, f, o.model.*member); }, f.member);
  c->add_option("--seq", o.seq, "sequence length")->capture_default_str();
  c->add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str();
  c->add_option("--accum", o.accum, "micro-batches per step (gradient accumulation)")->capture_default_str();
}

// Steps, the learning-rate schedule and AdamW, evaluation, checkpoints and logging.
void train_flags_schedule(CLI::App* c, TrainOptions& o) {
  c->add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  c->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  c->add_option("--min-lr", o.min_lr, "final learning rate of the cosine decay")->capture_default_str();
  c->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  c->add_option("--weight-decay", o.adam.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  c->add_option("--beta1", o.adam.beta1)->capture_default_str();
  c->add_option("--beta2", o.adam.beta2)->capture_default_str();
  c->add_option("--clip", o.clip, "global gradient-norm clip")->capture_default_str();
  c->add_option("--seed", o.seed, "seed for initialisation and data order")
      ->check(cli_unsigned())
      ->capture_default_str();
  c->add_option("--eval-every", o.eval_every, "validation every N steps (0: only at the end)")->capture_default_str();
  c->add_option("--eval-batches", o.eval_batches, "validation batches")->capture_default_str();
  c->add_option("--eval-task", o.eval_tasks,
                "a downstream task scored during training, NAME:FILE as agoq eval --task (repeatable; docs/eval.md)");
  c->add_option("--eval-task-every", o.eval_task_every, "score --eval-task every N steps (0: at --eval-every's)")
      ->check(cli_at_least(0));
  c->add_option("--eval-task-limit", o.eval_task_limit, "score the first N items of each --eval-task (0: all)")
      ->check(cli_at_least(0));
  c->add_option("--ckpt-every", o.ckpt_every, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  c->add_option("--stop-after", o.stop_after, "stop after N steps of this run (checkpointed; continue with --resume)");
  c->add_option("--log-every", o.log_every, "console line every N steps when not on a terminal")->capture_default_str();
  c->add_option("--tensorboard", o.tensorboard,
                "folder for TensorBoard: every number of metrics.jsonl as a scalar, in a new events file there")
      ->check(cli_path());
}

// Where the run starts from and computes, and what it reports.
void train_flags_run(CLI::App* c, TrainOptions& o) {
  c->add_option("--resume", o.resume, "continue from a checkpoint directory (e.g. runs/demo/ckpt)")->check(cli_path());
  c->add_option("--init-from", o.init_from,
                "fine-tune a pretrained model: a Hugging Face folder, a GGUF file or an agoq checkpoint (its shape "
                "and weights; a fresh optimizer; --data prepared with its tokenizer)")
      ->check(cli_path());
  c->add_flag("--overwrite", o.overwrite,
              "start afresh in an --out that holds an earlier run (its checkpoint link and metrics are replaced)");
  c->add_flag("--quiet", o.quiet, "no console progress");
  c->add_flag("--profile", o.profile,
              "time the ops by class (GEMMs, attention, LM head + loss, activation store, other): each step's "
              "op_seconds in metrics.jsonl and the split in the final report");
  // Test hooks (tests/mpi_tests.cmake): that rank ends abruptly (_exit(3)) when the step begins. Hidden.
  c->add_option("--debug-exit-at-step", o.debug_exit_step)->group("");
  c->add_option("--debug-exit-rank", o.debug_exit_rank)->group("");
  add_enum_option(c, "--device", o.device, kDeviceNames,
                  "cpu, or cuda: one GPU in one process, with fp32 AdamW moments (docs/cuda.md)");
  cli_add_compute(c, o.compute);
  cli_add_bf16_weights(c, o.bf16_weights);
}

// What is stored in how many bits: activations, gradients, AdamW's moments (and --baseline, none).
void train_flags_storage(CLI::App* c, TrainArgs& a) {
  TrainOptions& o = a.opt;
  c->add_option("--act-policy", o.act_policy,
                "storage of saved activations: fp32 | baseline-bf16 | agoq | uniform4 | a spec such as "
                "attn=bf16,mlp=4,norm=4,layers[0..1]=8 (docs/activations.md)")
      ->capture_default_str();
  c->add_option_function<std::string>(
       "--act-store",
       [&o](const std::string& f) {
    AGOQ_CHECK(f == "fp32" || f == "bf16", "--act-store must be fp32 or bf16 (got '", f, "')");
    o.act_policy = f == "fp32" ? "fp32" : "baseline-bf16";
       },
       "every saved activation in fp32 or bf16 (shorthand for --act-policy fp32 | baseline-bf16)")
      ->excludes("--act-policy");
  add_enum_option(c, "--grad-store", o.grad_store, kGradStoreNames,
                  "gradient accumulation buffers: fp32 | q8 (INT8 + a scale per 256 values; docs/parallel.md)");
  add_enum_option(c, "--allreduce", o.allreduce, kAllreduceNames,
                  "gradient all-reduce across data-parallel ranks: mpi (fp32) | q8 (AGoQ's 8-bit all-to-all)");
  c->add_option_function<std::string>(
       "--optim-state", [&o](const std::string& v) { o.adam.state = optim_state_parse(v); },
       "AdamW moments: fp32 | q8 (8 bits per value, a scale per 128 values; docs/optimizer.md)")
      ->default_str("fp32");
  CLI::Option* baseline = c->add_flag(
      "--baseline", a.baseline,
      "the unquantized run: fp32 activations, fp32 gradients, MPI's fp32 all-reduce, fp32 AdamW moments (AGoQ's "
      "defaults switched off)");
  for (const char* f : {"--act-policy", "--act-store", "--grad-store", "--allreduce", "--optim-state"})
    baseline->excludes(f);
  add_enum_option(c, "--grad-rounding", o.grad_rounding, kGradRoundingNames,
                  "rounding of the q8 grad store: stochastic | nearest");
  add_enum_option(c, "--lm-head-grad", o.lm_head_grad, kLmHeadGradNames,
                  "q8 grad store, tied embeddings: the lm_head's gradient whole (an fp32 buffer of the embedding's "
                  "size) | pieces (none; one more lm_head GEMM per micro-batch)");
}

// The layout over the ranks, and the memory budget that re-plans the bits.
void train_flags_parallel(CLI::App* c, TrainArgs& a) {
  TrainOptions& o = a.opt;
  c->add_option("--zero", o.zero, "1: ZeRO-1, optimizer state sharded across data-parallel ranks")
      ->capture_default_str();
  c->add_option("--pp", o.pp,
                "pipeline stages (1F1B); ranks form a pp x (ranks / pp) grid, --accum is the micro-batches per step")
      ->capture_default_str();
  c->add_option("--stage-layers", o.stage_layers, "decoder layers per pipeline stage, e.g. 3,5 (default: even)");
  c->add_option("--tp", o.tp,
                "tensor-parallel ranks (Megatron: heads, MLP and vocabulary split; innermost: adjacent ranks); the "
                "grid is tp x pp x (ranks / (tp * pp))")
      ->capture_default_str();
  c->add_flag("--sp", o.sp,
              "sequence parallelism over the --tp ranks (Megatron-SP): residual stream and norms on each rank's rows "
              "of a micro-batch, all-gather / reduce-scatter around the split GEMMs");
  CLI::Option* layout =
      c->add_option("--layout", a.layout,
                    "flags (--tp, --pp, --sp, --zero, --batch, --accum as given) or auto: the layout "
                    "`agoq plan --auto` ranks first for these ranks, model and system, at a global batch of --batch x "
                    "--accum x ranks")
          ->check(CLI::IsMember({"flags", "auto"}))
          ->capture_default_str();
  c->add_option("--calibration", a.calibration,
                "--layout auto: step-time inputs from FILE (`agoq plan --calibrate FILE`); default: measured at start")
      ->needs(layout)
      ->check(cli_path());
  c->add_option_function<std::string>(
      "--mem-budget", [&o](const std::string& v) { o.mem_budget = plan_parse_bytes(v, "--mem-budget"); },
      "memory per rank (e.g. 2GiB): after --replan-after steps, activation bits are re-planned per stage from "
      "the measured peaks (docs/plan.md)");
  c->add_option("--replan-after", o.replan_after, "steps measured before re-planning (with --mem-budget)")
      ->capture_default_str();
}

const CliCommand kTrain("", 20, [](CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "train a LLaMA model on prepared data");
  train_flags_data_model(c, *args);
  train_flags_schedule(c, args->opt);
  train_flags_run(c, args->opt);
  train_flags_storage(c, *args);
  train_flags_parallel(c, *args);
  c->callback([args, c] {
    if (args->layout == "auto")
      for (const char* f : {"--tp", "--pp", "--sp", "--zero", "--stage-layers"})
        AGOQ_CHECK(c->count(f) == 0, "--layout auto chooses ", f, " itself: drop it, or use --layout flags");
    if (c->count("--config") > 0) args->opt.model_flags.push_back("--config");
    for (const ConfigField& f : kConfigFields)
      if (f.flag && c->count(f.flag) > 0) args->opt.model_flags.push_back(f.flag);
    if (c->count("--kv-heads") == 0) args->opt.model.n_kv_heads = args->opt.model.n_heads;  // plain multi-head
    if (args->baseline)
      args->opt.act_policy = "fp32", args->opt.grad_store = GradStoreKind::fp32, args->opt.allreduce = GradReduce::fp32;
    cmd_train_run(*args);
  });
});

}  // namespace
}  // namespace agoq

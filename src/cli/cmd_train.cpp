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

// The options (train/train_options.h: AGoQ by default) and the flags that only the command has: shorthands for
// several options, a model shape from a file, the layout chosen by `plan --auto`.
struct TrainArgs {
  TrainOptions opt;
  std::string config_json;
  bool baseline = false;
  std::string layout = "flags", calibration;
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

// One flag per row of train/train_options.h, by the row's kind: a switch, a number or text (checked after parsing,
// by train_options_validate, and a path here), an enum's names, a byte count.
struct TrainFlagAdd {
  CLI::App* c;
  template <class T, class D>
  void operator()(T& field, const char* flag, const D&, const char* help, const OptionSpec& spec) const {
    CLI::Option* opt;
    if constexpr (std::is_same_v<T, bool>) {
      opt = c->add_flag(flag, field, help);
    } else {
      opt = c->add_option(flag, field, help);
      if constexpr (!std::is_same_v<T, std::vector<std::string>>) opt->capture_default_str();
      if constexpr (std::is_unsigned_v<T>) opt->check(cli_unsigned());
    }
    if (spec.path) opt->check(cli_path());
    if (spec.required) opt->required();
    if (!*help) opt->group("");  // a test hook
  }
  template <class E, class D, size_t N>
  void operator()(E& field, const char* flag, const D&, const char* help, const EnumName<E> (&names)[N]) const {
    auto parse = [&field, &names, flag](const std::string& v) { field = enum_parse(names, v, flag); };
    c->add_option_function<std::string>(flag, parse, help)->default_str(enum_name(names, field));
  }
  template <class D>
  void operator()(size_t& field, const char* flag, const D&, const char* help, OptionBytes) const {
    c->add_option_function<std::string>(
        flag, [&field, flag](const std::string& v) { field = plan_parse_bytes(v, flag); }, help);
  }
};

void cmd_train_run(TrainArgs& a) {
  // Under mpirun every rank runs this; started alone, the process is a world of one. A failure on one rank ends
  // the job (comm_fail); an error all ranks agree on (a config mismatch) is printed once, by rank 0.
  Communicator& comm = comm_world();
  try {
    cmd_train_body(a);
  } catch (...) {
    comm_fail(comm, std::current_exception());
  }
}

void cmd_train_body(TrainArgs& a) {
  if (!a.config_json.empty()) {
    nlohmann::json j = json_object_read_file(a.config_json, "model config");
    // The data decides the vocabulary; take the rest of the shape from the file, which a shape flag may not contradict.
    if (!j.contains("vocab_size")) j["vocab_size"] = 2;
    LlamaConfig from_file;
    try {
      from_file = config_from_hf_json(j);
    } catch (const Error& e) {
      fail("--config ", a.config_json, ": ", e.what());
    }
    TrainOptions flags = a.opt;
    std::erase(flags.model_flags, "--config");
    const std::string disagree = model_flags_disagreeing(flags, from_file, "--config");
    AGOQ_CHECK(disagree.empty(), "--config ", a.config_json, " gives the model's shape: ", disagree, "; drop the flag");
    a.opt.model = from_file;
  }
  if (a.layout == "auto") train_layout_auto(a.opt, comm_world(), a.calibration);
  if (train_run(a.opt).stop_signal != 0) {  // stopped early, with a checkpoint: say so in the exit status
    std::fflush(stdout);
    std::exit(kExitStopped);
  }
}

// The model's shape: a flag per field of arch/config_fields.h, or a config.json.
void train_flags_model(CLI::App* c, TrainArgs& a) {
  c->add_option("--config", a.config_json,
                "model shape from a Hugging Face config.json (the flags below may only agree)")
      ->check(cli_path());
  for (const ConfigField& f : kConfigFields)
    if (f.flag) std::visit([&](auto member) { model_flag_add(c, f, a.opt.model.*member); }, f.member);
}

// The flags that are not one option each: shorthands (--act-store, --baseline) and the layout `agoq plan --auto`
// chooses.
void train_flags_command(CLI::App* c, TrainArgs& a) {
  TrainOptions& o = a.opt;
  c->add_option_function<std::string>(
       "--act-store",
       [&o](const std::string& f) {
    AGOQ_CHECK(f == "fp32" || f == "bf16", "--act-store must be fp32 or bf16 (got '", f, "')");
    o.act_policy = f == "fp32" ? "fp32" : "baseline-bf16";
       },
       "every saved activation in fp32 or bf16 (shorthand for --act-policy fp32 | baseline-bf16)")
      ->excludes("--act-policy");
  CLI::Option* baseline = c->add_flag(
      "--baseline", a.baseline,
      "the unquantized run: fp32 activations, fp32 gradients, MPI's fp32 all-reduce, fp32 AdamW moments (AGoQ's "
      "defaults switched off; the compute precision stays)");
  for (const char* f : {"--act-policy", "--act-store", "--grad-store", "--allreduce", "--optim-state"})
    baseline->excludes(f);
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
}

const CliCommand kTrain("", 20, [](CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "train a LLaMA model on prepared data");
  train_flags_model(c, *args);
  train_option_rows(args->opt, TrainFlagAdd{c});
  train_flags_command(c, *args);
  c->callback([args, c] {
    if (args->layout == "auto")
      for (const char* f : {"--tp", "--pp", "--sp", "--zero", "--stage-layers"})
        AGOQ_CHECK(c->count(f) == 0, "--layout auto chooses ", f, " itself: drop it, or use --layout flags");
    if (c->count("--config") > 0) args->opt.model_flags.push_back("--config");
    for (const ConfigField& f : kConfigFields)
      if (f.flag && c->count(f.flag) > 0) args->opt.model_flags.push_back(f.flag);
    if (c->count("--kv-heads") == 0) args->opt.model.n_kv_heads = args->opt.model.n_heads;  // plain multi-head
    if (args->baseline) train_options_baseline(args->opt);
    cmd_train_run(*args);
  });
});

}  // namespace
}  // namespace agoq

// Each subcommand of the agoq binary lives in its own file and registers itself here through a static
// CliCommand object, so main.cpp needs no list of them. `parent` is "" for top-level commands and "bench" for
// benchmarks (bench/bench_*.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "model/backend.h"

namespace agoq {

struct CliCommand {
  using AddFn = void (*)(CLI::App& parent);
  // `order` sorts the commands in --help.
  CliCommand(const char* parent, int order, AddFn add);
};

// Adds every registered command whose parent is `parent` to `app`, in order.
void cli_add_registered(const std::string& parent, CLI::App& app);

// A validator for a count flag: a whole number of at least `least`, said as "must be >= 1 (got 0)".
CLI::Validator cli_at_least(long long least);
// The same for a whole number from `least` to `most`: "must be from 1 to 16777216 (got 0)". CLI11's own Range and
// NonNegativeNumber print their double bounds in full (309 digits for DBL_MAX).
CLI::Validator cli_in_range(long long least, long long most);
// A whole number for a uint64_t flag (a seed): CLI11 would read "-1" as 2^64 - 1.
CLI::Validator cli_unsigned();

// `--compute auto|bf16|fp32`, one declaration for train, eval, sample and the benchmarks (model/backend.h).
CLI::Option* cli_add_compute(CLI::App* cmd, ComputeMode& into);
// `--bf16-weights cached|per-gemm` (model/backend.h), for train and inspect.
CLI::Option* cli_add_bf16_weights(CLI::App* cmd, Bf16Weights& into);

// Where a command that needs a subcommand is given a word that is none of them ("agoq bench nosuch"): the line that
// names the word and lists the choices; "" when the arguments have no such word.
std::string cli_unknown_subcommand(CLI::App& app, int argc, char** argv);

}  // namespace agoq

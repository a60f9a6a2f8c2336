// Each subcommand of the agoq binary registers itself on the CLI11 app from its own file.
#pragma once
#include <CLI/CLI.hpp>

namespace agoq {
void cli_add_prepare(CLI::App& app);  // cli/cmd_prepare.cpp
void cli_add_train(CLI::App& app);    // cli/cmd_train.cpp
void cli_add_sample(CLI::App& app);   // cli/cmd_sample.cpp
void cli_add_bench(CLI::App& app);    // bench/bench_main.cpp
}  // namespace agoq

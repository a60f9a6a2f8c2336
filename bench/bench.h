// `agoq bench <what>`: benchmarks that print a table (or JSON with --json). Each lives in its own file.
#pragma once
#include <CLI/CLI.hpp>

namespace agoq {
void bench_add_quant(CLI::App& bench);  // bench/bench_quant.cpp
void bench_add_train(CLI::App& bench);  // bench/bench_train.cpp
}  // namespace agoq

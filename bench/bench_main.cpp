// `agoq bench <what>`: benchmarks that print a table (or JSON with --json), one file each (bench/bench_*.cpp),
// registered with parent "bench".
#include "cli/commands.h"

namespace agoq {
namespace {
const CliCommand kBench("", 90, [](CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "run a benchmark and print a table (--json for JSON)");
  bench->require_subcommand(1);
  cli_add_registered("bench", *bench);
});
}  // namespace
}  // namespace agoq

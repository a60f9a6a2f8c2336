#include "bench/bench.h"
#include "cli/commands.h"

namespace agoq {

void cli_add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "run a benchmark and print a table");
  bench->require_subcommand(1);
  bench_add_quant(*bench);
  bench_add_train(*bench);
}

}  // namespace agoq

// agoq: memory-efficient LLaMA training (AGoQ). One binary, one subcommand per job (cli/cmd_*.cpp, bench/).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/openblas_core.h"

int main(int argc, char** argv) {
  // OpenBLAS chose its kernels when it loaded; where it took this CPU for an older one, load it again with the
  // right ones (core/openblas_core.h). A user's own OPENBLAS_CORETYPE is left alone, and so is a failed exec.
  if (const char* core = agoq::openblas_core_better(); core && !std::getenv("OPENBLAS_CORETYPE")) {
    ::setenv("OPENBLAS_CORETYPE", core, 1);
    ::execv("/proc/self/exe", argv);
  }
  CLI::App app{"agoq: memory-efficient LLaMA training with activation and gradient quantization (AGoQ)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "agoq 0.1");
  agoq::cli_add_registered("", app);
  if (const std::string unknown = agoq::cli_unknown_subcommand(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "agoq: error: %s\n", unknown.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "agoq: error: %s (see agoq --help)\n", e.what());
    return 1;
  } catch (const agoq::Error& e) {
    std::fprintf(stderr, "agoq: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "agoq: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agoq: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

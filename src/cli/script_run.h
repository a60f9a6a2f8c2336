// Running the Python scripts that come with agoq (charts, benchmark references): one place that quotes the arguments
// for the shell and turns a failure into one line.
#pragma once
#include <string>
#include <vector>

namespace agoq {

// Runs argv (argv[0] the interpreter, each argument quoted for the shell) and returns its standard output. A failure
// is one agoq::Error: "`what` failed (<the last line it wrote to stderr, else to stdout>)".
std::string cli_script_run(const std::string& what, const std::vector<std::string>& argv);

}  // namespace agoq

// Where an output may go with respect to the inputs of the same command: a command never deletes or replaces what it
// reads from (docs/reliability.md). Paths are compared resolved (links followed, `..` removed).
#pragma once
#include <string>

namespace agoq {

// Whether `path` is `dir` or lies inside it; false when either is empty.
bool path_within(const std::string& path, const std::string& dir);

// Refuses, in one line naming both flags, an output file that is the input `in` or an existing file inside the input
// folder `in` (one the command may be reading); a new file beside a model is fine.
void output_file_check_not_input(const char* out_flag, const std::string& out, const char* in_flag,
                                 const std::string& in);

}  // namespace agoq

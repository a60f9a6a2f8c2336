// Where an output may go with respect to the inputs of the same command: a command never deletes or replaces what it
// reads from (docs/reliability.md). Paths are compared resolved (links followed, `..` removed).
#pragma once
#include <string>

namespace agoq {

// Whether `path` is `dir` or lies inside it; false when either is empty.
bool path_within(const std::string& path, const std::string& dir);

// Refuses, in one line naming both flags, an output path that is an input or lies inside an input folder:
// `out_flag out` would replace or write into `in_flag in`.
void output_check_not_input(const char* out_flag, const std::string& out, const char* in_flag,
                            const std::string& in);

}  // namespace agoq

// Where an output may go with respect to the inputs of the same command: a command never deletes or replaces what it
// reads from (docs/reliability.md). Paths are compared resolved (links followed, `..` removed).
#pragma once
#include <functional>
#include <string>

namespace agoq {

// Whether `path` is `dir` or lies inside it; false when either is empty.
bool path_within(const std::string& path, const std::string& dir);

// Refuses, in one line naming both flags, an output file that is the input `in` or an existing file inside the input
// folder `in` (one the command may be reading); a new file beside a model is fine.
void output_file_check_not_input(const char* out_flag, const std::string& out, const char* in_flag,
                                 const std::string& in);

// Refuses, in one line naming the flag, an output path that exists and is not a readable regular file (a folder, a
// FIFO, a link to nothing: input_file_problem's words) or is a file `is_kind` does not recognise as `kind` (an earlier
// output of the same command, which may be replaced): a mistyped path to an input or to someone's file is never
// written over. `is_kind` may throw; that counts as no.
void output_file_check_replaceable(const std::string& flag, const std::string& path, const char* kind,
                                   const std::function<bool(const std::string& path)>& is_kind);

// Predicates for it: a PNG image (its 8-byte signature); a JSON object with `key` (at most 64 MiB).
bool output_file_is_png(const std::string& path);
bool output_file_is_json_with(const std::string& path, const char* key);

}  // namespace agoq

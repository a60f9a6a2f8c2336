// Path flags: every flag that names a file or folder (to read or to write) checks its value with cli_path().
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace agoq {

// An empty path is refused by name: the commands read an empty value as "not given", so `--init-from ''` would
// train a fresh random model and `--resume ''` start over instead of saying that nothing was named.
inline CLI::Validator cli_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "an empty path names no file or folder" : ""; },
      "PATH");
}

}  // namespace agoq

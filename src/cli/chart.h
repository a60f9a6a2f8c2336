// Charts drawn by the Python scripts beside the binary (scripts/*_chart.py, Debian's matplotlib): a command's JSON is
// written next to the PNG, and the script turns one into the other.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace agoq {

// `flag` PNG (it must end in .png) from `j`: the JSON goes to the same path ending in .json, then
// scripts/`script` JSON PNG runs. Either file may replace only an earlier chart of the same kind: a PNG, and a JSON
// object with `json_key`. `env_override`, when set in the environment, is the script's path. One-line errors.
// The checks cli_chart_write makes before it writes, for a command to make before its work.
void cli_chart_check(const char* flag, const std::string& png, const char* json_key);

void cli_chart_write(const char* flag, const nlohmann::json& j, const std::string& png, const char* script,
                     const char* json_key, const char* env_override = nullptr);

}  // namespace agoq

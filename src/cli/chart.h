// Charts drawn by the Python scripts beside the binary (scripts/*_chart.py, Debian's matplotlib): a command's JSON is
// written next to the PNG, and the script turns one into the other.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace agoq {

// The checks cli_chart_write makes before it writes, for a command to make before its work: `png` ends in .png, and
// it and the JSON beside it (the same path ending in .json) may replace only an earlier chart of the same kind: a
// PNG, and a JSON object with `json_key`. One-line errors naming `flag`.
void cli_chart_check(const char* flag, const std::string& png, const char* json_key);

// Writes `j` to the JSON beside `png`, then runs scripts/`script` JSON PNG (`env_override`, when set in the
// environment, is the script's path).
void cli_chart_write(const char* flag, const nlohmann::json& j, const std::string& png, const char* script,
                     const char* json_key, const char* env_override = nullptr);

}  // namespace agoq

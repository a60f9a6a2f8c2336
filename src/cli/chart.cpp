#include "cli/chart.h"

#include <cstdlib>
#include <filesystem>

#include "cli/script_run.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/paths.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

// scripts/NAME in the source tree the binary was built in (the build folder is a child of it), beside the binary, or
// under the current directory.
fs::path chart_script(const char* flag, const char* name, const char* env_override) {
  if (const char* env = env_override ? std::getenv(env_override) : nullptr) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& dir : {exe.parent_path().parent_path(), exe.parent_path(), fs::current_path(ec)})
    if (fs::exists(dir / "scripts" / name, ec)) return dir / "scripts" / name;
  fail(flag, ": scripts/", name, " not found", env_override ? std::string(" (set ") + env_override + ")" : "");
}

// The chart's JSON: the PNG's path ending in .json.
std::string chart_json_path(const std::string& png) { return fs::path(png).replace_extension(".json").string(); }

}  // namespace

void cli_chart_check(const char* flag, const std::string& png, const char* json_key) {
  AGOQ_CHECK(fs::path(png).extension() == ".png" && !fs::path(png).stem().empty(), flag, " ", png,
             ": name a .png file");
  output_file_check_replaceable(flag, png, "a PNG image", output_file_is_png);
  output_file_check_replaceable(std::string(flag) + " " + png + ": the JSON beside it,", chart_json_path(png),
                                "this command's chart JSON",
                                [&](const std::string& p) { return output_file_is_json_with(p, json_key); });
}

void cli_chart_write(const char* flag, const nlohmann::json& j, const std::string& png, const char* script,
                     const char* json_key, const char* env_override) {
  cli_chart_check(flag, png, json_key);
  const std::string json_path = chart_json_path(png);
  const fs::path script_path = chart_script(flag, script, env_override);
  atomic_file_write(json_path, j.dump(2) + "\n");
  cli_script_run(std::string(flag) + ": " + script + " (JSON kept at " + json_path + ")",
                 {"/usr/bin/python3", script_path.string(), json_path, png});
}

}  // namespace agoq

// A temporary path of this test process: the same test may run at once in another checkout's suite, so every
// name carries the process id (before the extension: "plan_chart.png" -> /tmp/agoq_plan_chart_<pid>.png).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace agoq {

inline std::filesystem::path test_temp_path(const std::string& name) {
  const std::filesystem::path p(name);
  return std::filesystem::temp_directory_path() /
         ("agoq_" + p.stem().string() + "_" + std::to_string(::getpid()) + p.extension().string());
}

}  // namespace agoq

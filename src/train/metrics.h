// Training progress for people (a progress bar on a terminal, plain lines otherwise) and for programs (JSONL).
#pragma once
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace agoq {

class MetricsLog {
 public:
  // jsonl_path empty: no file. Appends when `append` (a resumed run continues its log).
  MetricsLog(const std::string& jsonl_path, bool append, long total_steps, int log_every, bool quiet);
  ~MetricsLog();
  // One record per step (written to the JSONL file; a failed write throws); the console shows the bar or every
  // log_every-th line.
  void step(long step, const nlohmann::json& record);
  // A line that must not be overwritten by the bar (eval results, checkpoints).
  void note(const std::string& line);
  void finish();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  long total_;
  int every_;
  bool quiet_, tty_, bar_open_ = false;
  std::chrono::steady_clock::time_point start_;
  long first_step_ = -1;
};

// The tracker's current and peak bytes per category, as a JSON object.
nlohmann::json memory_json();

}  // namespace agoq

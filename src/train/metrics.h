// Training progress for people (a progress bar on a terminal, plain lines otherwise) and for programs (JSONL).
#pragma once
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/memory.h"
#include "model/backend_timed.h"
#include "tboard/tensorboard.h"

namespace agoq {

// The pace of recent steps: remaining time from the mean duration of the last `window` steps, so a slow phase (a
// busy neighbour, the first step's set-up) stops distorting the estimate once it is `window` steps behind.
class StepPace {
 public:
  explicit StepPace(size_t window = 20) : window_(window) {}
  void step_done(double at_seconds);          // the time a step ended, on any steady clock
  double eta_seconds(long steps_left) const;  // 0 until two steps have ended

 private:
  size_t window_;
  std::deque<double> ends_;  // the last window_ + 1 step ends
};

class MetricsLog {
 public:
  // jsonl_path empty: no file. resumed_step >= 0: a resumed run continues the log from that step: the records of
  // later steps (written after the checkpoint by a run that then died) are dropped first, so no step appears twice.
  MetricsLog(const std::string& jsonl_path, long resumed_step, long total_steps, int log_every, bool quiet);
  ~MetricsLog();
  // One record per step (written to the JSONL file; a failed write throws); the console shows the bar or every
  // log_every-th line.
  void step(long step, const nlohmann::json& record);
  // From now on each step's record also goes to TensorBoard, as scalars (`--tensorboard`).
  void tensorboard_attach(std::unique_ptr<TensorBoardWriter> writer) { tboard_ = std::move(writer); }
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
  StepPace pace_;
  std::unique_ptr<TensorBoardWriter> tboard_;
};

// What one training step measured; metrics_step_record writes it as metrics.jsonl's record of the step (to which
// the session adds the validation loss, task scores and memory of steps that have them).
struct StepMetrics {
  long step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, tokens = 0;     // the step's wall time, and the tokens it trained on over every replica
  const char* compute = "";           // the GEMMs' precision (--compute, resolved)
  std::optional<double> comm_wait_s;  // data parallelism: communication not hidden behind the step
  std::optional<double> tp_comm_s;    // tensor parallelism: its collectives' time
  std::optional<OpSeconds> ops;       // --profile: the op time by class (the record adds "rest": the step's remainder)
};
nlohmann::json metrics_step_record(const StepMetrics& m);

// Rewrites the JSONL log at `path` (atomically) without the records of steps after `step`, and a torn last line.
void metrics_log_truncate(const std::string& path, long step);

// A tracker's current and peak bytes per category, as a JSON object (the host's unless told).
nlohmann::json memory_json(MemDevice device = MemDevice::host);

}  // namespace agoq

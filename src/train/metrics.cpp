#include "train/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/memory_json.h"

namespace agoq {

namespace {
std::string format_duration(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  else std::snprintf(buf, sizeof buf, "%ds", int(s));
  return buf;
}
}  // namespace

void StepPace::step_done(double at_seconds) {
  ends_.push_back(at_seconds);
  if (ends_.size() > window_ + 1) ends_.pop_front();
}

double StepPace::eta_seconds(long steps_left) const {
  if (ends_.size() < 2) return 0.0;
  return (ends_.back() - ends_.front()) / double(ends_.size() - 1) * double(steps_left);
}

nlohmann::json metrics_step_record(const StepMetrics& m) {
  nlohmann::json rec = {{"step", m.step},
                        {"loss", m.loss},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"tokens_per_s", m.tokens / m.seconds},
                        {"compute", m.compute}};
  if (m.comm_wait_s) rec["comm_wait_s"] = *m.comm_wait_s;
  if (m.tp_comm_s) rec["tp_comm_s"] = *m.tp_comm_s;
  if (m.ops) {
    for (int c = 0; c < kOpClassCount; ++c) rec["op_seconds"][op_class_name(OpClass(c))] = m.ops->s[c];
    rec["op_seconds"]["rest"] = m.seconds - m.ops->total();
  }
  return rec;
}

void metrics_log_truncate(const std::string& path, long step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // no log yet
  std::string kept, line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: a record torn by a kill
    const nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
    const bool ours = rec.is_object() && rec.contains("step") && rec["step"].is_number_integer();
    if (ours && rec["step"].get<long>() <= step) kept += line + '\n';
  }
  AGOQ_CHECK(!in.bad(), "cannot read metrics file ", path, ": ", std::strerror(errno));
  atomic_file_write(path, kept);
}

MetricsLog::MetricsLog(const std::string& jsonl_path, long resumed_step, long total_steps, int log_every, bool quiet)
    : total_(total_steps), every_(log_every > 0 ? log_every : 1), quiet_(quiet), tty_(isatty(STDERR_FILENO)) {
  if (!jsonl_path.empty()) {
    if (resumed_step >= 0) metrics_log_truncate(jsonl_path, resumed_step);
    file_ = std::fopen(jsonl_path.c_str(), resumed_step >= 0 ? "a" : "w");
    AGOQ_CHECK(file_, "cannot open metrics file ", jsonl_path, ": ", std::strerror(errno));
    path_ = jsonl_path;
  }
  start_ = std::chrono::steady_clock::now();
}

MetricsLog::~MetricsLog() {
  finish();
  if (file_) std::fclose(file_);
}

void MetricsLog::step(long step, const nlohmann::json& rec) {
  if (file_) {  // a record that did not reach the file is an error, not a gap in the log
    const bool ok = std::fprintf(file_, "%s\n", rec.dump().c_str()) >= 0 && std::fflush(file_) == 0;
    AGOQ_CHECK(ok, "cannot write metrics file ", path_, ": ", std::strerror(errno));
  }
  if (tboard_) tboard_->step(step, rec);
  if (quiet_) return;
  pace_.step_done(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  const double eta = pace_.eta_seconds(total_ - step);
  const double loss = rec.value("loss", 0.0), tps = rec.value("tokens_per_s", 0.0);
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = int(kWidth * double(step) / double(total_));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r step %ld/%ld [%s] loss %.4f | %.0f tok/s | ETA %s   ", step, total_, bar.c_str(), loss,
                 tps, format_duration(eta).c_str());
    bar_open_ = true;
  } else if (step % every_ == 0 || step == total_) {
    std::fprintf(stderr, "step %ld/%ld loss %.4f lr %.2e grad_norm %.3f %.0f tok/s ETA %s\n", step, total_, loss,
                 rec.value("lr", 0.0), rec.value("grad_norm", 0.0), tps, format_duration(eta).c_str());
  }
}

void MetricsLog::note(const std::string& line) {
  if (quiet_) return;
  if (bar_open_) std::fprintf(stderr, "\n");
  bar_open_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void MetricsLog::finish() {
  if (bar_open_) std::fprintf(stderr, "\n");
  bar_open_ = false;
}

nlohmann::json memory_json(MemDevice device) {
  auto& t = MemoryTracker::of(device);
  const MemSnapshot cur = t.current(), peak = t.peak_per_category(), at = t.at_peak_total();
  nlohmann::json j = {{"current", mem_bytes_json(cur.bytes)},
                      {"peak", mem_bytes_json(peak.bytes)},
                      {"at_peak", mem_bytes_json(at.bytes)}};
  j["peak_total"] = t.peak_total();
  return j;
}

}  // namespace agoq

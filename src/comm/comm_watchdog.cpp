#include "comm/comm_watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace agoq {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

double comm_timeout_from_env() {
  const char* v = std::getenv("AGOQ_COMM_TIMEOUT");
  if (!v || !*v) return kCommTimeoutDefaultSeconds;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  AGOQ_CHECK(end && *end == '\0' && s >= 0 && s <= 1e6,
             "AGOQ_COMM_TIMEOUT must be seconds in [0, 1e6] (0: no "
             "watchdog), got '",
             v, "'");
  return s;
}

CommWatchdog::CommWatchdog(std::string who, double timeout_s)
    : who_(std::move(who)), timeout_ns_(int64_t(timeout_s * 1e9)), thread_([this] { watch(); }) {}

CommWatchdog::~CommWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommWatchdog::call_begin(const char* what) {
  what_.store(what, std::memory_order_relaxed);
  // From idle the clock starts now (stored before the count, so the watcher never pairs this call with an old
  // time); a call begun beside a pending one does not hide that one's stall.
  if (pending_.load(std::memory_order_acquire) == 0) progress_ns_.store(now_ns(), std::memory_order_release);
  pending_.fetch_add(1, std::memory_order_acq_rel);
}

void CommWatchdog::call_end() {
  progress_ns_.store(now_ns(), std::memory_order_release);
  pending_.fetch_sub(1, std::memory_order_acq_rel);
}

void CommWatchdog::watch() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::milliseconds(500), [this] { return stop_; })) {
    if (pending_.load(std::memory_order_acquire) == 0) continue;
    const int64_t stalled = now_ns() - progress_ns_.load(std::memory_order_acquire);
    if (stalled < timeout_ns_) continue;
    // The main thread is blocked inside MPI: no MPI call from here (MPI_Abort could block on the same dead link).
    std::fprintf(stderr,
                 "agoq: error: %s: MPI %s has not completed in %g s (AGOQ_COMM_TIMEOUT): a peer rank, its host or "
                 "the network to it is gone; this rank exits with status %d\n",
                 who_.c_str(), what_.load(), double(timeout_ns_) / 1e9, kCommTimeoutExit);
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(kCommTimeoutExit);
  }
}

}  // namespace agoq

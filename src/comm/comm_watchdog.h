// The communication watchdog (docs/comm.md, "Faults"): a bound on how long a rank waits for peers that are gone
// without MPI noticing. A host whose network link is down leaves its peers' TCP connections open for many minutes
// (the kernel retransmits for ~15 min), and a peer that hangs while alive keeps them waiting forever; mpirun sees
// neither. The MPI communicator marks each blocking call; a thread checks twice a second that, while a call is
// pending, some call has completed within the timeout. When none has, it prints one line naming this rank, its host
// and the call, and ends the process with exit status kCommTimeoutExit; mpirun then ends the job and names the rank.
//
// Progress is counted per process, over all its threads: a call that completes resets the clock for all. So the
// timeout must exceed the longest single call (a big message over a slow link) and the longest time one rank keeps
// the others waiting (rank 0 writing a checkpoint).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace agoq {

inline constexpr int kCommTimeoutExit = 4;
inline constexpr double kCommTimeoutDefaultSeconds = 120;

// AGOQ_COMM_TIMEOUT in seconds (unset: kCommTimeoutDefaultSeconds; 0: no watchdog). Throws on a malformed value.
double comm_timeout_from_env();

class CommWatchdog {
 public:
  // who: "rank r/N on host"; timeout_s > 0.
  CommWatchdog(std::string who, double timeout_s);
  ~CommWatchdog();
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  // Marks a blocking call for its lifetime; `what` names it in the message (a string literal).
  class Pending {
   public:
    Pending(CommWatchdog* w, const char* what) : w_(w) {
      if (w_) w_->call_begin(what);
    }
    ~Pending() {
      if (w_) w_->call_end();
    }
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;

   private:
    CommWatchdog* w_;
  };

 private:
  void call_begin(const char* what);
  void call_end();
  void watch();

  std::string who_;
  int64_t timeout_ns_;
  std::atomic<int> pending_{0};
  std::atomic<int64_t> progress_ns_{0};  // when a call last began from idle or completed
  std::atomic<const char*> what_{""};    // the call begun last
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace agoq

// How many cores other processes keep busy, so that a run on a shared machine uses the cores that are free instead
// of spinning OpenMP threads against a neighbour: an OpenMP team waits at every barrier for its slowest thread, and
// a thread that shares its core with another CPU-bound process makes every parallel region wait a time slice (on
// 2 cores beside one busy loop, 2 threads trained ~25x slower than 1).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace agoq {

class CpuShare {
 public:
  CpuShare();  // the first sample
  // Cores busy with other processes since the previous call (or construction), from /proc/stat and this process's
  // own CPU time: about 1.0 beside one busy loop, about 0 on a quiet machine. Niced processes do not count (they
  // yield). 0 when /proc/stat cannot be read.
  double others_busy();
  int cores() const { return cores_; }  // this process may run on (its affinity mask)
  double seconds_since_sample() const;

 private:
  struct Sample {
    std::chrono::steady_clock::time_point at;
    double busy_s = 0;  // non-idle, non-nice CPU time of the cores in the mask, all processes
    double self_s = 0;  // this process's user + system time
  };
  Sample sample() const;
  int cores_;
  uint64_t mask_[16] = {};  // cpu_set_t bits of the cores in the mask (up to 1024)
  Sample last_;
};

// The OpenMP threads for `cores` of which others keep `others_busy` busy: the free ones, at least 1.
int cpu_threads_free(int cores, double others_busy);

// Keeps the OpenMP team of the calling thread at the cores other processes leave free, re-measured at most every
// `period_s` seconds. Off when OMP_NUM_THREADS is set (the user chose; under mpirun usually 1 per rank).
class CpuThreads {
 public:
  explicit CpuThreads(double period_s = 2.0);
  // Call between steps. Returns a note ("OpenMP threads 2 -> 1: other processes keep 1.0 of 2 cores busy") when
  // the count changed, else "".
  std::string adapt();
  bool active() const { return active_; }

 private:
  bool active_;
  double period_s_;
  CpuShare share_;
  int threads_;
};

}  // namespace agoq

#include "core/cpu_share.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace agoq {

CpuShare::CpuShare() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    cores_ = CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE && c < 1024; ++c)
      if (CPU_ISSET(c, &set)) mask_[c / 64] |= uint64_t(1) << (c % 64);
  } else {
    cores_ = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    std::fill(std::begin(mask_), std::end(mask_), ~uint64_t(0));
  }
  last_ = sample();
}

CpuShare::Sample CpuShare::sample() const {
  Sample s;
  s.at = std::chrono::steady_clock::now();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.self_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  // Per-core lines: "cpuN user nice system idle iowait irq softirq steal ...", in clock ticks.
  std::ifstream in("/proc/stat");
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  for (std::string line; std::getline(in, line);) {
    int core = -1;
    if (std::sscanf(line.c_str(), "cpu%d", &core) != 1 || core < 0 || core >= 1024) continue;
    if (!(mask_[core / 64] >> (core % 64) & 1)) continue;
    std::istringstream f(line.substr(line.find(' ')));
    uint64_t user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    f >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal;
    s.busy_s += double(user + sys + irq + softirq + steal) * tick;
  }
  return s;
}

double CpuShare::seconds_since_sample() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last_.at).count();
}

double CpuShare::others_busy() {
  const Sample now = sample();
  const double elapsed = std::chrono::duration<double>(now.at - last_.at).count();
  const double others = (now.busy_s - last_.busy_s) - (now.self_s - last_.self_s);
  last_ = now;
  if (elapsed <= 0 || now.busy_s == 0) return 0.0;
  return std::clamp(others / elapsed, 0.0, double(cores_));
}

int cpu_threads_free(int cores, double others_busy) {
  return std::max(1, int(std::lround(double(cores) - others_busy)));
}

CpuThreads::CpuThreads(double period_s)
    : active_(std::getenv("OMP_NUM_THREADS") == nullptr), period_s_(period_s), threads_(omp_get_max_threads()) {}

std::string CpuThreads::adapt() {
  if (!active_ || share_.seconds_since_sample() < period_s_) return {};
  const double others = share_.others_busy();
  const int want = std::min(cpu_threads_free(share_.cores(), others), share_.cores());
  if (want == threads_) return {};
  char note[128];
  std::snprintf(note, sizeof note, "OpenMP threads %d -> %d: other processes keep %.1f of %d cores busy", threads_,
                want, others, share_.cores());
  threads_ = want;
  omp_set_num_threads(want);
  return note;
}

}  // namespace agoq

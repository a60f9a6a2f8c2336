// CpuShare sees other processes' CPU use; cpu_threads_free picks the free cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

#include "core/cpu_share.h"

namespace agoq {
namespace {

TEST(CpuShare, ThreadsAreTheFreeCoresAtLeastOne) {
  EXPECT_EQ(cpu_threads_free(2, 0.0), 2);
  EXPECT_EQ(cpu_threads_free(2, 0.3), 2);
  EXPECT_EQ(cpu_threads_free(2, 0.7), 1);
  EXPECT_EQ(cpu_threads_free(2, 1.0), 1);
  EXPECT_EQ(cpu_threads_free(2, 2.0), 1);  // never none
  EXPECT_EQ(cpu_threads_free(16, 3.2), 13);
}

// Another process's CPU time is seen: at least what a spinning child used, whatever else runs beside the test.
double children_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

TEST(CpuShare, SeesOtherProcesses) {
  const double before = children_cpu_s();
  CpuShare share;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {  // spins until it has had 0.3 s of CPU (however loaded the machine is), or 20 s have passed
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::clock() < CLOCKS_PER_SEC * 3 / 10 && std::chrono::steady_clock::now() < give_up) {}
    _exit(0);
  }
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const double child_s = children_cpu_s() - before;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double others_s = share.others_busy() * elapsed;
  EXPECT_GT(child_s, 0.1) << "the child should have run";
  EXPECT_GE(others_s, child_s - 0.05) << "clock-tick granularity aside, the child's time is others' time";
  EXPECT_LE(share.others_busy(), double(share.cores()));
}

}  // namespace
}  // namespace agoq

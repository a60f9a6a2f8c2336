// CpuShare sees other processes' CPU use and not this one's; cpu_threads_free picks the free cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

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

// A child spinning for half a second is another process's load; this process spinning is not.
TEST(CpuShare, CountsOtherProcessesNotItself) {
  CpuShare share;
  const pid_t child = fork();
  if (child == 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    while (std::chrono::steady_clock::now() < end) {
    }
    _exit(0);
  }
  ASSERT_GT(child, 0);
  (void)share.others_busy();  // from here on
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double with_child = share.others_busy();
  waitpid(child, nullptr, 0);
  EXPECT_GE(with_child, 0.4) << "a busy child should hold most of a core";
  EXPECT_LE(with_child, double(share.cores()));

  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (std::chrono::steady_clock::now() < end) {  // this process's own load
  }
  const double self_only = share.others_busy();
  // We held about a core ourselves, so others cannot have had all of them (unless ours were counted as theirs).
  EXPECT_LE(self_only, double(share.cores()) - 0.5) << "our own spinning must not count as others'";
}

}  // namespace
}  // namespace agoq

// The communication watchdog (comm/comm_watchdog.h) on its own, without MPI: its timeout from the environment, no
// exit while calls keep completing, and the exit with its message when a call stalls. The same watchdog inside the
// MPI communicator, ending a job whose peer stalls: comm_fault_hang (tests/mpi_tests.cmake).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "../common/expect_error.h"
#include "comm/comm_watchdog.h"

namespace agoq {
namespace {

struct EnvTimeout {  // sets AGOQ_COMM_TIMEOUT for one test and restores it
  const char* old = std::getenv("AGOQ_COMM_TIMEOUT");
  std::string saved = old ? old : "";
  explicit EnvTimeout(const char* v) { v ? setenv("AGOQ_COMM_TIMEOUT", v, 1) : unsetenv("AGOQ_COMM_TIMEOUT"); }
  ~EnvTimeout() { old ? setenv("AGOQ_COMM_TIMEOUT", saved.c_str(), 1) : unsetenv("AGOQ_COMM_TIMEOUT"); }
};

TEST(CommWatchdog, TimeoutFromEnvironment) {
  {
    EnvTimeout e(nullptr);
    EXPECT_EQ(comm_timeout_from_env(), kCommTimeoutDefaultSeconds);
  }
  {
    EnvTimeout e("2.5");
    EXPECT_EQ(comm_timeout_from_env(), 2.5);
  }
  {
    EnvTimeout e("0");
    EXPECT_EQ(comm_timeout_from_env(), 0.0);
  }
  for (const char* bad : {"abc", "-1", "5s", "1e9"}) {
    EnvTimeout e(bad);
    expect_error([] { comm_timeout_from_env(); }, {"AGOQ_COMM_TIMEOUT", bad});
  }
}

TEST(CommWatchdog, CallsThatCompleteKeepItQuiet) {
  // 0.3 s timeout, 1.2 s of 50 ms calls, idle gaps longer than the timeout in between: no exit.
  CommWatchdog w("test", 0.3);
  for (int i = 0; i < 12; ++i) {
    const CommWatchdog::Pending p(&w, "all-reduce");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // nothing pending: idle is not a stall
  const CommWatchdog::Pending p(&w, "barrier");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

TEST(CommWatchdog, StalledCallEndsTheProcess) {
  EXPECT_EXIT(
      {
        CommWatchdog w("rank 0/2 on hostA", 0.5);
        const CommWatchdog::Pending p(&w, "barrier");
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(kCommTimeoutExit),
      "agoq: error: rank 0/2 on hostA: MPI barrier has not completed in 0.5 s");
}

}  // namespace
}  // namespace agoq

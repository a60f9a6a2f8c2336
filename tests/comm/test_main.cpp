// test_comm's main: starts the world (one rank without MPI when run alone, MPI under mpirun -np N), runs the gtest
// suite on every rank and fails the process on every rank if any rank failed. Rank 0 prints gtest's usual output;
// the other ranks print only their failures, prefixed with their rank.
//
// AGOQ_TEST_COMM_FAULT selects a fault scenario instead of the suite (tests/mpi_tests.cmake runs them):
//   exit    the last rank _exit(3)s in the middle of a loop of all-reduces (the others must not hang)
//   config  the last rank hashes a different config (one clear message from rank 0, every rank exits non-zero)
//   error   the last rank throws an ordinary error (the job is aborted with the rank's message)
//   hang    the last rank stops calling MPI while alive (the others' watchdog must end the job, comm_watchdog.h)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_check.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace agoq {
namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed()) std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, t.test_suite_name(), t.name());
  }

 private:
  int rank_;
};

int fault_rank_exit(Communicator& w) {
  std::vector<float> x(1024, 1.0f);
  for (int it = 0; it < 1000; ++it) {
    if (it == 5 && w.rank() == w.size() - 1) {
      std::fprintf(stderr, "fault test: rank %d exits with code 3 without finalising\n", w.rank());
      _exit(3);
    }
    w.allreduce_sum(x.data(), x.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "fault test: rank %d finished the loop: the dead rank was not noticed\n", w.rank());
  return 0;
}

int fault_rank_hang(Communicator& w) {
  w.barrier();
  if (w.rank() == w.size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  w.barrier();
  std::fprintf(stderr, "fault test: rank %d passed the barrier: the stalled peer was not noticed\n", w.rank());
  return 0;
}

int fault_scenario(Communicator& w, const std::string& mode) {
  if (mode == "exit") return fault_rank_exit(w);
  if (mode == "hang") return fault_rank_hang(w);
  try {
    try {
      const bool odd = w.rank() == w.size() - 1 && w.size() > 1;
      if (mode == "config") comm_check_consistent(w, odd ? "dim=256 layers=6 data=b" : "dim=256 layers=6 data=a");
      if (mode == "error" && odd) fail("cannot read shard 3 of the corpus");
      w.barrier();
    } catch (...) {
      comm_fail(w, std::current_exception());
    }
  } catch (const Error& e) {  // what the CLI's main does
    std::fprintf(stderr, "agoq: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace agoq

int main(int argc, char** argv) {
  bool listing = false;  // gtest_discover_tests lists the tests: no MPI needed for that
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--gtest_list_tests", 18) == 0;
  ::testing::InitGoogleTest(&argc, argv);
  if (listing) return RUN_ALL_TESTS();

  agoq::Communicator& world = agoq::comm_world();
  if (const char* mode = std::getenv("AGOQ_TEST_COMM_FAULT")) return agoq::fault_scenario(world, mode);

  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new agoq::RankFailurePrinter(world.rank()));
  }
  int rc = RUN_ALL_TESTS();
  rc = world.allreduce_value<int32_t>(rc, agoq::CommOp::max);  // one failing rank fails every rank
  if (rc && world.rank() == 0 && world.size() > 1) std::fprintf(stderr, "test_comm: a rank failed (see above)\n");
  return rc;
}

// test_parallel's main: initialises MPI (a world of one when run alone, or under mpirun -np N), runs the suite on
// every rank and fails every rank if any rank failed. Rank 0 prints gtest's output; the others only their failures.
// AGOQ_TEST_WRITE_DATA=<dir>: writes the synthetic corpus for the CLI fault tests (tests/mpi_tests.cmake) and exits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/communicator.h"
#include "parallel_test_util.h"

namespace {
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.message());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  bool listing = false;  // gtest_discover_tests lists the tests: no MPI for that
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--gtest_list_tests", 18) == 0;
  ::testing::InitGoogleTest(&argc, argv);
  if (listing) return RUN_ALL_TESTS();
  if (const char* dir = std::getenv("AGOQ_TEST_WRITE_DATA")) {
    agoq::dp_test_write_corpus(dir);
    return 0;
  }
  agoq::Communicator& world = agoq::comm_world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  int rc = RUN_ALL_TESTS();
  rc = world.allreduce_value<int32_t>(rc, agoq::CommOp::max);  // one failing rank fails every rank
  if (rc && world.rank() == 0 && world.size() > 1) std::fprintf(stderr, "test_parallel: a rank failed\n");
  return rc;
}

// CommJobs: jobs run in index order whatever order they are marked ready in (so every rank issues the same
// collectives), on the communication thread or inside wait_all, and a failing job is rethrown by wait_all without
// spoiling the next round.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "comm/comm_jobs.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/rng.h"

namespace agoq {
namespace {

TEST(CommJobs, RunInIndexOrderWhateverTheReadyOrder) {
  Communicator& w = comm_world();
  const int n = 9;
  for (bool overlap : {true, false}) {
    std::vector<int> order;  // written by the jobs' thread, read after wait_all
    std::vector<int64_t> sums(n);
    CommJobs jobs(
        n, [&](int j) { order.push_back(j), sums[j] = w.allreduce_value(int64_t(j + 1)); }, overlap);
    EXPECT_EQ(jobs.overlapping(), overlap && comm_thread_level() != CommThreads::single);
    Rng rng(3, uint64_t(w.rank()));
    for (int round = 0; round < 2; ++round) {
      std::vector<int> marks(n);
      std::iota(marks.begin(), marks.end(), 0);
      for (int i = n - 1; i > 0; --i) std::swap(marks[i], marks[rng.below(uint64_t(i + 1))]);  // another order per rank
      marks.resize(n - 2 * round);  // round 1: wait_all starts the last two itself
      for (int j : marks) jobs.ready(j);
      jobs.wait_all();
      std::vector<int> want(n);
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(order, want) << "overlap " << overlap << ", round " << round;
      for (int j = 0; j < n; ++j) EXPECT_EQ(sums[j], int64_t(j + 1) * w.size()) << "job " << j;
      order.clear();
    }
  }
}

TEST(CommJobs, FailureIsRethrownAndTheNextRoundRunsClean) {
  for (bool overlap : {true, false}) {
    std::vector<int> order;
    bool fail = true;
    CommJobs jobs(
        5,
        [&](int j) {
      if (fail && j == 2) throw Error("job 2 failed");
      order.push_back(j);
        },
        overlap);
    for (int j = 0; j < 5; ++j) jobs.ready(j);
    EXPECT_THROW(jobs.wait_all(), Error);
    EXPECT_EQ(order, (std::vector<int>{0, 1})) << "the jobs after a failure are skipped";
    fail = false, order.clear();
    jobs.wait_all();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  }
}

TEST(CommJobs, NoSuchJobIsAnError) {
  CommJobs jobs(2, [](int) {});
  EXPECT_THROW(jobs.ready(2), Error);
  EXPECT_THROW(jobs.ready(-1), Error);
}

}  // namespace
}  // namespace agoq

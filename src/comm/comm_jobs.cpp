#include "comm/comm_jobs.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "comm/communicator.h"
#include "core/error.h"

namespace agoq {

CommJobs::CommJobs(int count, std::function<void(int)> run, bool overlap, int omp_threads)
    : run_(std::move(run)), ready_(size_t(std::max(count, 0)), 0) {
  // MPI must allow a second thread to call it (serialized is enough: only this thread calls in the window).
  if (overlap && comm_thread_level() != CommThreads::single)
    thread_ = std::thread([this, omp_threads] { thread_main(omp_threads); });
}

CommJobs::~CommJobs() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CommJobs::thread_main(int omp_threads) {
  omp_set_num_threads(std::max(1, omp_threads));  // this thread's own team
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stop_ || (next_ < count() && ready_[next_]); });
    if (stop_) return;
    const int j = next_;
    lk.unlock();
    try {
      if (!error_) run_(j);  // after a failure the rest are skipped; wait_all rethrows it
    } catch (...) {
      error_ = std::current_exception();  // written before next_ advances under the lock; read after
    }
    lk.lock();
    ++next_;
    if (next_ == count()) cv_done_.notify_all();
  }
}

void CommJobs::ready(int job) {
  AGOQ_CHECK(job >= 0 && job < count(), "comm jobs: no job ", job, " (", count(), " jobs)");
  {
    std::lock_guard<std::mutex> lk(mu_);
    ready_[job] = 1;
  }
  cv_work_.notify_one();
}

void CommJobs::wait_all() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  std::fill(ready_.begin(), ready_.end(), 1);
  if (thread_.joinable()) {
    cv_work_.notify_one();
    cv_done_.wait(lk, [&] { return next_ == count(); });
  } else {
    try {
      for (; next_ < count(); ++next_) run_(next_);
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  next_ = 0;
  last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace agoq

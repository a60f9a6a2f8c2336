// Collectives that run on a communication thread while the caller computes: a fixed list of jobs 0..count-1, each
// started once the caller has marked it ready and every job before it has run. So every rank issues the same
// collectives in the same order, whatever order the marks come in. GradBuckets' buckets (comm/grad_buckets.h) and
// the q8 gradient store's units (parallel/grad_reduce.h) are such jobs.
//
// Per round:  ready(j) as job j's inputs become final (any order, any subset)
//             wait_all()   runs the jobs not yet run, waits for all and rethrows a failure; the next round may begin
// Between the first ready() and wait_all() only the communication thread calls MPI (the serialized contract), so
// the caller must not run collectives of its own in that window.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace agoq {

class CommJobs {
 public:
  // run(j) performs job j. It is called on the communication thread, or inside wait_all() on the caller's when
  // overlap is off or MPI allows one thread only (the reference: same jobs, same order, same calls). omp_threads:
  // the OpenMP team of the communication thread's passes, so that the caller keeps its cores.
  CommJobs(int count, std::function<void(int job)> run, bool overlap = true, int omp_threads = 1);
  ~CommJobs();
  CommJobs(const CommJobs&) = delete;
  CommJobs& operator=(const CommJobs&) = delete;

  int count() const { return int(ready_.size()); }
  bool overlapping() const { return thread_.joinable(); }
  // Job j's inputs are final (called on the caller's thread).
  void ready(int job);
  void wait_all();
  // Seconds the last wait_all() blocked (the communication that the caller's computing did not hide).
  double last_wait_seconds() const { return last_wait_s_; }

 private:
  void thread_main(int omp_threads);

  std::function<void(int)> run_;
  std::vector<char> ready_;  // per job, this round
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  int next_ = 0;  // next job to run
  bool stop_ = false;
  std::exception_ptr error_;
  double last_wait_s_ = 0;
  std::thread thread_;
};

}  // namespace agoq

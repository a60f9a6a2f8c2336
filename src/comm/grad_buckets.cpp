#include "comm/grad_buckets.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace agoq {

GradBuckets::GradBuckets(Communicator& comm, float* grads, size_t n, std::vector<GradRange> layers,
                         const GradBucketsOptions& opts)
    : comm_(comm), grads_(grads), opts_(opts), layer_buckets_(layers.size()) {
  AGOQ_CHECK(opts.bucket_bytes >= sizeof(float), "grad buckets: bucket size must be at least 4 bytes");
  AGOQ_CHECK(opts.block >= 1 && opts.block <= 65536, "grad buckets: block must be in [1, 65536], got ", opts.block);
  // The layer ranges must tile [0, n): every gradient is reduced exactly once.
  std::vector<GradRange> sorted = layers;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  size_t at = 0;
  for (const GradRange& r : sorted) {
    AGOQ_CHECK(r.begin <= r.end && r.begin == at, "grad buckets: layer ranges must tile [0, ", n,
               ") without gaps or overlap (a range starts at ", r.begin, ", expected ", at, ")");
    at = r.end;
  }
  AGOQ_CHECK(at == n, "grad buckets: layer ranges cover [0, ", at, ") but the gradient buffer has ", n, " values");

  // Buckets in reverse layer order: a layer joins the open bucket if adjacent to it and the cap allows; a layer
  // larger than the cap is cut into cap-sized buckets.
  const size_t cap = opts.bucket_bytes / sizeof(float);
  auto open_new = [&](size_t b, size_t e) { buckets_.push_back({{b, e}, {}, 0, false}); };
  for (int l = int(layers.size()) - 1; l >= 0; --l) {
    const GradRange r = layers[l];
    if (!r.size()) continue;
    for (size_t e = r.end; e > r.begin;) {  // from the layer's end, so the buckets walk the buffer backwards
      const size_t s = e - std::min(cap, e - r.begin);
      Bucket* cur = buckets_.empty() ? nullptr : &buckets_.back();
      const bool join = cur && cur->range.size() + (e - s) <= cap && (cur->range.begin == e || cur->range.end == s);
      if (!join) open_new(s, e);
      Bucket& bk = buckets_.back();
      if (join) bk.range = {std::min(bk.range.begin, s), std::max(bk.range.end, e)};
      if (bk.layers.empty() || bk.layers.back() != l) {
        bk.layers.push_back(l);
        layer_buckets_[l].push_back(int(buckets_.size()) - 1);
      }
      e = s;
    }
  }
  for (Bucket& b : buckets_) b.pending = int(b.layers.size());

  // MPI must allow a second thread to call it (serialized is enough: only this thread calls during backward).
  const bool threads_ok = comm_thread_level() != CommThreads::single;
  if (opts_.overlap && threads_ok) thread_ = std::thread([this] { comm_thread_main(); });
}

GradBuckets::~GradBuckets() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradBuckets::reduce_bucket(int b) {
  const GradRange r = buckets_[b].range;
  float* g = grads_ + r.begin;
  if (opts_.reduce == GradReduce::q8) {
    CommQ8Options q;
    q.block = opts_.block;
    q.average = opts_.average;
    comm_allreduce_q8(comm_, ws_, g, g, r.size(), q);
    return;
  }
  if (comm_.size() == 1) return;
  comm_.allreduce(g, g, r.size(), CommDtype::f32, CommOp::sum);
  if (opts_.average)
    for (size_t i = 0; i < r.size(); ++i) g[i] /= float(comm_.size());
}

void GradBuckets::comm_thread_main() {
  omp_set_num_threads(std::max(1, opts_.comm_omp_threads));  // this thread's own team; backward keeps its cores
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stop_ || (next_ < bucket_count() && buckets_[next_].ready); });
    if (stop_) return;
    const int b = next_;
    lk.unlock();
    try {
      if (!error_) reduce_bucket(b);
    } catch (...) {
      error_ = std::current_exception();  // written before next_ advances under the lock; read after
    }
    lk.lock();
    ++next_;
    if (next_ == bucket_count()) cv_done_.notify_all();
  }
}

void GradBuckets::mark_ready_locked(int b) {
  AGOQ_CHECK(b >= 0 && b < bucket_count(), "grad buckets: no bucket ", b, " (", bucket_count(), " buckets)");
  buckets_[b].ready = true;
}

void GradBuckets::layer_ready(int layer) {
  AGOQ_CHECK(layer >= 0 && layer < int(layer_buckets_.size()), "grad buckets: no layer ", layer);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int b : layer_buckets_[layer])
      if (--buckets_[b].pending == 0) mark_ready_locked(b), wake = true;
  }
  if (wake) cv_work_.notify_one();
}

void GradBuckets::bucket_ready(int b) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    mark_ready_locked(b);
  }
  cv_work_.notify_one();
}

void GradBuckets::wait_all() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  for (Bucket& b : buckets_) b.ready = true;
  if (thread_.joinable()) {
    cv_work_.notify_one();
    cv_done_.wait(lk, [&] { return next_ == bucket_count(); });
  } else {
    try {  // the reference: same buckets, same order, same calls, on this thread
      for (; next_ < bucket_count(); ++next_) reduce_bucket(next_);
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  for (Bucket& b : buckets_) b.ready = false, b.pending = int(b.layers.size());
  next_ = 0;
  last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace agoq

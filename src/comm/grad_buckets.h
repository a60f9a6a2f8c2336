// Gradient buckets: the flat gradient buffer is cut into buckets (default 4 MiB) in reverse layer order, and each
// bucket is all-reduced as soon as backward has produced all of its layers' gradients, on a communication thread,
// while backward goes on computing earlier layers. The reduction is either a plain fp32 all-reduce or allreduce_q8.
//
// Per step:   layer_ready(l) for l = L-1 .. 0 as backward finishes layer l   (or bucket_ready(b) directly)
//             wait_all()   before the optimizer step: every bucket is reduced in place in the gradient buffer
// The buckets are comm/comm_jobs.h's jobs: between the first layer_ready() and wait_all() only the communication
// thread calls MPI (the serialized contract), so the trainer must not run its own collectives in that window.
#pragma once
#include <cstddef>
#include <vector>

#include "comm/allreduce_q8.h"
#include "comm/comm_jobs.h"
#include "comm/communicator.h"

namespace agoq {

struct GradRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

struct GradBucketsOptions {
  size_t bucket_bytes = 4 << 20;
  GradReduce reduce = GradReduce::q8;
  bool average = true;       // mean over ranks (data parallelism); false: sum
  int block = 256;           // q8 block
  bool overlap = true;       // false: every bucket is reduced by wait_all on the caller's thread (the reference)
  int comm_omp_threads = 1;  // OpenMP threads of the communication thread's quantize/reduce passes
};

class GradBuckets {
 public:
  // grads[0..n) is the flat gradient buffer (it must outlive this object); layers[l] is layer l's range in it,
  // and the ranges must tile [0, n) without overlap. Layers are numbered in forward order.
  GradBuckets(Communicator& comm, float* grads, size_t n, std::vector<GradRange> layers,
              const GradBucketsOptions& opts = {});

  // The allreduce_q8 workspace these buckets take on rank `rank` of `nranks` (reserved at construction;
  // MemCategory::communication): the largest bucket's call, none for fp32 all-reduces.
  static CommQ8WorkspaceBytes workspace_bytes(const std::vector<GradRange>& layers, size_t n,
                                              const GradBucketsOptions& opts, int nranks, int rank, bool one_host);

  int bucket_count() const { return int(buckets_.size()); }
  GradRange bucket_range(int b) const { return buckets_[b].range; }
  const std::vector<int>& bucket_layers(int b) const { return buckets_[b].layers; }
  bool overlapping() const { return jobs_.overlapping(); }

  // Layer l's gradients are final: buckets all of whose layers are final start.
  void layer_ready(int layer);
  // Bucket b's gradients are final. Buckets are reduced in index order (0 holds the last layers), so every rank
  // issues the same collectives in the same order whatever order the calls come in.
  void bucket_ready(int b);
  // Starts any bucket not yet started, waits for all, and rethrows a failure of the communication thread. After it
  // returns the buffer holds the reduced gradients and the next step may begin.
  void wait_all();
  // Seconds the last wait_all() blocked (the communication that backward did not hide).
  double last_wait_seconds() const { return jobs_.last_wait_seconds(); }

 private:
  struct Bucket {
    GradRange range;
    std::vector<int> layers;
    int pending = 0;  // layers not yet ready in this step (touched by the caller's thread only)
  };
  static std::vector<Bucket> buckets_of(const std::vector<GradRange>& layers, size_t n, const GradBucketsOptions& o);
  void reduce_bucket(int b);
  static CommQ8Options q8_options(const GradBucketsOptions& opts);

  Communicator& comm_;
  float* grads_;
  GradBucketsOptions opts_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> layer_buckets_;
  CommQ8Workspace ws_;  // the communication thread's
  CommJobs jobs_;       // last: its thread stops before what reduce_bucket uses goes
};

}  // namespace agoq

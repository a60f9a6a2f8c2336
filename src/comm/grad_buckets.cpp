#include "comm/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace agoq {

std::vector<GradBuckets::Bucket> GradBuckets::buckets_of(const std::vector<GradRange>& layers, size_t n,
                                                         const GradBucketsOptions& opts) {
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
  std::vector<Bucket> buckets;
  for (int l = int(layers.size()) - 1; l >= 0; --l) {
    const GradRange r = layers[l];
    for (size_t e = r.end; e > r.begin;) {  // from the layer's end, so the buckets walk the buffer backwards
      const size_t s = e - std::min(cap, e - r.begin);
      Bucket* cur = buckets.empty() ? nullptr : &buckets.back();
      const bool join = cur && cur->range.size() + (e - s) <= cap && (cur->range.begin == e || cur->range.end == s);
      if (!join) buckets.push_back({{s, e}, {}, 0});
      Bucket& bk = buckets.back();
      if (join) bk.range = {std::min(bk.range.begin, s), std::max(bk.range.end, e)};
      if (bk.layers.empty() || bk.layers.back() != l) bk.layers.push_back(l);
      e = s;
    }
  }
  for (Bucket& b : buckets) b.pending = int(b.layers.size());
  return buckets;
}

GradBuckets::GradBuckets(Communicator& comm, float* grads, size_t n, std::vector<GradRange> layers,
                         const GradBucketsOptions& opts)
    : comm_(comm),
      grads_(grads),
      opts_(opts),
      buckets_(buckets_of(layers, n, opts)),
      layer_buckets_(layers.size()),
      jobs_(
          int(buckets_.size()), [this](int b) { reduce_bucket(b); }, opts.overlap, opts.comm_omp_threads) {
  for (int b = 0; b < bucket_count(); ++b)
    for (int l : buckets_[b].layers) layer_buckets_[l].push_back(b);
  ws_.reserve(workspace_bytes(layers, n, opts, comm.size(), comm.rank(), comm.one_host()));
}

CommQ8Options GradBuckets::q8_options(const GradBucketsOptions& opts) {
  CommQ8Options q;
  q.block = opts.block;
  q.average = opts.average;
  return q;
}

CommQ8WorkspaceBytes GradBuckets::workspace_bytes(const std::vector<GradRange>& layers, size_t n,
                                                  const GradBucketsOptions& opts, int nranks, int rank, bool one_host) {
  CommQ8WorkspaceBytes most;
  if (opts.reduce != GradReduce::q8 || nranks == 1) return most;
  const CommQ8Options q = q8_options(opts);
  for (const Bucket& b : buckets_of(layers, n, opts))
    if (!comm_q8_falls_back(b.range.size(), q))
      most.grow_to(comm_q8_workspace_bytes(comm_q8_plan(b.range.size(), nranks, q.block), rank, one_host, q));
  return most;
}

void GradBuckets::reduce_bucket(int b) {
  const GradRange r = buckets_[b].range;
  float* g = grads_ + r.begin;
  if (opts_.reduce == GradReduce::q8) {
    comm_allreduce_q8(comm_, ws_, g, g, r.size(), q8_options(opts_));
    return;
  }
  if (comm_.size() == 1) return;
  comm_.allreduce(g, g, r.size(), CommDtype::f32, CommOp::sum);
  if (opts_.average)
    for (size_t i = 0; i < r.size(); ++i) g[i] /= float(comm_.size());
}

void GradBuckets::layer_ready(int layer) {
  AGOQ_CHECK(layer >= 0 && layer < int(layer_buckets_.size()), "grad buckets: no layer ", layer);
  for (int b : layer_buckets_[layer])
    if (--buckets_[b].pending == 0) jobs_.ready(b);
}

void GradBuckets::bucket_ready(int b) { jobs_.ready(b); }

void GradBuckets::wait_all() {
  for (Bucket& b : buckets_) b.pending = int(b.layers.size());  // before a rethrow: the next step starts clean
  jobs_.wait_all();
}

}  // namespace agoq

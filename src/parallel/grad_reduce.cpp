#include "parallel/grad_reduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "optim/adamw.h"

namespace agoq {

std::vector<GradUnit> grad_units_sharded(const std::vector<GradRange>& units, int D, int rank, bool zero, int block) {
  std::vector<GradUnit> out;
  for (const GradRange& r : units) {
    GradUnit u{r, {0, r.size()}, {}, {}};
    if (zero) {
      for (int k = 0; k < D; ++k) {
        const CommShard s = comm_shard_range(r.size(), D, k, block);
        u.counts.push_back(s.size());
        u.displs.push_back(s.begin);
      }
      u.own = comm_shard_range(r.size(), D, rank, block);
    }
    out.push_back(std::move(u));
  }
  return out;
}

namespace {
GradBucketsOptions buckets_options(const GradReduceOptions& o, int block) {
  GradBucketsOptions b;
  b.bucket_bytes = o.bucket_bytes;
  b.reduce = o.reduce;
  b.average = false;  // micro-batch gradients are already scaled by 1 / (D * m)
  b.block = block;
  b.overlap = o.overlap;
  return b;
}
}  // namespace

CommQ8WorkspaceBytes grad_reduce_workspace_bytes(const std::vector<GradUnit>& units,
                                                 const std::vector<std::vector<GradRange>>& pieces, bool store_q8,
                                                 int block, const GradReduceOptions& o, int D, int rank,
                                                 bool one_host) {
  CommQ8WorkspaceBytes most;
  if (D == 1 || o.reduce != GradReduce::q8) return most;
  CommQ8Options q;
  q.block = block;
  if (o.zero) {  // reduce_piece: each piece of each unit reduce-scattered
    for (size_t u = 0; u < units.size(); ++u) {
      const size_t whole = units[u].range.size();
      if (comm_q8_falls_back(whole, q)) continue;
      for (const GradRange& p : pieces[u])
        most.grow_to(
            comm_q8_workspace_bytes(comm_q8_plan_piece(whole, p.begin, p.size(), D, block), rank, one_host, q));
    }
  } else if (store_q8) {  // reduce_unit_codes: every unit whole, no fallback
    for (const GradUnit& u : units)
      most.grow_to(comm_q8_workspace_bytes(comm_q8_plan(u.range.size(), D, block), rank, one_host, q));
  } else {
    std::vector<GradRange> layers;
    for (const GradUnit& u : units) layers.push_back(u.range);
    const size_t n = layers.empty() ? 0 : layers.back().end;
    most = GradBuckets::workspace_bytes(layers, n, buckets_options(o, block), D, rank, one_host);
  }
  return most;
}

GradReducer::GradReducer(Communicator& comm, GradStore& store, const std::vector<GradUnit>& units,
                         const GradReduceOptions& o)
    : comm_(comm), store_(store), units_(units), opts_(o), D_(comm.size()) {
  if (o.zero) {
    size_t total = 0;
    for (const GradUnit& u : units) shard_at_.push_back(total), total += u.own.size();
    grad_shard_ = Buffer<float>(total, MemCategory::gradients, "grad.shard");
  } else if (!store.q8() && D_ > 1) {
    buckets_ = std::make_unique<GradBuckets>(comm, store.fp32_data(), store.size(), store.units(),
                                             buckets_options(o, store.block()));
  } else if (D_ > 1 && o.reduce == GradReduce::q8) {  // q8 store: units in the order backward finishes them
    const int U = int(units.size());
    unit_jobs_ = std::make_unique<CommJobs>(
        U, [this, U](int j) { reduce_unit_codes(U - 1 - j); }, o.overlap);
  }
  if (o.zero || store.q8())  // the buckets reserve their own
    ws_.reserve(grad_reduce_workspace_bytes(units, store.pieces(), store.q8(), store.block(), o, D_, comm.rank(),
                                            comm.one_host()));
}

void GradReducer::unit_ready(int u, bool first_micro, bool last_micro, uint64_t seed) {
  store_.unit_ready(u, first_micro, seed);
  if (!last_micro) return;
  if (buckets_) buckets_->layer_ready(u);
  if (unit_jobs_) unit_jobs_->ready(int(units_.size()) - 1 - u);
}

double GradReducer::reduce() {
  if (buckets_) {
    buckets_->wait_all();
    return buckets_->last_wait_seconds();
  }
  if (unit_jobs_) {
    unit_jobs_->wait_all();
    return unit_jobs_->last_wait_seconds();
  }
  if (!opts_.zero && !(store_.q8() && D_ > 1)) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int u = int(units_.size()) - 1; u >= 0; --u)  // as backward produced
    for (const GradRange& p : store_.pieces(u)) reduce_piece(u, p, store_.unit_fp32(u, p));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradReducer::reduce_piece(int ui, GradRange p, float* g) {
  const GradUnit& u = units_[ui];
  const size_t n = p.size();
  CommQ8Options q;
  q.block = store_.block();
  if (opts_.zero) {  // where this rank's shard meets the piece -> its place in grad_shard_
    const size_t lo = std::clamp(u.own.begin, p.begin, p.end);
    float* out = grad_shard_.data() + shard_at_[ui] + (lo - u.own.begin);
    if (D_ == 1) {
      std::memcpy(out, g, n * sizeof(float));
    } else if (opts_.reduce == GradReduce::q8) {
      comm_reduce_scatter_q8_piece(comm_, ws_, g, u.range.size(), p.begin, n, out, q);
    } else {
      std::vector<size_t> counts(D_);
      for (int k = 0; k < D_; ++k)
        counts[k] = std::clamp(u.displs[k] + u.counts[k], p.begin, p.end) - std::clamp(u.displs[k], p.begin, p.end);
      comm_.reduce_scatter(g, out, counts.data(), CommDtype::f32, CommOp::sum);
    }
    return;
  }
  // q8 store + MPI all-reduce: the reduced piece goes back into the 8-bit buffer.
  comm_.allreduce(g, g, n, CommDtype::f32, CommOp::sum);
  store_.quantize(ui, p, g);
}

void GradReducer::reduce_unit_codes(int ui) {
  GradQ8Buffer& b = store_.q8_buffer(ui);
  CommQ8Options q;
  q.block = store_.block();
  comm_allreduce_q8_codes_inplace(comm_, ws_, b.codes.data(), b.scales.data(), b.n, q);
}

double GradReducer::sum_squares() {
  if (!opts_.zero) return store_.sum_squares();  // every rank holds the same reduced values: no collective needed
  const double local = grad_sum_squares(grad_shard_.data(), grad_shard_.size());
  return D_ > 1 ? comm_.allreduce_value(local) : local;
}

std::vector<GradRange> GradReducer::pieces(int ui) const {
  if (opts_.zero) return {{units_[ui].own.begin, units_[ui].own.end}};
  return store_.pieces(ui);
}

float* GradReducer::reduced(int ui, GradRange p) {
  const GradUnit& u = units_[ui];
  if (opts_.zero) return grad_shard_.data() + shard_at_[ui] - (u.range.begin + u.own.begin);
  return store_.unit_fp32(ui, p) - (u.range.begin + p.begin);
}

}  // namespace agoq

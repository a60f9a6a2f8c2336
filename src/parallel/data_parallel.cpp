#include "parallel/data_parallel.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace agoq {

namespace {
// Every rank computes the same value (after the loss all-reduce), so every rank fails alike and rank 0 alone says
// why (comm_run_guarded).
template <class... Parts>
[[noreturn]] void fail_agreed(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw CommAgreedError(os.str());
}
}  // namespace

GradStoreKind grad_store_parse(const std::string& s) {
  AGOQ_CHECK(s == "fp32" || s == "q8", "--grad-store must be fp32 or q8 (got '", s, "')");
  return s == "q8" ? GradStoreKind::q8 : GradStoreKind::fp32;
}

AllreduceKind allreduce_parse(const std::string& s) {
  AGOQ_CHECK(s == "mpi" || s == "q8", "--allreduce must be mpi or q8 (got '", s, "')");
  return s == "q8" ? AllreduceKind::q8 : AllreduceKind::mpi;
}

DataParallel::DataParallel(Communicator& comm, LlamaModel& model, const DpOptions& opts)
    : comm_(comm), model_(model), opts_(opts), D_(comm.size()), rank_(comm.rank()) {
  const ParamSet& P = model.params();
  const std::vector<GradRange> ranges = grad_units_of(P);
  size_t shard_total = 0;
  for (const GradRange& r : ranges) {
    Unit u;
    u.range = r;
    u.shard = {0, r.size()};
    if (opts.zero) {
      for (int k = 0; k < D_; ++k) {
        const CommShard s = comm_shard_range(r.size(), D_, k, opts.block);
        u.counts.push_back(s.size());
        u.displs.push_back(s.begin);
      }
      u.shard = comm_shard_range(r.size(), D_, rank_, opts.block);
      u.shard_at = shard_total;
      shard_total += u.shard.size();
    }
    u.adam = std::make_unique<AdamW>(P, opts.adam, r.begin + u.shard.begin, r.begin + u.shard.end);
    units_.push_back(std::move(u));
  }
  if (opts.zero) grad_shard_ = Buffer<float>(shard_total, MemCategory::gradients, "grad.shard");
  if (opts.grad_store == GradStoreKind::q8) {
    q8_ = std::make_unique<GradStoreQ8>(model, ranges, opts.block, opts.rounding);
  } else if (!opts.zero && D_ > 1) {
    GradBucketsOptions b;
    b.bucket_bytes = opts.bucket_bytes;
    b.reduce = opts.allreduce == AllreduceKind::q8 ? GradReduce::q8 : GradReduce::fp32;
    b.average = false;  // micro-batch gradients are already scaled by 1 / (D * m)
    b.block = opts.block;
    // Under a pipeline the main thread sends activations while the bucket thread reduces: MPI must allow both.
    b.overlap = opts.overlap && (!opts.stages || comm_thread_level() == CommThreads::multiple);
    buckets_ = std::make_unique<GradBuckets>(comm, model.grads().data(), model.grads().size(), ranges, b);
  }
}

DataParallel::~DataParallel() { model_.on_grads_ready = nullptr; }

void DataParallel::on_grads_ready(int layer, bool first_micro, bool last_micro, uint64_t micro_seed) {
  const int u = grad_unit_of_layer(model_.stage(), layer);
  // A non-finite sum poisons its block (scale NaN), which the step's norm check then catches.
  if (q8_) q8_->accumulate(u, first_micro, micro_seed);
  else if (buckets_ && last_micro) buckets_->layer_ready(u);
}

void DataParallel::reduce_unit(int ui, float* g) {
  Unit& u = units_[ui];
  const size_t n = u.range.size();
  CommQ8Options q;
  q.block = opts_.block;
  if (opts_.zero) {  // this rank's reduced shard -> grad_shard_
    float* out = grad_shard_.data() + u.shard_at;
    if (D_ == 1) std::memcpy(out, g, n * sizeof(float));
    else if (opts_.allreduce == AllreduceKind::q8) comm_reduce_scatter_q8(comm_, ws_, g, n, out, q);
    else comm_.reduce_scatter(g, out, u.counts.data(), CommDtype::f32, CommOp::sum);
    return;
  }
  // q8 store without ZeRO: the reduced gradient goes back into the 8-bit buffer.
  GradQ8Buffer& b = q8_->q8(ui);
  if (opts_.allreduce == AllreduceKind::q8) {
    comm_allreduce_q8_codes(comm_, ws_, g, n, b.codes.data(), b.scales.data(), q);
  } else {
    comm_.allreduce(g, g, n, CommDtype::f32, CommOp::sum);
    q8_->quantize(ui, g);
  }
}

double DataParallel::reduced_sum_squares() {
  if (opts_.zero) {
    const double local = grad_sum_squares(grad_shard_.data(), grad_shard_.size());
    return D_ > 1 ? comm_.allreduce_value(local) : local;
  }
  if (!q8_) return grad_sum_squares(model_.grads().data(), model_.grads().size());
  double sum = 0;  // every rank holds the same reduced codes: no collective needed, and no fp32 pass
  for (int u = 0; u < int(units_.size()); ++u) {
    const GradQ8Buffer& q = q8_->q8(u);
    sum += grad_q8_sum_squares(q.codes.data(), q.scales.data(), q.n, q.block);
  }
  return sum;
}

void DataParallel::apply(long step, float lr, float scale) {
  float* params = model_.params().data();
  if (opts_.zero) {
    if (scale != 1.0f) grad_scale(grad_shard_.data(), grad_shard_.size(), scale);
    for (Unit& u : units_) {
      u.adam->step(params, grad_shard_.data() + u.shard_at - (u.range.begin + u.shard.begin), lr, step);
      if (D_ == 1) continue;
      std::vector<size_t> bytes(D_), displs(D_);
      for (int k = 0; k < D_; ++k) bytes[k] = u.counts[k] * sizeof(float), displs[k] = u.displs[k] * sizeof(float);
      float* p = params + u.range.begin;
      comm_.allgatherv(p + u.shard.begin, bytes[rank_], p, bytes.data(), displs.data());
    }
    return;
  }
  if (!q8_) {
    float* g = model_.grads().data();
    if (scale != 1.0f) grad_scale(g, model_.grads().size(), scale);
    for (Unit& u : units_) u.adam->step(params, g, lr, step);
    return;
  }
  for (int ui = 0; ui < int(units_.size()); ++ui) {
    Unit& u = units_[ui];
    float* s = q8_->scratch(ui);
    q8_->dequantize(ui, s);
    if (scale != 1.0f) grad_scale(s, u.range.size(), scale);
    u.adam->step(params, s - u.range.begin, lr, step);
  }
}

DpStepResult DataParallel::step(long step, float lr, const int32_t* inputs, const int32_t* targets, int m, int B,
                                int T) {
  const size_t rows = size_t(B) * T;
  return this->step(step, lr, m, [&] {
    double loss_sum = 0;
    for (int j = 0; j < m; ++j) {
      micro_forward_begin(j);
      micro_backward_begin(j);
      loss_sum += model_.forward_backward(inputs + j * rows, targets + j * rows, B, T, 1.0f / float(D_ * m));
    }
    return loss_sum;
  });
}

void DataParallel::micro_forward_begin(int j) {
  const uint64_t g = uint64_t(rank_) * uint64_t(m_) + uint64_t(j);  // the global micro-batch index
  // Stochastic rounding of saved activations: fresh per micro-batch, reproducible from (seed, step, g).
  model_.store().set_seed(philox4x32(opts_.seed, uint64_t(step_), g)[0] | (uint64_t(step_) << 32));
}

void DataParallel::micro_backward_begin(int j) {
  const uint64_t g = uint64_t(rank_) * uint64_t(m_) + uint64_t(j);
  const uint64_t grad_seed = philox4x32(opts_.seed ^ 0x67726164ull, uint64_t(step_), g)[0];  // "grad"
  const int m = m_;
  model_.on_grads_ready = [this, j, m, grad_seed](int layer) { on_grads_ready(layer, j == 0, j == m - 1, grad_seed); };
}

DpStepResult DataParallel::step(long step, float lr, int m, const std::function<double()>& micro_batches) {
  DpStepResult res;
  step_ = step, m_ = m;
  if (q8_) q8_->scratch_zero();
  else model_.grads().zero();
  const double loss_sum = micro_batches();  // micro-batch gradients are scaled by 1 / (D * m)
  model_.on_grads_ready = nullptr;

  if (buckets_) {
    buckets_->wait_all();
    res.wait_s = buckets_->last_wait_seconds();
  } else if (opts_.zero || (q8_ && D_ > 1)) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int u = int(units_.size()) - 1; u >= 0; --u) {  // last layers first, as backward produced them
      float* g = q8_ ? q8_->scratch(u) : model_.grads().data() + units_[u].range.begin;
      if (q8_) q8_->dequantize(u, g);
      reduce_unit(u, g);
    }
    res.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double n_micro = double(D_) * m;
  double loss_all = D_ > 1 ? comm_.allreduce_value(loss_sum) : loss_sum;
  double sum_squares = reduced_sum_squares();
  if (opts_.stages) {  // the last stage holds the loss; every stage its own parameters' gradients
    double v[2] = {loss_all, sum_squares};
    opts_.stages->allreduce_sum(v, 2);
    loss_all = v[0], sum_squares = v[1];
  }
  res.loss = loss_all / n_micro;
  res.grad_norm = std::sqrt(sum_squares);
  if (!std::isfinite(res.loss) || !std::isfinite(res.grad_norm))
    fail_agreed("training diverged at step ", step, ": loss ", res.loss, ", gradient norm ", res.grad_norm,
                " (try a lower --lr)");
  const float scale = res.grad_norm > opts_.clip ? float(opts_.clip / res.grad_norm) : 1.0f;
  apply(step, lr, scale);
  return res;
}

// ---- checkpoints ----

NamedTensors DataParallel::moments_views() {
  const ParamSet& P = model_.params();
  NamedTensors out;
  const bool full = !full_m_.empty();
  if (opts_.zero && !full) return out;
  size_t ui = 0;
  for (const ParamTensor& t : P.named()) {
    const size_t off = size_t(t.data - P.data());
    while (off >= units_[ui].range.end) ++ui;  // named() walks the layout in order
    float* m = full ? full_m_.data() + off : units_[ui].adam->m().data() + (off - units_[ui].range.begin);
    float* v = full ? full_v_.data() + off : units_[ui].adam->v().data() + (off - units_[ui].range.begin);
    out.push_back({"adam.m." + t.name, t.shape, m});
    out.push_back({"adam.v." + t.name, t.shape, v});
  }
  return out;
}

void DataParallel::moments_gather() {
  if (!opts_.zero) return;
  const size_t n = model_.params().size();
  if (rank_ == 0) {
    // Checkpoint-time only; tagged so the run's peak shows it apart from the sharded optimizer state.
    full_m_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
    full_v_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
  }
  for (Unit& u : units_) {
    const size_t own = u.range.begin + u.shard.begin, bytes = u.shard.size() * sizeof(float);
    if (rank_ != 0) {
      comm_.send(u.adam->m().data(), bytes, 0, 1);
      comm_.send(u.adam->v().data(), bytes, 0, 2);
      continue;
    }
    std::memcpy(full_m_.data() + own, u.adam->m().data(), bytes);
    std::memcpy(full_v_.data() + own, u.adam->v().data(), bytes);
    for (int k = 1; k < D_; ++k) {
      const size_t at = u.range.begin + u.displs[k], b = u.counts[k] * sizeof(float);
      comm_.recv(full_m_.data() + at, b, k, 1);
      comm_.recv(full_v_.data() + at, b, k, 2);
    }
  }
}

void DataParallel::moments_release() {
  full_m_.reset();
  full_v_.reset();
}

NamedTensors DataParallel::moments_load_views() {
  if (opts_.zero) {
    const size_t n = model_.params().size();
    full_m_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
    full_v_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
  }
  return moments_views();
}

void DataParallel::moments_scatter() {
  if (!opts_.zero) return;
  for (Unit& u : units_) {
    const size_t own = u.range.begin + u.shard.begin, bytes = u.shard.size() * sizeof(float);
    std::memcpy(u.adam->m().data(), full_m_.data() + own, bytes);
    std::memcpy(u.adam->v().data(), full_v_.data() + own, bytes);
  }
  moments_release();
}

}  // namespace agoq

#include "parallel/dp_moments.h"

#include <cstring>

#include "core/error.h"
#include "optim/moments_schema.h"

namespace agoq {

DpMoments::DpMoments(Communicator& comm, const ParamSet& params, const std::vector<GradUnit>& units,
                     DpOptimizer& optimizer, bool zero, const MomentsForm& form)
    : comm_(comm), params_(params), units_(units), optimizer_(optimizer), zero_(zero), form_(form), file_(form) {}

NamedTensors DpMoments::views() { return zero_ && !full_ ? NamedTensors{} : views_of(form_, full_); }

NamedTensors DpMoments::views_of(const MomentsForm& f, bool full) {
  MomentsPlace at;  // without ZeRO (full: false) every unit's AdamW holds the whole unit
  std::vector<ParamSegment> units;
  for (size_t u = 0; u < units_.size(); ++u) {
    const size_t begin = units_[u].range.begin;
    units.push_back({begin, units_[u].range.end});
    AdamW& adam = optimizer_.adam(int(u));
    if (f.state == OptimState::fp32) {
      at.m.push_back(full ? full_m_.data() + begin : adam.m().data());
      at.v.push_back(full ? full_v_.data() + begin : adam.v().data());
      continue;
    }
    AdamQ8State& st = adam.q8_state();
    at.block = f.q8.block;
    at.m_codes.push_back(full ? full_mc_.data() + begin : st.m_codes());
    at.v_codes.push_back(full ? full_vc_.data() + begin : st.v_codes());
    at.m_scales.push_back(full ? full_ms_.data() + scale_at_[u] : st.m_scales());
    at.v_scales.push_back(full ? full_vs_.data() + scale_at_[u] : st.v_scales());
  }
  return moments_views(params_.named(), params_.stage(), units, at);
}

void DpMoments::full_allocate(const MomentsForm& f) {
  // Checkpoint-time only; tagged so the run's peak shows it apart from the sharded optimizer state.
  full_ = true;
  const size_t n = params_.size();
  if (f.state == OptimState::fp32) {
    full_m_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
    full_v_ = Buffer<float>(n, MemCategory::workspace, "ckpt.moments");
    return;
  }
  scale_at_.clear();
  size_t blocks = 0;
  for (const GradUnit& u : units_) scale_at_.push_back(blocks), blocks += adam_q8_blocks(u.range.size(), f.q8.block);
  full_mc_ = Buffer<int8_t>(n, MemCategory::workspace, "ckpt.moments");
  full_vc_ = Buffer<uint8_t>(n, MemCategory::workspace, "ckpt.moments");
  full_ms_ = Buffer<float>(blocks, MemCategory::workspace, "ckpt.moments");
  full_vs_ = Buffer<float>(blocks, MemCategory::workspace, "ckpt.moments");
}

void DpMoments::gather() {
  if (!zero_) return;
  const int rank = comm_.rank();
  const bool q8 = form_.state == OptimState::q8;
  const size_t B = size_t(form_.q8.block);
  if (rank == 0) full_allocate(form_);
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const GradUnit& u = units_[ui];
    AdamW& adam = optimizer_.adam(int(ui));
    // Each piece of a shard: fp32 m, v; or q8 codes m, v and scales m, v (blocks start on the shard: own % B == 0).
    struct Piece {
      void* mine;
      void* full;  // where shard k = 0 would go
      size_t elem;
      bool scales;
    };
    std::vector<Piece> pieces;
    if (q8) {
      AdamQ8State& st = adam.q8_state();
      const size_t sb = rank == 0 ? scale_at_[ui] : 0;
      pieces = {{st.m_codes(), full_mc_.data() + u.range.begin, 1, false},
                {st.v_codes(), full_vc_.data() + u.range.begin, 1, false},
                {st.m_scales(), full_ms_.data() + sb, 4, true},
                {st.v_scales(), full_vs_.data() + sb, 4, true}};
    } else {
      pieces = {{adam.m().data(), full_m_.data() + u.range.begin, 4, false},
                {adam.v().data(), full_v_.data() + u.range.begin, 4, false}};
    }
    auto count = [&](const Piece& p, size_t values) { return p.scales ? adam_q8_blocks(values, int(B)) : values; };
    auto offset = [&](const Piece& p, size_t at) { return p.scales ? at / B : at; };
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      const int tag = int(i) + 1;
      if (rank != 0) {
        comm_.send(p.mine, count(p, u.own.size()) * p.elem, 0, tag);
        continue;
      }
      char* full = static_cast<char*>(p.full);
      std::memcpy(full + offset(p, u.own.begin) * p.elem, p.mine, count(p, u.own.size()) * p.elem);
      for (int k = 1; k < comm_.size(); ++k)
        comm_.recv(full + offset(p, u.displs[k]) * p.elem, count(p, u.counts[k]) * p.elem, k, tag);
    }
  }
}

void DpMoments::release() {
  full_ = false;
  full_m_.reset(), full_v_.reset();
  full_mc_.reset(), full_vc_.reset(), full_ms_.reset(), full_vs_.reset();
}

NamedTensors DpMoments::load_views(const MomentsForm& file) {
  file_ = file;
  if (zero_ || !(file == form_)) full_allocate(file);
  return views_of(file, full_);
}

void DpMoments::unit_take(size_t ui) {
  const GradUnit& u = units_[ui];
  AdamW& adam = optimizer_.adam(int(ui));
  const size_t own = u.range.begin + u.own.begin, n = u.own.size();
  if (file_.state == OptimState::fp32) {  // copies (fp32 run) or quantizes (q8 run)
    adam.moments_load_fp32(full_m_.data() + own, full_v_.data() + own);
    return;
  }
  const size_t B = size_t(file_.q8.block);
  AGOQ_CHECK(u.own.begin % B == 0, "checkpoint's 8-bit moments (block ", B, ") do not split at this run's shards");
  const size_t sb = scale_at_[ui] + u.own.begin / B, blocks = adam_q8_blocks(n, int(B));
  if (file_ == form_) {  // the same codes and scales: bit for bit
    AdamQ8State& st = adam.q8_state();
    std::memcpy(st.m_codes(), full_mc_.data() + own, n);
    std::memcpy(st.v_codes(), full_vc_.data() + own, n);
    std::memcpy(st.m_scales(), full_ms_.data() + sb, blocks * sizeof(float));
    std::memcpy(st.v_scales(), full_vs_.data() + sb, blocks * sizeof(float));
    return;
  }
  // Another form: decoded one unit at a time, then kept in this run's form.
  Buffer<float> m(n, MemCategory::workspace, "ckpt.moments"), v(n, MemCategory::workspace, "ckpt.moments");
  adam_q8_decode(file_.q8, full_mc_.data() + own, full_vc_.data() + own, full_ms_.data() + sb, full_vs_.data() + sb, n,
                 m.data(), v.data());
  adam.moments_load_fp32(m.data(), v.data());
}

void DpMoments::scatter() {
  if (!full_) return;  // loaded in place
  for (size_t ui = 0; ui < units_.size(); ++ui) unit_take(ui);
  release();
  file_ = form_;
}

}  // namespace agoq

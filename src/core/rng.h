// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A value depends only on (key, counter), so
// results are identical across thread counts and reruns: thread t can draw element i's number without any state.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

#include "core/philox.h"

namespace agoq {

// Four 32-bit random words for counter (ctr_hi, ctr_lo) under a 64-bit key (core/philox.h).
inline std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo) {
  const PhiloxWords p = philox4x32_words(key, ctr_hi, ctr_lo);
  return {p.w[0], p.w[1], p.w[2], p.w[3]};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
inline float rng_unit_float(uint32_t bits) { return float(bits >> 8) * 0x1p-24f; }

// A sequential stream over Philox for initialisation, sampling and data windows: stream s of seed k yields the
// blocks (s, 0), (s, 1), ... so independent streams never overlap.
class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) : key_(seed), stream_(stream) {}
  uint32_t next_u32() {
    if (pos_ == 4) {
      block_ = philox4x32(key_, stream_, counter_++);
      pos_ = 0;
    }
    return block_[pos_++];
  }
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }
  // Uniform integer in [0, n) (n > 0); the modulo bias is below 2^-32 for the sizes used here.
  uint64_t below(uint64_t n) { return next_u64() % n; }
  float uniform() { return rng_unit_float(next_u32()); }
  // Standard normal by Box-Muller (one value per call; deterministic, not the fastest).
  float normal() {
    const double u1 = (double(next_u32()) + 1.0) * 0x1p-32, u2 = double(next_u32()) * 0x1p-32;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // The full state, so a checkpoint can resume the stream exactly.
  struct State {
    uint64_t key, stream, counter;
    uint32_t pos;
    std::array<uint32_t, 4> block;
  };
  State state() const { return {key_, stream_, counter_, pos_, block_}; }
  void set_state(const State& s) {
    key_ = s.key, stream_ = s.stream, counter_ = s.counter, pos_ = s.pos, block_ = s.block;
  }

 private:
  uint64_t key_, stream_, counter_ = 0;
  uint32_t pos_ = 4;
  std::array<uint32_t, 4> block_{};
};

}  // namespace agoq

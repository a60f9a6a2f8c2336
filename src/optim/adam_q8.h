// AdamW's moments in 8 bits per value (`--optim-state q8`, docs/optimizer.md): m as signed codes in [-127, 127],
// v as unsigned codes in [0, 255], each with one fp32 scale per block of `block` values (adam_q8_math.h defines
// the mappings). A step is one fused pass per block: the block's codes are decoded in registers, m, v and the
// weight are updated, the new moments wait in an L1 tile of one block, and are requantized into the same codes
// with new scales. No fp32 copy of the moments exists beyond that tile.
//
// Blocks start at the state's first value (AdamW's shard start). ZeRO-1 shards start on multiples of 256 within
// their gradient unit (comm_shard_range), so with a block dividing 256 every block is the same unit-relative range
// whatever the sharding: checkpoints keep one layout for any grid (docs/checkpoint-format.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "optim/adam_q8_math.h"
#include "quant/format.h"

namespace agoq {

// The state's format. The defaults are the measured choice (docs/optimizer.md); the alternatives are kept for the
// error study (`agoq bench optim`) and run the scalar path.
struct AdamQ8Format {
  int block = 128;  // values per scale; one of 32, 64, 128, 256 (divides the ZeRO shard alignment)
  int m_root = 2;   // m stored linearly (1) or as sign(m) sqrt|m| (2)
  int v_root = 4;   // v stored as v (1), sqrt(v) (2) or v^(1/4) (4)
  QuantRounding rounding = QuantRounding::nearest;
  uint64_t seed = 0;  // stochastic rounding: element i of step t uses Philox byte (seed, t, index_base + i)
  bool operator==(const AdamQ8Format&) const = default;
};
// Throws agoq::Error naming the bad field.
void adam_q8_format_check(const AdamQ8Format& f);

// A run of values [begin, end) of the state (relative to its first value) with one weight-decay factor.
struct AdamDecayRun {
  size_t begin, end;
  bool decay;
};

class AdamQ8State {
 public:
  AdamQ8State() = default;
  // n values, all zero (the moments' initial value); tracked as optimizer memory.
  AdamQ8State(size_t n, const AdamQ8Format& f, uint64_t index_base = 0);

  size_t size() const { return m_.size(); }
  size_t blocks() const { return m_scale_.size(); }
  size_t bytes() const { return m_.bytes() + v_.bytes() + m_scale_.bytes() + v_scale_.bytes(); }
  const AdamQ8Format& format() const { return fmt_; }
  int8_t* m_codes() { return m_.data(); }
  uint8_t* v_codes() { return v_.data(); }
  float* m_scales() { return m_scale_.data(); }
  float* v_scales() { return v_scale_.data(); }
  const int8_t* m_codes() const { return m_.data(); }
  const uint8_t* v_codes() const { return v_.data(); }
  const float* m_scales() const { return m_scale_.data(); }
  const float* v_scales() const { return v_scale_.data(); }

  // One AdamW step of params[0, n) from grads[0, n) (this state's values); runs tile [0, n) in order and say where
  // weight decay applies (factor decay_factor = 1 - lr * weight_decay). step: the 1-based step (stochastic seeds).
  // [from, to): the values updated (from a block start; to n or a block end), each block as in a whole step.
  void step(float* params, const float* grads, const AdamStepCoeffs& k, float decay_factor,
            const std::vector<AdamDecayRun>& runs, long step, size_t from, size_t to);
  // fp32 moments of n values in, quantized (a resume from fp32 states); and out, decoded (a save for fp32 states,
  // or the error study).
  void load_fp32(const float* m, const float* v);
  void store_fp32(float* m, float* v) const;

 private:
  AdamQ8Format fmt_;
  uint64_t index_base_ = 0;
  Buffer<int8_t> m_;
  Buffer<uint8_t> v_;
  Buffer<float> m_scale_, v_scale_;
};

size_t adam_q8_blocks(size_t n, int block);
// n values of a state in this format (codes from a block start, scales of those blocks) decoded into fp32 m and v.
void adam_q8_decode(const AdamQ8Format& f, const int8_t* mc, const uint8_t* vc, const float* m_scales,
                    const float* v_scales, size_t n, float* m, float* v);
// Bytes of a state of n values: 2 codes per value and 2 fp32 scales per block.
size_t adam_q8_bytes(size_t n, int block);

// ---- the block kernels (one block: n <= format.block values), for AdamQ8State and the tests ----

// Phase 1 of a block: values [j0, j1) of it, decoded with the block's old scales, updated (params written), their new
// m and root of v into the tile and the running maxima of the stored roots raised. scalar: the portable path.
struct AdamQ8Tile {
  alignas(32) float m[256];
  alignas(32) float v[256];  // the stored root of v
  float m_max = 0, v_max = 0;
};
void adam_q8_update(const AdamQ8Format& f, const AdamStepCoeffs& k, float decay, float m_scale, float v_scale,
                    const int8_t* mc, const uint8_t* vc, const float* g, float* p, size_t j0, size_t j1,
                    AdamQ8Tile& tile, bool scalar = false);
// Phase 2: the tile's n values requantized into the block's codes and scales. random: the block's stochastic
// rounding bytes (element j at random[j]; null for nearest).
void adam_q8_encode(const AdamQ8Format& f, const AdamQ8Tile& tile, size_t n, int8_t* mc, uint8_t* vc, float* m_scale,
                    float* v_scale, const uint8_t* random = nullptr, bool scalar = false);

}  // namespace agoq

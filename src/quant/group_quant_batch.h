// The batch structure of the SIMD group encoder, included twice by quant/group_quant.cpp: inside namespace avx2 and,
// compiled for AVX-512, inside namespace avx512 (core/isa.h), after that namespace's primitives: group_amax_bits,
// group_extrema_bits, quantize_group (pass 2), kPrefetchAhead, random_chunks with its RandomKey and kLayout (the
// Philox bytes). A
// template defined once outside the target region would stay AVX2 and could not inline the AVX-512 primitives.
// No include guard, on purpose; include nothing else.

// The SIMD encoder works on batches of up to 8 groups: pass 1 (statistics) for each group, the 8 groups' scales in
// one vector computation (one chain of divisions and fp16 conversions per batch instead of per group), then pass 2
// (quantize and pack) for each group, its values still in L1.

// Horizontal reduction of 8 vectors at once: lane g of the result = op over the 8 lanes of v[g]. Lanes of
// different inputs never mix, so a NaN in one group stays in its lane.
template <class Op>
inline __m256 reduce8x8(const __m256* v, Op op) {
  auto pair = [&](__m256 a, __m256 b) { return op(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); };
  const __m256 a01 = pair(v[0], v[1]), a23 = pair(v[2], v[3]), a45 = pair(v[4], v[5]), a67 = pair(v[6], v[7]);
  auto quad = [&](__m256 a, __m256 b) {
    return op(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  };
  const __m256 b0 = quad(a01, a23), b1 = quad(a45, a67);  // [g0..g3 | g0..g3] halves, [g4..g7 | g4..g7]
  return op(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

// The scales and encoder constants of up to 8 groups, as quant_group_params computes them one by one (same
// operations, F16C for the fp16 rounding; tested to agree with the portable conversion).
struct BatchParams {
  alignas(32) float lo[8], range[8], inv[8];
  alignas(16) uint16_t h[8];
  int ok;  // bit g: group g is representable (finite, scale fits fp16)
};

template <int B, bool Sym>
inline void batch_params(__m256 lo, __m256 hi, __m256 bad_or_amax, BatchParams& bp) {
  const __m256 zero = _mm256_setzero_ps(), qmax = _mm256_set1_ps(float((1 << B) - 1));
  __m256 range, bad;
  if constexpr (Sym) {  // bad_or_amax: max |x| bit patterns
    range = _mm256_mul_ps(_mm256_set1_ps(2.f), bad_or_amax);
    bad = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(bad_or_amax), _mm256_set1_epi32(0x7F7FFFFF)));
  } else {
    lo = _mm256_add_ps(lo, zero), hi = _mm256_add_ps(hi, zero);  // -0 -> +0, as the scalar kernel
    range = _mm256_sub_ps(hi, lo);
    bad = _mm256_cmp_ps(bad_or_amax, bad_or_amax, _CMP_UNORD_Q);
  }
  const __m256 d = _mm256_add_ps(_mm256_div_ps(range, qmax), zero);
  const __m128i h = _mm256_cvtps_ph(d, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  const __m256 scale = _mm256_cvtph_ps(h);
  bad = _mm256_or_ps(bad, simd::nonfinite8(scale));  // h >= 0x7C00: the step does not fit fp16
  const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.f), scale), _mm256_cmp_ps(scale, zero, _CMP_GT_OQ));
  _mm_store_si128(reinterpret_cast<__m128i*>(bp.h), h);
  _mm256_store_ps(bp.inv, inv);
  if constexpr (!Sym) _mm256_store_ps(bp.lo, lo), _mm256_store_ps(bp.range, range);
  bp.ok = ~_mm256_movemask_ps(bad) & 0xFF;
}

// Pass 1 prefetches (into L1) the input kPrefetchAhead floats ahead of the group it scans (the primitives set it).
// Its loads come in short bursts (one group) between the batch's scale computation and pass 2 (and Philox chunks),
// too sparse for the hardware prefetchers to keep L1 ahead. Measured on 64 MiB: stochastic AVX2 15-20% faster with
// 2-3 KiB ahead on Zen 4 (4-6 KiB: worse; into L2 only: half the gain); on the Xeon (1 thread) nearest int4 0.66x
// memcpy without, 0.85x with 2 KiB (AVX2) and 0.8-0.97x with 3-6 KiB (AVX-512). The AVX2 kernels run by default only
// on CPUs without AVX-512; on one (AMD EPYC, Zen 3, 2 threads, 8 interleaved runs) 4 KiB beat 2 KiB: nearest int4
// 1.87-2.01 ms against 2.43-2.45 (best run), stochastic 2-4% faster; 1 KiB was slower than both.
inline void prefetch_group(const float* x, size_t n) {
  for (size_t j = 0; j < n; j += 64 / sizeof(float))
    _mm_prefetch(reinterpret_cast<const char*>(x + j + kPrefetchAhead), _MM_HINT_T0);  // never faults
}

// Pass 1 and the scales of the batch of groups [g0, g0 + 8) (fewer at the end of the row). after_group(k) runs
// after group k's pass 1 (the stochastic kernel generates its random bytes there; measured 1-2% faster per value in
// cache than before it). Asymmetric: one_sign says whether the previous batch had groups of one sign; if so this one
// computes umin in pass 1 (the next groups are likely alike: all-positive tensors such as softmax outputs), else it
// computes umin afterwards for such groups only, in a second pass (L1 hits).
template <int B, bool Sym, class F>
void batch_stats(const float* x, size_t cols, size_t G, size_t g0, size_t ng, BatchParams& bp, bool& one_sign,
                 F&& after_group) {
  __m256 a[8], b[8], c[8];
  for (size_t k = 0; k < 8; ++k) {
    const size_t c0 = (g0 + k) * G, n = k < ng ? std::min(G, cols - c0) : 0;
    prefetch_group(x + c0, n);
    if constexpr (Sym) {
      a[k] = group_amax_bits(x + c0, n);
    } else {
      const LaneBits lb = one_sign ? group_extrema_bits<true>(x + c0, n) : group_extrema_bits<false>(x + c0, n);
      a[k] = _mm256_castsi256_ps(lb.smax), b[k] = _mm256_castsi256_ps(lb.umax), c[k] = _mm256_castsi256_ps(lb.umin);
    }
    if (k < ng) after_group(k);
  }
  auto op = [](auto f) {
    return [f](__m256 u, __m256 v) { return _mm256_castsi256_ps(f(_mm256_castps_si256(u), _mm256_castps_si256(v))); };
  };
  const auto smax_op = op([](__m256i u, __m256i v) { return _mm256_max_epi32(u, v); });
  if constexpr (Sym) {
    const __m256 amax = reduce8x8(a, smax_op);
    batch_params<B, true>(amax, amax, amax, bp);
  } else {
    const __m256 smax = reduce8x8(a, smax_op);
    const __m256 umax = reduce8x8(b, op([](__m256i u, __m256i v) { return _mm256_max_epu32(u, v); }));
    // Sign bits: smax's is clear iff the group has a value >= +0, umax's set iff it has a negative one.
    const int one_signed = ~_mm256_movemask_ps(_mm256_andnot_ps(smax, umax)) & ((1 << ng) - 1);
    if (!one_signed) {
      one_sign = false;
      return batch_params<B, false>(umax, smax, _mm256_setzero_ps(), bp);  // lo, hi
    }
    if (!one_sign)  // umin not computed: a second pass over the groups of one sign
      for (size_t k = 0; k < ng; ++k) {
        const size_t c0 = (g0 + k) * G;
        if (one_signed >> k & 1)
          c[k] = _mm256_castsi256_ps(group_extrema_bits<true>(x + c0, std::min(G, cols - c0)).umin);
      }
    one_sign = true;
    const __m256 umin = reduce8x8(c, op([](__m256i u, __m256i v) { return _mm256_min_epu32(u, v); }));
    batch_params<B, false>(_mm256_blendv_ps(umin, umax, umax), _mm256_blendv_ps(smax, umin, smax), _mm256_setzero_ps(),
                           bp);
  }
}

// The random bytes of one batch of groups (stochastic rounding): the whole Philox chunks that cover it, in the
// kernel's order (kLayout), generated straight into a fixed buffer, so there is no sliding window to manage: no calls,
// no moves, no bounds checks in the loop.
struct BatchRandom {
  // 8 groups of at most 256 values, plus a partial chunk at each end when the batch does not start on a chunk.
  static constexpr size_t kBytes = 8 * 256 + 2 * kQuantRandomChunk;
  uint64_t base = 0, next = 0;  // element index of bytes[0] and of the first byte not yet generated (chunk multiples)
  alignas(64) uint8_t bytes[kBytes];

  void start(uint64_t first) { base = next = first / kQuantRandomChunk * kQuantRandomChunk; }
  // Generates the chunks up to element `end` (exclusive).
  void generate(const RandomKey& key, uint64_t end) {
    if (next >= end) return;
    const size_t chunks = size_t((end - next + kQuantRandomChunk - 1) / kQuantRandomChunk);
    random_chunks(key, next / kQuantRandomChunk, chunks, bytes + (next - base));
    next += chunks * kQuantRandomChunk;
  }
  // The bytes of group [i, i + n) as a block (quant_random_block; tmp: 256 bytes).
  const uint8_t* block(uint64_t i, size_t n, uint8_t* tmp) const {
    return quant_random_block(bytes, base, i, n, tmp, kLayout);
  }
};

// Batch by batch: pass 1 and the scales of a batch, then its pass 2. (Issuing pass 1 and the scales of batch b + 1
// before pass 2 of batch b, so that the scale chain overlaps pass 2, measured no faster in cache, 1 thread, and
// 10-15% slower for stochastic rounding in `agoq bench quant` (2 threads, 64 MiB), with two random buffers in flight.)
// Stochastic rounding: each group's random bytes are generated just after its pass 1, whose few loads and integer
// operations fill the issue slots that Philox's latency-bound multiply chains leave idle.
template <int B, bool Stoch, bool Sym>
QuantStatus encode_row_simd(const QuantFormat& f, const float* x, size_t cols, const QuantView& row,
                            const QuantSeed& seed, uint64_t first) {
  QuantStatus st;
  const size_t G = size_t(f.group), groups = (cols + G - 1) / G;
  BatchParams p8;
  bool one_sign = true;  // asymmetric: the last batch had groups of one sign (batch_stats); assumed for the first
  // Only the stochastic kernel touches these (the key schedule is 20 broadcasts: built once per row).
  BatchRandom rnd;
  alignas(32) uint8_t misaligned[Stoch ? 256 : 1];  // a group's bytes when the row does not start on 32 elements
  const RandomKey key(Stoch ? seed.seed : 0, Stoch ? seed.tensor_id : 0);
  for (size_t g0 = 0; g0 < groups; g0 += 8) {
    const size_t ng = std::min<size_t>(8, groups - g0);
    batch_stats<B, Sym>(x, cols, G, g0, ng, p8, one_sign, [&](size_t k) {  // after pass 1 of group g0 + k
      if constexpr (Stoch) {
        if (k == 0) rnd.start(first + g0 * G);
        rnd.generate(key, first + std::min(cols, (g0 + k + 1) * G));  // its random bytes
      }
    });
    for (size_t k = 0; k < ng; ++k) {
      const size_t g = g0 + k, c0 = g * G, n = std::min(G, cols - c0);
      uint8_t* codes = row.codes + c0 / 8 * B;
      float* min = Sym ? nullptr : row.mins + g;
      if (!(p8.ok >> k & 1)) {
        st += mark_bad_group(x + c0, n, B, codes, row.scales + g, min);
        continue;
      }
      GroupParams p;
      quant_group_encoder(B, Sym, Sym ? 0.f : p8.lo[k], Sym ? 0.f : p8.range[k], p8.inv[k], p);
      const uint8_t* r = Stoch ? rnd.block(first + c0, n, misaligned) : nullptr;
      if (Sym || p.sub == 0.f) quantize_group<B, Stoch, false>(x + c0, n, p, r, codes);
      else quantize_group<B, Stoch, true>(x + c0, n, p, r, codes);
      row.scales[g] = p8.h[k];
      if (min) *min = p8.lo[k];
    }
  }
  return st;
}

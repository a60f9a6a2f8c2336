#include "quant/simd.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "core/error.h"
#include "quant/quant_avx2.h"
#include "quant/quant_avx512.h"

namespace agoq {

namespace {
std::atomic<bool> g_simd{AGOQ_AVX2 != 0}, g_avx512{true};
}

bool quant_simd_enabled() { return AGOQ_AVX2 && g_simd.load(std::memory_order_relaxed); }
void quant_set_simd(bool on) { g_simd.store(on, std::memory_order_relaxed); }

bool quant_cpu_has_avx512() {
#if AGOQ_AVX512
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}
bool quant_avx512_enabled() {
  return quant_simd_enabled() && g_avx512.load(std::memory_order_relaxed) && quant_cpu_has_avx512();
}
void quant_set_avx512(bool on) { g_avx512.store(on, std::memory_order_relaxed); }
const char* quant_kernels_name() {
  return quant_avx512_enabled() ? "AVX-512" : quant_simd_enabled() ? "AVX2" : "scalar";
}

const uint8_t* quant_random_copy_block(const uint8_t* buf, size_t off, size_t n, uint8_t* tmp,
                                       QuantRandomLayout layout) {
  for (size_t j = 0; j < n; ++j) tmp[quant_random_slot(layout, j)] = buf[quant_random_slot(layout, off + j)];
  return tmp;
}

#if AGOQ_AVX512
AGOQ_AVX512_BEGIN
void quant_random_chunks_avx512(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out) {
  simd512::philox_chunks(simd512::PhiloxKey16(s.seed, s.tensor_id), chunk, chunks, out);
}
AGOQ_AVX512_END
#else
void quant_random_chunks_avx512(const QuantSeed&, uint64_t, size_t, uint8_t*) {
  fail("quant_random_chunks_avx512: built without the AVX-512 kernels");
}
#endif

void quant_random_chunks_scalar(const QuantSeed& s, uint64_t chunk, size_t chunks, uint8_t* out) {
  for (size_t c = 0; c < chunks; ++c, out += kQuantRandomChunk)
    for (int u = 0; u < 8; ++u) {  // the 4-byte unit u of each word's 32 elements: counter rev3(u)
      const auto w = philox4x32(s.seed, s.tensor_id, (chunk + c) * 8 + (((u & 1) << 2) | (u & 2) | (u >> 2)));
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 4; ++b) out[quant_random_slot(32 * k + 4 * u + b)] = uint8_t(w[k] >> (8 * b));
    }
}

QuantRandomBytes::QuantRandomBytes(const QuantSeed& s, bool simd, bool avx512)
    : seed_(s), simd_(simd && AGOQ_AVX2), avx512_(avx512) {
  AGOQ_CHECK(!avx512 || quant_cpu_has_avx512(), "QuantRandomBytes: this CPU has no AVX-512");
#if AGOQ_AVX2
  static_assert(sizeof(simd::PhiloxKey8) == sizeof(key_) && alignof(simd::PhiloxKey8) <= 32);
  if (simd_) new (key_) simd::PhiloxKey8(s.seed, s.tensor_id);
#endif
}

void QuantRandomBytes::extend(uint64_t keep, uint64_t end) {
  constexpr uint64_t C = kQuantRandomChunk;
  AGOQ_CHECK(keep <= end && end - keep <= kMaxSpan, "QuantRandomBytes: span ", end - keep, " too long");
  const uint64_t c0 = keep / C * C;
  if (keep < lo_ || keep >= hi_) {
    lo_ = hi_ = c0;  // nothing to keep: restart at keep's chunk
  } else if (end - lo_ > kWindow) {
    std::memmove(buf_, buf_ + (c0 - lo_), hi_ - c0);  // slide: drop the chunks before keep's
    lo_ = c0;
  }
  const uint64_t c1 = (end + C - 1) / C * C;
  if (c1 <= hi_) return;
  uint8_t* out = buf_ + (hi_ - lo_);
  const size_t chunks = size_t((c1 - hi_) / C);
  if (avx512_) {
    quant_random_chunks_avx512(seed_, hi_ / C, chunks, out);
    hi_ = c1;
    return;
  }
#if AGOQ_AVX2
  if (simd_) {
    const auto& key = *std::launder(reinterpret_cast<const simd::PhiloxKey8*>(key_));
    for (size_t c = 0; c < chunks; ++c, out += C) {
      simd::Philox4 even, odd;
      simd::philox_chunk(key, (hi_ / C + c) * 8, even, odd);
      simd::store_chunk(even, odd, out);
    }
  } else
#endif
    quant_random_chunks_scalar(seed_, hi_ / C, chunks, out);
  hi_ = c1;
}

}  // namespace agoq

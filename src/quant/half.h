// fp16 and bf16 <-> fp32, bit for bit as the F16C instructions (vcvtph2ps, vcvtps2ph with rounding up) and
// round-to-nearest-even bf16 give them. Integer work and one exact scaling, no intrinsics: the CPU kernels and the
// CUDA kernels call these same functions (AGOQ_HD). Used by the quantizers (fp16 scales, bf16 slots) and by the
// safetensors reader (F16/BF16 tensors).
#pragma once
#include <math.h>

#include <cstdint>

#include "core/hd.h"

namespace agoq {

// fp32 -> fp16 rounding toward +inf, for x >= 0 (scales: rounding up keeps every code in range). NaN -> NaN,
// anything above 65504 -> +inf (the caller reports it as overflow).
AGOQ_HD uint16_t f32_to_f16_up(float x) {
  if (float_is_nan(x)) return 0x7E00;
  if (!(x > 0)) return 0;
  if (x > 65504.f) return 0x7C00;
  const uint32_t u = float_bits(x);
  const int e = int(u >> 23) - 127;
  if (e < -14) return uint16_t(ceilf(x * 0x1p24f));  // fp16 subnormal: units of 2^-24 (exact scaling)
  const uint32_t m = u & 0x7FFFFFu;
  const uint16_t h = uint16_t(((e + 15) << 10) | (m >> 13));
  return uint16_t(h + ((m & 0x1FFFu) != 0));  // a carry into the exponent is the correct next fp16
}

AGOQ_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) return bits_float(sign | float_bits(float(m) * 0x1p-24f));
  if (e == 31) return bits_float(sign | 0x7F800000u | ((m ? m | 0x200u : 0u) << 13));  // NaN: quiet, as F16C
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

// fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN, overflow rounds to Inf as RNE does.
AGOQ_HD uint16_t f32_to_bf16(float x) {
  const uint32_t u = float_bits(x);
  if (float_is_nan(x)) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
AGOQ_HD float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

}  // namespace agoq

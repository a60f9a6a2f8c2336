// Inputs that exercise every path of the quantizers, shared by the CPU tests of the shared math and the GPU tests
// that compare the CUDA kernels with the CPU kernels: rows of mixed magnitudes, rows far from zero relative to their
// range (the asymmetric encoder's shifted path), an all-zero group, a constant group, denormals, a NaN, an Inf and
// a group whose scale overflows fp16. Row lengths that are not a multiple of the group or of 8 leave short tails.
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "quant/format.h"

namespace agoq {

struct QuantTestShape {
  size_t rows, cols;
};
inline std::vector<QuantTestShape> quant_test_shapes() { return {{7, 256}, {5, 200}, {3, 13}, {2, 1000}}; }

// With specials = false the values are all finite and every group is representable.
inline std::vector<float> quant_test_rows(size_t rows, size_t cols, uint64_t seed, bool specials) {
  Rng rng(seed);
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const float sigma = std::ldexp(1.f, int(rng.below(30)) - 15), shift = r % 3 == 1 ? 50.f * sigma : 0.f;
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] = shift + sigma * rng.normal();
  }
  if (cols >= 64) {  // a zero group, a constant group and denormals in row 0
    for (size_t c = 0; c < 32; ++c) x[c] = 0.f, x[32 + c] = 0.75f;
    x[40] = 1e-40f, x[41] = -3e-39f;
  }
  if (specials && rows >= 3) {
    x[1 * cols + cols / 2] = std::numeric_limits<float>::quiet_NaN();
    x[2 * cols + 1] = std::numeric_limits<float>::infinity();
    x[(rows - 1) * cols] = 3e38f, x[(rows - 1) * cols + 1] = -3e38f;  // a step beyond fp16
  }
  return x;
}

inline std::vector<QuantFormat> quant_test_formats() {
  std::vector<QuantFormat> v{quant_format_fp32(), quant_format_bf16()};
  for (int bits : {2, 3, 4, 8})
    for (int g : {32, 64, 128, 256})
      for (bool sym : {true, false})
        for (auto r : {QuantRounding::nearest, QuantRounding::stochastic})
          v.push_back(quant_format_int(bits, g, sym, r));
  return v;
}

// Gradient values of mixed block magnitudes (tiny blocks take the 2^64 pre-scaling), optionally with a NaN and an Inf.
inline std::vector<float> grad_test_values(size_t n, uint64_t seed, bool specials) {
  Rng rng(seed);
  std::vector<float> g(n);
  for (size_t j = 0; j < n; ++j) g[j] = std::ldexp(rng.normal(), int(j / 300 % 7) * 15 - 80);
  if (specials && n > 2000) g[777] = std::numeric_limits<float>::quiet_NaN(), g[1900] = -INFINITY;
  return g;
}

}  // namespace agoq

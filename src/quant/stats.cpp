#include "quant/stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace agoq {

double quant_range_energy(const float* x, size_t rows, size_t cols, int group, bool symmetric) {
  AGOQ_CHECK(group >= 1, "range energy: group must be positive");
  double total = 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c0 = 0; c0 < cols; c0 += size_t(group)) {
      const size_t n = std::min(size_t(group), cols - c0);
      const float* g = x + r * cols + c0;
      float lo = g[0], hi = g[0], amax = 0;
      for (size_t i = 0; i < n; ++i)
        lo = std::min(lo, g[i]), hi = std::max(hi, g[i]), amax = std::max(amax, std::fabs(g[i]));
      const double R = symmetric ? 2.0 * amax : double(hi) - double(lo);
      total += R * R * double(n);
    }
  return total;
}

}  // namespace agoq

// Small helpers shared by the benchmarks.
#pragma once
#include <algorithm>
#include <vector>

namespace agoq {

// The median of repeated timings (the upper one of an even count); 0 for none.
inline double bench_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace agoq

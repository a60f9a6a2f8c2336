// Helpers shared by the whole-model tests.
#pragma once
#include <cmath>
#include <vector>

namespace agoq {

// ||a - b|| / ||b||, accumulated in double.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

}  // namespace agoq

// Checks of an op against the float64 reference (op_reference.h), shared by the CPU op tests (tests/model) and the
// CUDA op tests (tests/cuda): inputs, the normwise relative error and finite differences of a loss Σ forward(x)·R.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "tests/common/op_reference.h"

namespace agoq {

using ref::Vec;

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal() * scale;
  return v;
}

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Document starts (B, T) of packed examples (model/attention.h): each row starts a new document with probability
// 1/mean_len; boundaries at tile edges and one-token documents occur for the shapes the tests use.
inline std::vector<int32_t> doc_starts_random(int B, int T, uint64_t seed, int mean_len = 20) {
  Rng rng(seed);
  std::vector<int32_t> ds(size_t(B) * T);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < T; ++i) {
      const bool starts = i == 0 || rng.below(uint32_t(mean_len)) == 0 || (i == 64 && b == 0);
      ds[size_t(b) * T + i] = starts ? i : ds[size_t(b) * T + i - 1];
    }
  return ds;
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Normwise relative error of got against want.
inline double rel_err(const float* got, const Vec& want) {
  double num = 0;
  for (size_t i = 0; i < want.size(); ++i) num = std::max(num, std::abs(double(got[i]) - want[i]));
  return num / std::max(max_abs(want), 1e-30);
}
inline double rel_err(const std::vector<float>& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  return rel_err(got.data(), want);
}

// Up to `count` distinct indices of [0, n) (all of them when n ≤ count).
inline std::vector<size_t> pick(size_t n, size_t count, uint64_t seed) {
  std::vector<size_t> idx;
  if (n <= count) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  Rng rng(seed, 7);
  while (idx.size() < count) {
    const size_t i = rng.below(n);
    if (std::find(idx.begin(), idx.end(), i) == idx.end()) idx.push_back(i);
  }
  return idx;
}

// Checks got_grad[i] against the finite difference of loss() in x[i] for the picked i; returns the normwise
// relative error over those elements.
template <class Loss>
double fd_err(const float* got_grad, Vec& x, Loss&& loss, size_t count = 60, uint64_t seed = 1) {
  Vec want, got;
  for (size_t i : pick(x.size(), count, seed)) {
    want.push_back(ref::finite_diff(x, i, loss));
    got.push_back(got_grad[i]);
  }
  double num = 0;
  for (size_t i = 0; i < want.size(); ++i) num = std::max(num, std::abs(got[i] - want[i]));
  return num / std::max(max_abs(want), 1e-30);
}

}  // namespace agoq

// The op table's cases of the cross-entropy (op_cases.h): the whole vocabulary's op on a small vocabulary (every
// gradient element against finite differences), on a large one (V = 4099: past every block and SIMD width), with
// ignored rows (target < 0) and a huge logit; and the vocabulary shard's three phases. A target out of range is not
// the table's: the backend's op (stats given by the caller) does not check targets; tests/model/test_ops.cpp and
// tests/cuda/test_ops_cuda.cpp hold the raw ops that do (an agoq::Error on the CPU, a NaN loss on the GPU).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "tests/common/op_case.h"

namespace agoq::op_cases_detail {

// Softmax cross-entropy of the whole vocabulary in double: losses and dloss_scale · (softmax − onehot).
inline void crossentropy_ref(Vec& losses, Vec& dlogits, const std::vector<float>& z, const std::vector<int>& t, int N,
                             int V, double scale) {
  const Vec zd = to_double(z);
  losses.assign(N, 0), dlogits.assign(zd.size(), 0);
  ref::crossentropy_forward(losses.data(), zd.data(), t.data(), N, V);
  for (int n = 0; n < N; ++n) {
    if (t[n] < 0) continue;
    double m = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, zd[size_t(n) * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(zd[size_t(n) * V + v] - m);
    for (int v = 0; v < V; ++v)
      dlogits[size_t(n) * V + v] = scale * (std::exp(zd[size_t(n) * V + v] - m) / sum - (v == t[n] ? 1.0 : 0.0));
  }
}

struct CrossEntropyInputs {
  std::string tag;
  int N, V;
  float logit_scale, dloss_scale;
  std::vector<int> targets;  // N of them; < 0: ignored
  bool huge_logit;           // one logit of 1000 in row 5: must not overflow
};

// Losses each within 2e-6·(1 + |loss|); every gradient element within 1e-6 + 2e-6·|want|; ignored rows' gradient and
// loss exactly zero; on a small vocabulary each kept row's gradient summing to 0 (1e-6) and every gradient element
// against finite differences of dloss_scale · Σ loss (1e-4).
inline std::vector<OpCheck> crossentropy_checks(const CrossEntropyInputs& in, const std::vector<float>& z,
                                                std::vector<float> losses, std::vector<float> dz) {
  const int N = in.N, V = in.V;
  Vec want_loss, want_dz;
  crossentropy_ref(want_loss, want_dz, z, in.targets, N, V, in.dloss_scale);
  std::vector<float> ignored_rows, zeros, row_sums(N);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) row_sums[n] += dz[size_t(n) * V + v];
    if (in.targets[n] >= 0) continue;
    ignored_rows.insert(ignored_rows.end(), dz.begin() + size_t(n) * V, dz.begin() + size_t(n + 1) * V);
    ignored_rows.push_back(losses[n]);
    zeros.resize(ignored_rows.size(), 0.0f);
  }
  std::vector<OpCheck> checks{each_near("losses", losses, want_loss, 2e-6, 2e-6),
                              each_near("dlogits", dz, want_dz, 1e-6, 2e-6),
                              same_bits("ignored rows' dlogits and loss: zero", ignored_rows, zeros)};
  if (size_t(N) * V <= 1000) {
    checks.push_back(each_near("each row's dlogits sums to 0", row_sums, Vec(N, 0.0), 1e-6, 0));
    Vec zd = to_double(z);
    auto loss = [&] {
      Vec l(N);
      ref::crossentropy_forward(l.data(), zd.data(), in.targets.data(), N, V);
      double s = 0;
      for (double x : l) s += in.dloss_scale * x;
      return s;
    };
    checks.push_back(grad("dlogits: the gradient", dz, zd, loss, kGradTol, 1000));
  }
  return checks;
}

inline std::vector<float> crossentropy_logits(const CrossEntropyInputs& in) {
  auto z = randn(size_t(in.N) * in.V, 26, in.logit_scale);
  if (in.huge_logit) z[size_t(5) * in.V + 2] = 1000.0f;
  return z;
}

inline OpCase crossentropy_case(const CrossEntropyInputs& in) {
  return {"crossentropy_forward_backward" + in.tag, {ModelOp::crossentropy_forward_backward}, [=](ModelBackend& be) {
            OnBackend d(be);
            const int N = in.N, V = in.V;
            const auto z = crossentropy_logits(in);
            float *logits = d.put(z), *losses = d.put(randn(N, 27)), *stats = d.put(std::vector<float>(3 * N));
            be.crossentropy_forward_backward(logits, losses, d.put(in.targets), N, V, in.dloss_scale, stats);
            return crossentropy_checks(in, z, d.get(losses, N), d.get(logits, z.size()));
          }};
}

// The vocabulary in two shards [0, split) and [split, V), with the reductions between the phases done here.
inline OpCase crossentropy_shards_case(const CrossEntropyInputs& in, int split) {
  return {"crossentropy_shards" + in.tag,
          {ModelOp::crossentropy_shard_max, ModelOp::crossentropy_shard_exp, ModelOp::crossentropy_shard_finish},
          [=](ModelBackend& be) {
    OnBackend d(be);
    const int N = in.N, V = in.V, bounds[3] = {0, split, V};
    const auto z = crossentropy_logits(in);
    std::vector<float*> shard(2), row_max(2), sums(2), losses(2);
    const int* t_d = d.put(in.targets);
    for (int s = 0; s < 2; ++s) {
      std::vector<float> part;
      for (int n = 0; n < N; ++n)
        part.insert(part.end(), z.begin() + size_t(n) * V + bounds[s], z.begin() + size_t(n) * V + bounds[s + 1]);
      shard[s] = d.put(part), row_max[s] = d.put(std::vector<float>(N));
      sums[s] = d.put(std::vector<float>(2 * N)), losses[s] = d.put(std::vector<float>(N));
      be.crossentropy_shard_max(shard[s], N, bounds[s + 1] - bounds[s], row_max[s]);
    }
    std::vector<float> m0 = d.get(row_max[0], N), m1 = d.get(row_max[1], N), total(2 * N, 0.0f);
    for (int n = 0; n < N; ++n) m0[n] = std::max(m0[n], m1[n]);
    for (int s = 0; s < 2; ++s) {
      be.upload(row_max[s], m0.data(), N * sizeof(float));
      be.crossentropy_shard_exp(shard[s], t_d, N, bounds[s + 1] - bounds[s], bounds[s], row_max[s], sums[s]);
      const auto part = d.get(sums[s], 2 * N);
      for (int i = 0; i < 2 * N; ++i) total[i] += part[i];
    }
    std::vector<float> got_dz(z.size());
    for (int s = 0; s < 2; ++s) {
      const int Vs = bounds[s + 1] - bounds[s];
      be.upload(sums[s], total.data(), 2 * N * sizeof(float));
      be.crossentropy_shard_finish(shard[s], losses[s], t_d, N, Vs, bounds[s], row_max[s], sums[s], in.dloss_scale);
      const auto part = d.get(shard[s], size_t(N) * Vs);
      for (int n = 0; n < N; ++n)
        std::copy(part.begin() + size_t(n) * Vs, part.begin() + size_t(n + 1) * Vs,
                  got_dz.begin() + size_t(n) * V + bounds[s]);
    }
    Vec want_loss, want_dz;
    crossentropy_ref(want_loss, want_dz, z, in.targets, N, V, in.dloss_scale);
    return std::vector<OpCheck>{near("losses", d.get(losses[0], N), want_loss, kFwdTol),
                                near("dlogits", got_dz, want_dz, kFwdTol)};
          }};
}

inline void add_crossentropy_cases(std::vector<OpCase>& cases) {
  const CrossEntropyInputs small{"_9x37", 9, 37, 3.0f, 0.25f, {0, 36, 5, -1, 17, 2, 8, -100, 30}, true};
  std::vector<int> spread(64);
  for (int n = 0; n < 64; ++n) spread[n] = (n * 977) % 4099;
  const CrossEntropyInputs large{"_64x4099", 64, 4099, 2.0f, 1.0f, spread, false};
  const CrossEntropyInputs edges{"_10x4099", 10, 4099, 3.0f, 0.25f, {0, 4098, 5, -1, 17, 2, 8, -100, 30, 4}, true};
  const CrossEntropyInputs shards{"_6x10", 6, 10, 2.0f, 0.25f, {3, -1, 0, 9, 5, 5}, false};
  for (const CrossEntropyInputs& in : {small, large, edges, shards}) cases.push_back(crossentropy_case(in));
  cases.push_back(crossentropy_shards_case(shards, 4));
}

}  // namespace agoq::op_cases_detail

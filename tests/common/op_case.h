// What a case of the op table (op_cases.h) is made of: the case, its checks, host arrays put in a backend's memory,
// and the check builders every case uses. A check carries the output it compared, so the harness can hold it to the
// bits of another run (other thread counts) or of another backend (OpCase::cpu_bits).
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/ops.h"
#include "quant/half.h"
#include "tests/common/bits_equal.h"
#include "tests/common/op_check.h"

namespace agoq {

// One compared output: its name, its error against the reference and the bound, and the output itself (empty where
// the check is of something else: a byte count, an error thrown).
struct OpCheck {
  std::string what;
  double err, tol;
  std::vector<float> got;
};

struct OpCase {
  std::string name;
  std::vector<ModelOp> ops;  // the ops the case calls
  std::function<std::vector<OpCheck>(ModelBackend&)> run;
  // The outputs must have the fp32 CPU backend's bits on every backend: the op is defined as the CPU's operations
  // in the CPU's order (a copy, one addition per element, additions in token order).
  bool cpu_bits = false;
  // The case measures the scratch of the CPU's ops on the host's memory tracker: for the backends that run them
  // there (device() host).
  bool host_scratch = false;
  // The outputs' bits may change with the OpenMP thread count (OpenBLAS splits a GEMM's sums by it): the harness
  // then holds a second run to the first's bits at the same count only.
  bool bits_vary_with_threads = false;
  // The case calls attention_forward_gaps, which only a backend with attention_gaps_supported has (scoring's).
  bool gaps = false;
};

// Host arrays in a backend's memory, alive while this is.
class OnBackend {
 public:
  explicit OnBackend(ModelBackend& be) : be_(be) {}
  float* put(const std::vector<float>& h) {
    floats_.push_back(be_.buffer<float>(h.size(), MemCategory::workspace, "test"));
    be_.upload(floats_.back().data(), h.data(), h.size() * sizeof(float));
    return floats_.back().data();
  }
  int* put(const std::vector<int>& h) {
    ints_.push_back(be_.buffer<int>(h.size(), MemCategory::workspace, "test"));
    be_.upload(ints_.back().data(), h.data(), h.size() * sizeof(int));
    return ints_.back().data();
  }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    be_.download(h.data(), d, n * sizeof(float));
    return h;
  }

 private:
  ModelBackend& be_;
  std::vector<BackendBuffer<float>> floats_;
  std::vector<BackendBuffer<int>> ints_;
};

namespace op_cases_detail {

// Normwise relative bounds (op_check.h's rel_err): element-wise fp32 ops a few roundings (2e-6), reductions of up to
// hundreds of terms 1e-5; gradients against finite differences (h = 1e-4 in float64, truncation ≈ 1e-8) 1e-4.
constexpr double kElemTol = 2e-6, kFwdTol = 1e-5, kGradTol = 1e-4;

inline OpCheck near(std::string what, std::vector<float> got, const Vec& want, double tol) {
  const double err = rel_err(got, want);
  return {std::move(what), err, tol, std::move(got)};
}
// got against the finite differences of loss() in x at `count` picked elements.
template <class Loss>
OpCheck grad(std::string what, std::vector<float> got, Vec& x, Loss&& loss, double tol, size_t count = 60,
             uint64_t seed = 1) {
  const double err = fd_err(got.data(), x, loss, count, seed);
  return {std::move(what), err, tol, std::move(got)};
}
// Each element on its own: max_i |got_i − want_i| / (abs + rel·|want_i|), bound 1.
inline OpCheck each_near(std::string what, std::vector<float> got, const Vec& want, double abs, double rel) {
  double worst = want.size() == got.size() ? 0 : INFINITY;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (abs + rel * std::abs(want[i])));
  return {std::move(what), worst, 1.0, std::move(got)};
}
// Bit for bit: the error is the count of elements whose bits differ.
inline OpCheck same_bits(std::string what, std::vector<float> got, const std::vector<float>& want) {
  double differ = got.size() == want.size() ? 0 : INFINITY;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) differ += !bits_equal(&got[i], &want[i], sizeof(float));
  return {std::move(what), differ, 0.0, std::move(got)};
}
// A yes / no property: error 0 when it holds.
inline OpCheck holds(std::string what, bool ok) { return {std::move(what), ok ? 0.0 : 1.0, 0.0, {}}; }

inline std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}
inline Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec s(b.size());
  for (size_t i = 0; i < b.size(); ++i) s[i] = double(a[i]) + b[i];
  return s;
}
inline std::vector<float> joined(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> all;
  for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

// A GEMM's input as the backend reads it: itself, or rounded to bf16 (nearest even) on a bf16 backend.
inline Vec round_for_gemm(const ModelBackend& be, const std::vector<float>& x) {
  Vec d = to_double(x);
  if (be.gemm_precision() == GemmPrecision::bf16)
    for (double& v : d) v = bf16_to_f32(f32_to_bf16(float(v)));
  return d;
}

// The tolerance of a product of sums of `k` terms against the float64 one of the same inputs: fp32 accumulation,
// at most k roundings of 2^-24 each (normwise, with margin for cancellation), and never below the fp32 ops' kFwdTol.
inline double gemm_tol(const ModelBackend& be, int k) {
  return be.gemm_precision() == GemmPrecision::bf16 ? std::max(kFwdTol, 4.0 * k * std::ldexp(1.0, -24)) : kFwdTol;
}

}  // namespace op_cases_detail
}  // namespace agoq

// The op table's cases of the attention (op_cases.h): forward and backward on shapes around the CPU's tile
// (kAttentionTile) with and without packed documents, a packed sequence against its documents alone, the scratch the
// CPU's ops count against attention_scratch_bytes, and a head grouping the ops refuse.
#pragma once
#include <omp.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "model/attention.h"
#include "tests/common/op_case.h"

namespace agoq::op_cases_detail {

struct AttnShape {
  int B, T, H, Hkv, hd;
  size_t nq() const { return size_t(B) * T * H * hd; }
  size_t nk() const { return size_t(B) * T * Hkv * hd; }
  size_t nlse() const { return size_t(B) * H * T; }
  std::string name() const {
    return "_B" + std::to_string(B) + "_T" + std::to_string(T) + "_H" + std::to_string(H) + "_Hkv" +
           std::to_string(Hkv) + "_hd" + std::to_string(hd);
  }
};

// Attention's bounds: fp32's, or on a bf16 backend (reference on the bf16-rounded inputs) the rounding of P and dS
// where a product reads them, 2^-9 relative each, with margin 4; the CPU's bf16 lse, which no rounded P reaches, keeps
// fp32's bound (the CUDA backend's attention is fp32 whatever its GEMMs: its error is the inputs' rounding).
inline double attention_tol(const ModelBackend& be, bool grad, bool lse = false) {
  if (be.gemm_precision() != GemmPrecision::bf16) return grad ? kGradTol : kFwdTol;
  if (lse && be.device() == MemDevice::host) return kFwdTol;
  return grad ? 0x1p-6 : 0x1p-7;
}

// q, k scaled 1.5: softmaxes peaky enough to exercise the running max; dout from seed + 3. docs: packed documents
// (mean length 20, 3 on the shortest shape), or none (null doc_start). The seeds are those of the hand-written tests
// the table replaced, per precision: fp32 30 forward, 40 backward; bf16 130, 140.
struct AttnInputs {
  AttnShape s;
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> docs;
  AttnInputs(AttnShape s_, uint64_t seed, bool packed) : s(s_) {
    q = randn(s.nq(), seed, 1.5f), k = randn(s.nk(), seed + 1, 1.5f), v = randn(s.nk(), seed + 2);
    dout = randn(s.nq(), seed + 3);
    if (packed) docs = doc_starts_random(s.B, s.T, seed + 7, s.T < 10 ? 3 : 20);
  }
  AttnInputs(AttnShape s_, const ModelBackend& be, bool backward, bool packed)
      : AttnInputs(s_, (be.gemm_precision() == GemmPrecision::bf16 ? 130 : 30) + (backward ? 10 : 0), packed) {}
  const int32_t* ref_docs() const { return docs.empty() ? nullptr : docs.data(); }
  const int32_t* put_docs(OnBackend& d) const { return docs.empty() ? nullptr : d.put(docs); }
};

inline std::vector<OpCheck> attention_forward_checks(ModelBackend& be, AttnShape s, bool packed) {
  OnBackend d(be);
  const AttnInputs a(s, be, false, packed);
  float *o = d.put(randn(s.nq(), 39)), *lse = d.put(randn(s.nlse(), 40));  // overwritten
  be.attention_forward(o, lse, d.put(a.q), d.put(a.k), d.put(a.v), s.B, s.T, s.H, s.Hkv, s.hd, a.put_docs(d));
  Vec want(s.nq()), want_lse(s.nlse()), qd = round_for_gemm(be, a.q), kd = round_for_gemm(be, a.k);
  const Vec vd = round_for_gemm(be, a.v);
  ref::attention_forward(want.data(), want_lse.data(), qd.data(), kd.data(), vd.data(), s.B, s.T, s.H, s.Hkv, s.hd,
                         a.ref_docs());
  return {near("o", d.get(o, s.nq()), want, attention_tol(be, false)),
          near("lse", d.get(lse, s.nlse()), want_lse, attention_tol(be, false, true))};
}

// Gradients of Σ o·dout at picked elements (all of them on the smallest shape), and in fp32 every element of the
// last key's row, whose gradient only the last query gives (summed over the heads of its group), to 1e-3.
inline std::vector<OpCheck> attention_backward_checks(ModelBackend& be, AttnShape s, bool packed) {
  OnBackend d(be);
  const AttnInputs a(s, be, true, packed);
  float *o = d.put(std::vector<float>(s.nq())), *lse = d.put(std::vector<float>(s.nlse()));
  float *dq = d.put(randn(s.nq(), 42)), *dk = d.put(randn(s.nk(), 43)), *dv = d.put(randn(s.nk(), 44));  // garbage
  const float *q_d = d.put(a.q), *k_d = d.put(a.k), *v_d = d.put(a.v);
  const int32_t* docs_d = a.put_docs(d);
  be.attention_forward(o, lse, q_d, k_d, v_d, s.B, s.T, s.H, s.Hkv, s.hd, docs_d);
  be.attention_backward(dq, dk, dv, d.put(a.dout), q_d, k_d, v_d, o, lse, s.B, s.T, s.H, s.Hkv, s.hd, docs_d);
  Vec qd = round_for_gemm(be, a.q), kd = round_for_gemm(be, a.k), vd = round_for_gemm(be, a.v);
  const Vec Rd = round_for_gemm(be, a.dout);
  auto loss = [&] {
    Vec y(s.nq());
    ref::attention_forward(y.data(), nullptr, qd.data(), kd.data(), vd.data(), s.B, s.T, s.H, s.Hkv, s.hd,
                           a.ref_docs());
    return ref::dot(y, Rd);
  };
  const auto gk = d.get(dk, s.nk());
  const size_t count = s.T <= 8 ? 1000 : 25, last = s.nk() - size_t(s.Hkv) * s.hd;
  const double tol = attention_tol(be, true);
  std::vector<OpCheck> checks{grad("dq", d.get(dq, s.nq()), qd, loss, tol, count, 1),
                              grad("dk", gk, kd, loss, tol, count, 2),
                              grad("dv", d.get(dv, s.nk()), vd, loss, tol, count, 3)};
  if (be.gemm_precision() == GemmPrecision::bf16) return checks;
  Vec want_last;
  for (size_t i = last; i < s.nk(); ++i) want_last.push_back(ref::finite_diff(kd, i, loss));
  checks.push_back(near("dk of the last key", std::vector<float>(gk.begin() + last, gk.end()), want_last, 1e-3));
  return checks;
}

// Two documents packed in one sequence give, row for row, what each gives as a sequence of its own: to 1e-6 in fp32;
// in bf16 the second document's tiles start elsewhere, so its P round elsewhere: the forward's bf16 bound.
inline OpCase attention_documents_alone_case() {
  return {"attention_forward_packed_equals_each_document_alone", {ModelOp::attention_forward}, [](ModelBackend& be) {
            const AttnShape packed{1, 150, 4, 2, 16};
            const AttnInputs a(packed, 35, false);
            std::vector<int32_t> docs(150, 0);
            for (int i = 70; i < 150; ++i) docs[i] = 70;
            OnBackend d(be);
            float *o = d.put(std::vector<float>(packed.nq())), *lse = d.put(std::vector<float>(packed.nlse()));
            be.attention_forward(o, lse, d.put(a.q), d.put(a.k), d.put(a.v), 1, 150, 4, 2, 16, d.put(docs));
            const auto o_packed = d.get(o, packed.nq());
            std::vector<OpCheck> checks;
            for (const auto& [at, T] : {std::pair{0, 70}, std::pair{70, 80}}) {
              const AttnShape alone{1, T, 4, 2, 16};
              const size_t q0 = size_t(at) * 4 * 16, k0 = size_t(at) * 2 * 16;
              const std::vector<float> q(a.q.begin() + q0, a.q.begin() + q0 + alone.nq());
              const std::vector<float> k(a.k.begin() + k0, a.k.begin() + k0 + alone.nk());
              const std::vector<float> v(a.v.begin() + k0, a.v.begin() + k0 + alone.nk());
              float *o1 = d.put(std::vector<float>(alone.nq())), *lse1 = d.put(std::vector<float>(alone.nlse()));
              be.attention_forward(o1, lse1, d.put(q), d.put(k), d.put(v), 1, T, 4, 2, 16, nullptr);
              const std::vector<float> rows(o_packed.begin() + q0, o_packed.begin() + q0 + alone.nq());
              checks.push_back(near("document at " + std::to_string(at), rows, to_double(d.get(o1, alone.nq())),
                                    be.gemm_precision() == GemmPrecision::bf16 ? attention_tol(be, false) : 1e-6));
            }
            return checks;
          }};
}

// Shared contexts (scoring, model/attention.h's gaps): in sequence 0 a context [0, 40) and continuations [40, 70),
// [70, 75), [75, 150), each skipping those before it; in sequence 1 a plain document [0, 60), then a context
// [60, 100) with continuations [100, 130), [130, 150). Against float64 attention that skips the same keys.
inline OpCase attention_gaps_case() {
  OpCase c{"attention_forward_gaps_skip_the_other_continuations", {ModelOp::attention_forward}, [](ModelBackend& be) {
             const AttnShape s{2, 150, 4, 2, 16};
             const AttnInputs a(s, be, false, false);
             std::vector<int32_t> docs(size_t(s.B) * s.T), gaps(2 * docs.size());
             // Rows [start, end) of sequence b: a document whose context ends at branches[0], each branch running
             // to the next one's start.
             auto shared = [&](int b, int start, std::vector<int> branches, int end) {
               branches.push_back(end);
               for (int i = start; i < end; ++i) {
                 const size_t r = size_t(b) * s.T + i;
                 int from = start, to = start;  // the context's rows skip nothing
                 for (size_t k = 0; k + 1 < branches.size(); ++k)
                   if (i >= branches[k] && i < branches[k + 1]) from = branches[0], to = branches[k];
                 docs[r] = start, gaps[2 * r] = from, gaps[2 * r + 1] = to;
               }
             };
             shared(0, 0, {40, 70, 75}, 150);
             shared(1, 0, {60}, 60);
             shared(1, 60, {100, 130}, 150);
             OnBackend d(be);
             float *o = d.put(randn(s.nq(), 39)), *lse = d.put(randn(s.nlse(), 40));  // overwritten
             be.attention_forward_gaps(o, lse, d.put(a.q), d.put(a.k), d.put(a.v), s.B, s.T, s.H, s.Hkv, s.hd,
                                       d.put(docs), d.put(gaps));
             Vec want(s.nq()), want_lse(s.nlse()), qd = round_for_gemm(be, a.q), kd = round_for_gemm(be, a.k);
             const Vec vd = round_for_gemm(be, a.v);
             ref::attention_forward(want.data(), want_lse.data(), qd.data(), kd.data(), vd.data(), s.B, s.T, s.H, s.Hkv,
                                    s.hd, docs.data(), gaps.data());
             return std::vector<OpCheck>{near("o", d.get(o, s.nq()), want, attention_tol(be, false)),
                                         near("lse", d.get(lse, s.nlse()), want_lse, attention_tol(be, false, true))};
           }};
  c.gaps = true;
  return c;
}

// The shapes of the attention's cases, around the CPU's tile (kAttentionTile), each with and without documents; the
// CPU's kernel twins (tests/model/test_ops.cpp) run on them too.
inline std::vector<AttnShape> attention_shapes() {
  return {
      {2, 5, 4, 2, 6},                   // odd sizes, GQA
      {1, 67, 4, 1, 8},                  // T not a multiple of the tile, one kv head for 4 heads
      {2, 130, 2, 2, 32},                // MHA, three tiles, the last of 2 rows
      {1, 64, 3, 3, 16},                 // exactly one tile
      {1, 200, 4, 2, 13},                // GQA, hd not a multiple of 8
      {2, 100, 4, 1, 24},                // last tile of 36 rows: 16- and 8-wide panels, a 4-row diagonal block
      {2, kAttentionTile + 6, 4, 2, 8},  // over a tile boundary, grouped-query heads
      {2, 150, 4, 2, 32},                // two tiles of GQA heads, the last partial
  };
}

// The workspace the CPU's attention counts on the host's tracker is what attention_scratch_bytes says for the
// backend's precision and this thread count; in fp32 on T of 512 and 1024 it is tiles independent of T, plus for
// grouped-query heads each head's dk, dv (2·B·T·H·hd floats): never a T × T buffer.
inline OpCase attention_scratch_case(AttnShape s) {
  OpCase c{"attention_scratch" + s.name(),
           {ModelOp::attention_forward, ModelOp::attention_backward},
           [=](ModelBackend& be) {
    OnBackend d(be);
    const AttnInputs a(s, 50, false);
    float *o = d.put(std::vector<float>(s.nq())), *lse = d.put(std::vector<float>(s.nlse()));
    float *dq = d.put(std::vector<float>(s.nq())), *dk = d.put(std::vector<float>(s.nk()));
    float *dv = d.put(std::vector<float>(s.nk())), *dout = d.put(a.dout);
    const float *q = d.put(a.q), *k = d.put(a.k), *v = d.put(a.v);
    auto& tracker = MemoryTracker::global();
    const int ws = int(MemCategory::workspace);
    const size_t base = tracker.current().bytes[ws];
    tracker.reset_peaks();
    be.attention_forward(o, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, nullptr);
    be.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, s.B, s.T, s.H, s.Hkv, s.hd, nullptr);
    const size_t peak = tracker.peak_per_category().bytes[ws] - base;
    const size_t want = attention_scratch_bytes(s.B, s.T, s.H, s.Hkv, s.hd, omp_get_max_threads(), be.gemm_precision());
    const size_t head_grads = s.Hkv < s.H ? 2 * s.nq() * sizeof(float) : 0;
    const auto o_h = d.get(o, s.nq()), dq_h = d.get(dq, s.nq()), dk_h = d.get(dk, s.nk()), dv_h = d.get(dv, s.nk());
    std::vector<OpCheck> checks{{"workspace peak = attention_scratch_bytes (outputs o, dq, dk, dv)",
                                 std::abs(double(peak) - double(want)), 0.0, joined({&o_h, &dq_h, &dk_h, &dv_h})}};
    if (be.gemm_precision() == GemmPrecision::fp32 && s.T >= 512)
      checks.push_back(
          holds("tiles below one 512 x 512 matrix", peak > head_grads && peak - head_grads < size_t(512) * 512 * 4));
    return checks;
           }};
  c.host_scratch = true;
  return c;
}

// H 4 over Hkv 2 runs; H 3 over Hkv 2 is refused with agoq::Error before anything is computed.
inline std::vector<OpCheck> attention_head_grouping_checks(ModelBackend& be) {
  OnBackend d(be);
  const float *q = d.put(randn(32, 45)), *kv = d.put(randn(16, 46));
  float *o = d.put(randn(32, 47)), *lse = d.put(randn(4, 48));
  be.attention_forward(o, lse, q, kv, kv, 1, 1, 4, 2, 8, nullptr);
  const std::vector<float> got = d.get(o, 32);
  bool refused = false;
  try {
    be.attention_forward(o, lse, q, kv, kv, 1, 1, 3, 2, 8, nullptr);
    be.synchronize();
  } catch (const Error&) {
    refused = true;
  }
  return {{"H 4, Hkv 2 runs", 0, 0, got}, holds("H 3, Hkv 2 refused with agoq::Error", refused)};
}

inline void add_attention_cases(std::vector<OpCase>& cases) {
  for (const AttnShape& s : attention_shapes())
    for (const bool packed : {false, true}) {
      const std::string tag = s.name() + (packed ? "_documents" : "_causal");
      cases.push_back({"attention_forward" + tag, {ModelOp::attention_forward}, [=](ModelBackend& be) {
                         return attention_forward_checks(be, s, packed);
                       }});
      cases.push_back({"attention_backward" + tag,
                       {ModelOp::attention_forward, ModelOp::attention_backward},
                       [=](ModelBackend& be) { return attention_backward_checks(be, s, packed); }});
    }
  cases.push_back(attention_documents_alone_case());
  cases.push_back(attention_gaps_case());
  for (const int Hkv : {2, 1}) {
    for (const int T : {512, 1024}) cases.push_back(attention_scratch_case({1, T, 2, Hkv, 32}));
    cases.push_back(attention_scratch_case({2, 300, 2, Hkv, 48}));
  }
  cases.push_back({"attention_rejects_heads_not_a_multiple_of_kv_heads",
                   {ModelOp::attention_forward},
                   attention_head_grouping_checks});
}

}  // namespace agoq::op_cases_detail

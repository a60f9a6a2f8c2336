// Gradient buckets: layout in reverse layer order, and the overlapped reduction (communication thread running while
// a simulated backward produces layers) equal bit for bit to the non-overlapped one, for q8 and fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/grad_buckets.h"
#include "core/rng.h"
#include "tests/common/bits_equal.h"

namespace agoq {
namespace {

Communicator& W() { return comm_world(); }

// Layer sizes of a small LLaMA-like model: embedding, 6 blocks, head (the block's 2.4 MiB of fp32 are below the
// default 4 MiB cap, the head above it).
std::vector<GradRange> model_layers(size_t* n) {
  const size_t sizes[] = {300000, 600000, 600000, 600000, 600000, 600000, 600000, 1500000};
  std::vector<GradRange> r;
  size_t at = 0;
  for (size_t s : sizes) r.push_back({at, at + s}), at += s;
  *n = at;
  return r;
}

// "Backward" of layer l for step s: deterministic values plus some work, so communication overlaps compute.
void produce_layer(float* g, GradRange r, int l, int step, int rank) {
  Rng rng(uint64_t(step) * 1000 + uint64_t(l), uint64_t(rank));
  for (size_t i = r.begin; i < r.end; ++i) g[i] = rng.normal() * 1e-3f * (i % 509 == 0 ? 50.f : 1.f);
  volatile double sink = 0;
  for (size_t i = r.begin; i < r.end; ++i) sink = sink + std::sqrt(double(std::fabs(g[i])));
}

std::vector<float> run_steps(GradReduce mode, bool overlap, int steps) {
  Communicator& w = W();
  size_t n = 0;
  const std::vector<GradRange> layers = model_layers(&n);
  std::vector<float> grads(n);
  GradBucketsOptions o;
  o.reduce = mode;
  o.overlap = overlap;
  GradBuckets gb(w, grads.data(), n, layers, o);
  EXPECT_EQ(gb.overlapping(), overlap);
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) {
    for (int l = int(layers.size()) - 1; l >= 0; --l) {  // backward: last layer first
      produce_layer(grads.data(), layers[l], l, s, w.rank());
      gb.layer_ready(l);
    }
    gb.wait_all();
    out.insert(out.end(), grads.begin(), grads.end());
  }
  return out;
}

TEST(GradBuckets, ReverseLayerOrderWithinCap) {
  size_t n = 0;
  const std::vector<GradRange> layers = model_layers(&n);
  std::vector<float> g(n);
  GradBuckets gb(W(), g.data(), n, layers);
  const size_t cap = (4u << 20) / sizeof(float);
  ASSERT_GT(gb.bucket_count(), 1);
  EXPECT_EQ(gb.bucket_layers(0).front(), 7) << "bucket 0 holds the last layer";
  EXPECT_EQ(gb.bucket_layers(gb.bucket_count() - 1).back(), 0);
  size_t covered = 0, prev_begin = n;
  for (int b = 0; b < gb.bucket_count(); ++b) {
    const GradRange r = gb.bucket_range(b);
    EXPECT_LE(r.size(), cap);
    EXPECT_EQ(r.end, prev_begin) << "buckets walk the buffer backwards";
    prev_begin = r.begin, covered += r.size();
  }
  EXPECT_EQ(covered, n);
  gb.wait_all();  // a step with no layer_ready reduces everything
}

TEST(GradBuckets, LayerRangesMustTileTheBuffer) {
  std::vector<float> g(100);
  EXPECT_THROW(GradBuckets(W(), g.data(), 100, {{0, 50}, {60, 100}}), Error);
  EXPECT_THROW(GradBuckets(W(), g.data(), 100, {{0, 60}, {50, 100}}), Error);
  EXPECT_THROW(GradBuckets(W(), g.data(), 100, {{0, 50}}), Error);
  EXPECT_NO_THROW(GradBuckets(W(), g.data(), 100, {{50, 100}, {0, 50}}));
}

TEST(GradBuckets, OverlappedEqualsNonOverlappedQ8) {
  const auto a = run_steps(GradReduce::q8, true, 2), b = run_steps(GradReduce::q8, false, 2);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(bits_equal(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(GradBuckets, OverlappedEqualsNonOverlappedFp32) {
  const auto a = run_steps(GradReduce::fp32, true, 2), b = run_steps(GradReduce::fp32, false, 2);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(bits_equal(a.data(), b.data(), a.size() * sizeof(float)));
}

// Each bucket is one comm_allreduce_q8 call on its range (average over ranks); out-of-order readiness (the comm
// thread still reduces in bucket order) gives the same bits.
TEST(GradBuckets, EqualsPerBucketAllreduceWhateverTheReadyOrder) {
  Communicator& w = W();
  size_t n = 0;
  const std::vector<GradRange> layers = model_layers(&n);
  std::vector<float> g(n), ref(n);
  for (size_t l = 0; l < layers.size(); ++l) produce_layer(g.data(), layers[l], int(l), 5, w.rank());
  ref = g;
  GradBuckets gb(w, g.data(), n, layers);
  for (int l = 0; l < int(layers.size()); ++l) gb.layer_ready(l);  // forward order this time
  gb.wait_all();
  CommQ8Workspace ws;
  CommQ8Options o;
  o.average = true;
  for (int b = 0; b < gb.bucket_count(); ++b) {
    const GradRange r = gb.bucket_range(b);
    comm_allreduce_q8(w, ws, ref.data() + r.begin, ref.data() + r.begin, r.size(), o);
  }
  EXPECT_TRUE(bits_equal(g.data(), ref.data(), n * sizeof(float)));
}

}  // namespace
}  // namespace agoq

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"

namespace agoq {

TEST(Memory, TracksCurrentAndPeakPerCategory) {
  auto& t = MemoryTracker::global();
  const MemSnapshot before = t.current();
  t.reset_peaks();
  {
    Buffer<float> a(1000, MemCategory::weights);
    Buffer<float> b(500, MemCategory::activations, "act.test");
    EXPECT_EQ(t.current().bytes[int(MemCategory::weights)] - before.bytes[int(MemCategory::weights)], 4000u);
    EXPECT_EQ(t.tag_current("act.test"), 2000u);
    b.reset();
    EXPECT_EQ(t.tag_current("act.test"), 0u);
    EXPECT_EQ(t.tag_peak("act.test"), 2000u);
  }
  EXPECT_EQ(t.current().total(), before.total());
  EXPECT_EQ(t.peak_total() - before.total(), 6000u);
  EXPECT_EQ(t.at_peak_total().bytes[int(MemCategory::activations)] - before.bytes[int(MemCategory::activations)],
            2000u);
}

TEST(Memory, BufferMoveKeepsOwnership) {
  Buffer<int> a(10, MemCategory::workspace);
  a[3] = 7;
  Buffer<int> b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b[3], 7);
  EXPECT_EQ(b[0], 0);  // zero-filled
}

// Known-answer test from the Random123 distribution (Philox4x32-10, counter and key all ones... here: zeros).
TEST(Rng, PhiloxKnownAnswer) {
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Rng, StreamsAreReproducible) {
  Rng a(42, 1), b(42, 1), c(42, 2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
  EXPECT_NE(Rng(42, 1).next_u64(), c.next_u64());
}

}  // namespace agoq

namespace agoq {
namespace {

// An allocation that cannot be had is one line naming the request, not a bare "out of memory".
TEST(MemoryTracker, AFailedAllocationNamesTheRequest) {
  try {
    Buffer<float> huge(size_t(1) << 60, MemCategory::activations, "act.test");
    FAIL() << "2^60 floats were allocated";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of host memory: cannot allocate"), std::string::npos) << m;
    EXPECT_NE(m.find("for activations (act.test)"), std::string::npos) << m;
    EXPECT_NE(m.find("agoq holds"), std::string::npos) << m;
  }
  EXPECT_THROW(Buffer<double>(SIZE_MAX / 4, MemCategory::workspace), Error);  // n * sizeof(T) overflows
}

}  // namespace
}  // namespace agoq

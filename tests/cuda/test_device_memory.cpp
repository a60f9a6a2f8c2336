// Device memory goes through the tracker: its bytes per category equal what the driver reports as used, within
// the allocator's rounding, and a released buffer is no longer counted.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "cuda/device_buffer.h"
#include "tests/cuda/cuda_test_util.h"

namespace agoq {
namespace {

TEST(CudaMemory, TrackerBytesEqualTheDriversUse) {
  AGOQ_REQUIRE_GPU();
  MemoryTracker& t = MemoryTracker::of(MemDevice::cuda);
  const size_t before = t.current().bytes[int(MemCategory::activations)];
  cudaDeviceSynchronize();
  const CudaMemInfo m0 = cuda_mem_info();
  constexpr size_t kBytes = size_t(96) << 20;
  {
    DeviceBuffer<float> a(kBytes / 4, MemCategory::activations, "act.test");
    const CudaMemInfo m1 = cuda_mem_info();
    EXPECT_EQ(t.current().bytes[int(MemCategory::activations)] - before, kBytes);
    EXPECT_EQ(t.tag_current("act.test"), kBytes);
    const size_t used = m0.free_bytes - m1.free_bytes;
    EXPECT_GE(used, kBytes);
    EXPECT_LE(used, kBytes + (size_t(2) << 20)) << "the driver maps device memory in 2 MiB pages";
    EXPECT_EQ(MemoryTracker::global().tag_current("act.test"), 0u) << "device bytes are not host bytes";
  }
  EXPECT_EQ(t.current().bytes[int(MemCategory::activations)], before);
  EXPECT_EQ(t.tag_peak("act.test"), kBytes);
}

// Running out of device memory is one line naming the request, what agoq holds and what the device has free; the
// tracker is unchanged and the next allocation works (the error is not sticky).
TEST(CudaMemory, OutOfMemoryNamesTheRequest) {
  AGOQ_REQUIRE_GPU();
  const size_t held = MemoryTracker::of(MemDevice::cuda).current().total();
  try {
    DeviceBuffer<float> huge(size_t(1) << 50, MemCategory::workspace, "huge");  // 4 PiB
    FAIL() << "allocated 4 PiB";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of GPU memory: 4194304.00 GiB for workspace (huge)"), std::string::npos) << m;
    EXPECT_NE(m.find("free on the device"), std::string::npos) << m;
  }
  EXPECT_EQ(MemoryTracker::of(MemDevice::cuda).current().total(), held);
  DeviceBuffer<float> small(1024, MemCategory::workspace);
  EXPECT_EQ(MemoryTracker::of(MemDevice::cuda).current().total(), held + 4096);
}

// On this machine (no usable GPU) the reason is reported, never an empty string or a crash.
TEST(CudaMemory, UnavailableGpuIsOneClearReason) {
  const std::string why = cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a GPU is usable here; the no-GPU path is checked on machines without one";
  try {
    cuda_device_open();
    FAIL() << "opened a device although: " << why;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace agoq

// Device memory, always through the memory tracker: every DeviceBuffer is counted by MemoryTracker::of(cuda) with
// its category and tag, exactly as Buffer is on the host, so a GPU run prints where its device bytes go. Plain
// cudaMalloc (no managed memory, no pool of our own); zero-filled on construction.
#pragma once
#include <cstddef>
#include <string_view>
#include <utility>

#include "core/memory.h"

namespace agoq {

void* cuda_alloc_tracked(size_t bytes, MemCategory cat, std::string_view tag);  // zero-filled
void cuda_free_tracked(void* p);
// Synchronous copies (the benchmarks and tests; the training step uses its stream).
void cuda_copy_to_device(void* dst, const void* src, size_t bytes);
void cuda_copy_to_host(void* dst, const void* src, size_t bytes);

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t n, MemCategory cat, std::string_view tag = {})
      : p_(n ? static_cast<T*>(cuda_alloc_tracked(n * sizeof(T), cat, tag)) : nullptr), n_(n) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) reset(), p_ = std::exchange(o.p_, nullptr), n_ = std::exchange(o.n_, 0);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() {
    if (p_) cuda_free_tracked(p_);
    p_ = nullptr, n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const T* host, size_t n, size_t offset = 0) { cuda_copy_to_device(p_ + offset, host, n * sizeof(T)); }
  void download(T* host, size_t n, size_t offset = 0) const { cuda_copy_to_host(host, p_ + offset, n * sizeof(T)); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace agoq

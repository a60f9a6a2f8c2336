// Memory tracker: every large buffer in agoq is allocated here with a category (and optionally a finer tag, e.g.
// an activation slot class), so a run can print exactly where its bytes go, now and at the peak.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace agoq {

enum class MemCategory : int { weights, gradients, optimizer, activations, workspace, communication };
constexpr int kMemCategoryCount = 6;
const char* mem_category_name(MemCategory c);

struct MemSnapshot {
  std::array<size_t, kMemCategoryCount> bytes{};
  size_t total() const;
};

// Where a buffer lives. Each device has its own tracker, with the same categories and tags.
enum class MemDevice : int { host, cuda };
const char* mem_device_name(MemDevice d);

class MemoryTracker {
 public:
  static MemoryTracker& global();  // host memory
  static MemoryTracker& of(MemDevice d);

  // 64-byte aligned, uninitialised. `tag` refines the category (e.g. "act.attention"); empty means none.
  void* allocate(size_t bytes, MemCategory cat, std::string_view tag = {});
  void release(void* p);
  // The bookkeeping of allocate/release for memory another allocator gave (cudaMalloc): counted the same way.
  void record(const void* p, size_t bytes, MemCategory cat, std::string_view tag = {});
  void forget(const void* p);

  MemSnapshot current() const;
  MemSnapshot peak_per_category() const;  // each category's own peak
  MemSnapshot at_peak_total() const;      // the breakdown at the moment the total peaked
  size_t peak_total() const;
  size_t tag_current(std::string_view tag) const;
  size_t tag_peak(std::string_view tag) const;
  std::map<std::string, size_t> tag_peaks() const;
  // Peaks restart from the current usage (e.g. after set-up, to measure one phase).
  void reset_peaks();
  // A human-readable table of peak bytes per category.
  std::string report() const;

 private:
  struct Entry {
    size_t bytes;
    MemCategory cat;
    std::string tag;
  };
  mutable std::mutex mu_;
  std::unordered_map<const void*, Entry> live_;
  MemSnapshot cur_, peak_cat_, at_peak_;
  size_t peak_total_ = 0;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> tags_;  // tag -> (current, peak)
};

std::string format_bytes(size_t bytes);
// This machine's physical memory (0 when the system does not say).
size_t memory_physical_bytes();

// An owning, tracked, move-only array of T (trivial types only). Zero-filled on construction.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t n, MemCategory cat, std::string_view tag = {}) : n_(n) {
    if (n) {
      const size_t bytes = n > SIZE_MAX / sizeof(T) ? SIZE_MAX : n * sizeof(T);  // SIZE_MAX: refused by allocate
      p_ = static_cast<T*>(MemoryTracker::global().allocate(bytes, cat, tag));
      std::memset(static_cast<void*>(p_), 0, n * sizeof(T));
    }
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (p_) MemoryTracker::global().release(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void zero() {
    if (n_) std::memset(static_cast<void*>(p_), 0, n_ * sizeof(T));
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace agoq

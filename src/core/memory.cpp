#include "core/memory.h"

#include <malloc.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>

#include "core/error.h"

namespace agoq {

const char* mem_category_name(MemCategory c) {
  static const char* names[kMemCategoryCount] = {"weights",     "gradients", "optimizer",
                                                 "activations", "workspace", "communication"};
  return names[int(c)];
}

size_t MemSnapshot::total() const {
  size_t t = 0;
  for (size_t b : bytes) t += b;
  return t;
}

const char* mem_device_name(MemDevice d) { return d == MemDevice::host ? "host" : "cuda"; }

MemoryTracker& MemoryTracker::global() { return of(MemDevice::host); }
// glibc's malloc serves large blocks with mmap and raises its mmap threshold each time it frees one; later medium
// blocks then land on a heap that fragments, and the process' resident memory drifts above what the tracker counts
// as models grow (bench capacity: at 800 layers about 43 KiB untracked per layer, where 1 and 17 layers showed 24).
// Taking every block from the heap keeps the resident memory the tracked bytes plus a part that grows linearly:
// what the memory model and `bench capacity` budget for.
MemoryTracker& MemoryTracker::of(MemDevice d) {
  static const bool one_heap = mallopt(M_MMAP_MAX, 0) == 1;
  (void)one_heap;
  static MemoryTracker trackers[2];
  return trackers[int(d)];
}

void* MemoryTracker::allocate(size_t bytes, MemCategory cat, std::string_view tag) {
  const size_t rounded = bytes > SIZE_MAX - 63 ? 0 : (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (!p) {  // one line naming the request, as the device's allocator says it
    std::ostringstream os;
    os << "out of host memory: cannot allocate " << format_bytes(bytes) << " for " << mem_category_name(cat);
    if (!tag.empty()) os << " (" << tag << ")";
    os << "; agoq holds " << format_bytes(current().total());
    if (const size_t have = memory_physical_bytes()) os << " of this machine's " << format_bytes(have);
    throw Error(os.str());
  }
  record(p, bytes, cat, tag);
  return p;
}

void MemoryTracker::record(const void* p, size_t bytes, MemCategory cat, std::string_view tag) {
  std::lock_guard lock(mu_);
  live_.emplace(p, Entry{bytes, cat, std::string(tag)});
  cur_.bytes[int(cat)] += bytes;
  if (cur_.bytes[int(cat)] > peak_cat_.bytes[int(cat)]) peak_cat_.bytes[int(cat)] = cur_.bytes[int(cat)];
  if (cur_.total() > peak_total_) {
    peak_total_ = cur_.total();
    at_peak_ = cur_;
  }
  if (!tag.empty()) {
    auto it = tags_.find(tag);
    if (it == tags_.end()) it = tags_.emplace(std::string(tag), std::pair<size_t, size_t>{0, 0}).first;
    it->second.first += bytes;
    if (it->second.first > it->second.second) it->second.second = it->second.first;
  }
}

void MemoryTracker::forget(const void* p) {
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;
  cur_.bytes[int(it->second.cat)] -= it->second.bytes;
  if (!it->second.tag.empty()) tags_.find(it->second.tag)->second.first -= it->second.bytes;
  live_.erase(it);
}

void MemoryTracker::release(void* p) {
  if (!p) return;
  forget(p);
  std::free(p);
}

MemSnapshot MemoryTracker::current() const {
  std::lock_guard lock(mu_);
  return cur_;
}
MemSnapshot MemoryTracker::peak_per_category() const {
  std::lock_guard lock(mu_);
  return peak_cat_;
}
MemSnapshot MemoryTracker::at_peak_total() const {
  std::lock_guard lock(mu_);
  return at_peak_;
}
size_t MemoryTracker::peak_total() const {
  std::lock_guard lock(mu_);
  return peak_total_;
}
size_t MemoryTracker::tag_current(std::string_view tag) const {
  std::lock_guard lock(mu_);
  auto it = tags_.find(tag);
  return it == tags_.end() ? 0 : it->second.first;
}
size_t MemoryTracker::tag_peak(std::string_view tag) const {
  std::lock_guard lock(mu_);
  auto it = tags_.find(tag);
  return it == tags_.end() ? 0 : it->second.second;
}
std::map<std::string, size_t> MemoryTracker::tag_peaks() const {
  std::lock_guard lock(mu_);
  std::map<std::string, size_t> out;
  for (const auto& [tag, cp] : tags_) out[tag] = cp.second;
  return out;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_cat_ = cur_;
  at_peak_ = cur_;
  peak_total_ = cur_.total();
  for (auto& [tag, cp] : tags_) cp.second = cp.first;
}

size_t memory_physical_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

std::string format_bytes(size_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

std::string MemoryTracker::report() const {
  const MemSnapshot peak = peak_per_category(), at = at_peak_total();
  std::ostringstream os;
  char line[128];
  std::snprintf(line, sizeof line, "%-14s %14s %14s\n", "category", "at peak", "own peak");
  os << line;
  for (int c = 0; c < kMemCategoryCount; ++c) {
    std::snprintf(line, sizeof line, "%-14s %14s %14s\n", mem_category_name(MemCategory(c)),
                  format_bytes(at.bytes[c]).c_str(), format_bytes(peak.bytes[c]).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "%-14s %14s\n", "total", format_bytes(peak_total()).c_str());
  os << line;
  return os.str();
}

}  // namespace agoq

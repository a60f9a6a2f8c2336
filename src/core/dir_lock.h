// One writer per folder: a run holds an exclusive lock on its --out (and `agoq prepare` on its data folder) for as
// long as it writes there, so a job requeued while the old one still runs is refused instead of interleaving with
// it. The lock is flock(2) on `<dir>/.agoq.lock`, which records the holder's pid and host for the refusal; the kernel
// drops it when the holder exits, however it exits, so a crash never leaves a stale lock. A holder that made the
// folder and wrote nothing else there removes it again on release, with the parents it made (a run refused at set-up
// leaves no trace).
#pragma once
#include <string>

namespace agoq {

class DirLock {
 public:
  DirLock() = default;
  // Creates `dir` if needed and locks it. Held elsewhere: throws one line naming `what`, the folder and the holder.
  static DirLock acquire(const std::string& dir, const std::string& what);
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  bool held() const { return fd_ >= 0; }
  static constexpr const char* kFileName = ".agoq.lock";

 private:
  DirLock(int fd, std::string dir, std::string created) : fd_(fd), dir_(std::move(dir)), created_(std::move(created)) {}
  void release();
  int fd_ = -1;
  std::string dir_;
  std::string created_;  // the outermost folder acquire() made (absolute; dir_ or a parent), empty when dir_ existed
};

}  // namespace agoq

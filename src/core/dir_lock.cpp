#include "core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "core/error.h"

namespace agoq {

namespace {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "an unknown host";
  return host;
}

// "pid 1234 on host h": what the lock file says of its holder (written by the holder after it locked).
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string s = n > 0 ? std::string(text, size_t(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "a process that has not yet said who it is" : s;
}

}  // namespace

DirLock DirLock::acquire(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path created;  // the outermost of the folders about to be made
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(fs::symlink_status(p, ec));
       p = p.parent_path()) {
    if (!p.has_relative_path()) break;  // (the root)
    created = p.filename().empty() ? p.parent_path() : p;
  }
  fs::create_directories(dir, ec);
  AGOQ_CHECK(std::filesystem::is_directory(dir), what, " ", dir, ": cannot create the folder",
             ec ? ": " + ec.message() : "");
  const std::string path = (std::filesystem::path(dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  AGOQ_CHECK(fd >= 0, what, " ", dir, ": cannot open its lock file ", kFileName, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? holder_of(fd) : std::string();
    ::close(fd);
    AGOQ_CHECK(err != EWOULDBLOCK, what, " ", dir, " is in use by another agoq run (", holder,
               "): wait for it to end, or choose another folder");
    fail(what, " ", dir, ": cannot lock ", kFileName, ": ", std::strerror(err));
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host_name() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    // The lock holds without the note; only the refusal of a second run is less specific.
  }
  return DirLock(fd, dir, created.string());
}

DirLock::DirLock(DirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)), created_(other.created_) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1), dir_ = std::move(other.dir_), created_ = other.created_;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ < 0) return;
  if (!created_.empty()) {  // nothing but the lock in a folder this holder made: it goes too, with its new parents
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto entries = fs::directory_iterator(dir_, ec);
    const bool only_lock = !ec && std::all_of(begin(entries), end(entries),
                                              [](const auto& e) { return e.path().filename() == kFileName; });
    if (only_lock && ::unlink((fs::path(dir_) / kFileName).c_str()) == 0) {
      const fs::path top(created_);
      // rmdir removes only an empty folder: a parent something else has written into since stays.
      for (fs::path p = fs::absolute(dir_, ec).lexically_normal(); p.string().size() >= top.string().size();
           p = p.parent_path()) {
        if (p.filename().empty()) continue;  // "a/b/" is "a/b"
        if (::rmdir(p.c_str()) != 0 || p == top) break;
      }
    }
  }
  ::close(fd_);  // closing the last descriptor drops the lock
  fd_ = -1;
}

}  // namespace agoq

#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace agoq {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

void rename_into_place(const std::string& from, const std::string& to) {
  AGOQ_CHECK(::rename(from.c_str(), to.c_str()) == 0, to, ": cannot rename ", from, " into place: ", errno_text());
  dir_fsync(parent_dir(to));
}

}  // namespace

// What `path` is now decides how it is written: nothing or a regular file is replaced through a temp; a link is
// followed (its target is what gets written: the link stays); a character device or a FIFO is written through, as
// shell redirection would (`--logits-out /dev/null`); anything else is refused. Never is a non-file replaced.
AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char* target = ::realpath(path_.c_str(), nullptr);
    if (!target) fail(path_, ": cannot follow the link: ", errno_text());
    path_ = target;
    std::free(target);
  }
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    AGOQ_CHECK(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode), path_, ": is ",
               S_ISDIR(st.st_mode) ? "a folder" : "not a regular file",
               "; agoq writes a file there only if it is a regular file, a character device or a FIFO");
    // A FIFO without a reader would block open() forever: its reader gets two seconds to come (O_NONBLOCK gives
    // ENXIO until then), then it is refused.
    for (int tries = 0; (fd_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0; ++tries) {
      if (errno != ENXIO || tries == 40) break;
      ::usleep(50000);
    }
    if (fd_ < 0) fail(path_, ": cannot open for writing: ", errno == ENXIO ? "a FIFO with no reader" : errno_text());
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    stream_ = true;
    return;
  }
  tmp_ = path_ + ".tmp";
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const std::string reason = errno_text();
    tmp_.clear();  // not ours to remove
    fail(path_, ".tmp: cannot create: ", reason);
  }
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::exchange(other.tmp_, {})),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      stream_(other.stream_) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  write_at(size_, data, bytes);
  size_ += bytes;
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t bytes) {
  AGOQ_CHECK(fd_ >= 0, tmp_, ": write after finish()");
  if (stream_) {  // a device or FIFO: only appends
    AGOQ_CHECK(offset == size_, path_, ": a device or FIFO cannot be written at an offset");
    return stream_write(data, bytes);
  }
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::pwrite(fd_, p, std::min<size_t>(bytes, size_t(1) << 30), off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    AGOQ_CHECK(w > 0, tmp_, ": write failed: ", w < 0 ? errno_text() : "no progress");
    p += w, bytes -= size_t(w), offset += uint64_t(w);
  }
}

void AtomicFile::stream_write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(bytes, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    AGOQ_CHECK(w > 0, path_, ": write failed: ", w < 0 ? errno_text() : "no progress");
    p += w, bytes -= size_t(w);
  }
}

void AtomicFile::finish() {
  if (fd_ < 0) return;
  if (stream_) {  // nothing to sync or rename: the bytes went where they were sent
    ::close(std::exchange(fd_, -1));
    return;
  }
  AGOQ_CHECK(::fsync(fd_) == 0, tmp_, ": fsync failed: ", errno_text());
  // close() can report a delayed write error (NFS): the temp is not complete then.
  AGOQ_CHECK(::close(std::exchange(fd_, -1)) == 0, tmp_, ": close failed: ", errno_text());
}

void AtomicFile::commit() {
  if (stream_) return finish();
  AGOQ_CHECK(!tmp_.empty(), path_, ": committed twice");
  finish();
  rename_into_place(tmp_, path_);
  tmp_.clear();
}

void atomic_file_write(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void atomic_symlink(const std::string& target, const std::string& link_path) {
  const std::string tmp = link_path + ".tmp";
  AGOQ_CHECK(::unlink(tmp.c_str()) == 0 || errno == ENOENT, tmp, ": cannot remove a stale link: ", errno_text());
  AGOQ_CHECK(::symlink(target.c_str(), tmp.c_str()) == 0, tmp, ": cannot create a link to ", target, ": ",
             errno_text());
  try {
    rename_into_place(tmp, link_path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

void dir_fsync(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  AGOQ_CHECK(fd >= 0, dir, ": cannot open the folder to sync it: ", errno_text());
  ::fsync(fd);  // some file systems refuse fsync on folders (EINVAL): the rename is then as durable as they allow
  ::close(fd);
}

}  // namespace agoq

#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace agoq {

namespace {

const char* kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "an unknown kind of file";
}

// Opens without blocking (O_NONBLOCK: a FIFO without a writer would block open() forever) and keeps the descriptor
// only for a regular file; `problem` says why not otherwise.
int open_regular(const std::string& path, std::string& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = std::string("it is ") + kind_name(st.st_mode) + ", not a file";
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string input_file_problem(const std::string& path) {
  std::string problem;
  const int fd = open_regular(path, problem);
  if (fd >= 0) ::close(fd);
  return problem;
}

int input_file_open(const std::string& path, const std::string& what) {
  std::string problem;
  const int fd = open_regular(path, problem);
  AGOQ_CHECK(fd >= 0, "cannot open ", what, " ", path, ": ", problem);
  return fd;
}

std::string input_file_read(const std::string& path, const std::string& what) {
  const int fd = input_file_open(path, what);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = errno;
      ::close(fd);
      AGOQ_CHECK(r == 0, "cannot read ", what, " ", path, ": ", std::strerror(err));
      return text;
    }
    text.append(buf, size_t(r));
  }
}

std::string input_dir_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode))
    return std::string("it is ") + (S_ISREG(st.st_mode) ? "a file" : kind_name(st.st_mode)) + ", not a folder";
  // (the effective user's rights, as the reads will have them; root passes unless its capabilities were dropped)
  if (::faccessat(AT_FDCWD, path.c_str(), R_OK | X_OK, AT_EACCESS) != 0) return std::strerror(errno);
  return "";
}

}  // namespace agoq

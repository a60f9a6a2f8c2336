// core/atomic_file.h: content lands whole, no temp is left behind, and a failed write throws one clear line and
// leaves the old file as it was.
#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "tests/common/expect_error.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

fs::path test_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("agoq_atomic_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string file_read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(AtomicFile, ContentLandsAndNoTempIsLeft) {
  const fs::path d = test_dir("content");
  const std::string p = (d / "a.txt").string();
  atomic_file_write(p, "first");
  atomic_file_write(p, "second, longer");
  EXPECT_EQ(file_read(p), "second, longer");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  {
    AtomicFile f(p);
    f.write("xxxx body");
    f.write_at(0, "head", 4);
    f.finish();
    EXPECT_EQ(file_read(p), "second, longer");  // finished is not committed: the old file is still there
    f.commit();
  }
  EXPECT_EQ(file_read(p), "head body");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
  fs::remove_all(d);
}

TEST(AtomicFile, UncommittedLeavesTheOldFile) {
  const fs::path d = test_dir("uncommitted");
  const std::string p = (d / "a.txt").string();
  atomic_file_write(p, "old");
  {
    AtomicFile f(p);
    f.write("new, abandoned");
  }
  EXPECT_EQ(file_read(p), "old");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  fs::remove_all(d);
}

TEST(AtomicFile, MissingFolderIsOneClearError) {
  expect_error([] { atomic_file_write("/nonexistent_dir_agoq/x.bin", "x"); },
               {"/nonexistent_dir_agoq/x.bin.tmp", "cannot create", "No such file or directory"});
}

// A write the file system refuses (here: over the process's file size limit, EFBIG) throws naming the file and
// the reason; the old file stays and the temp is removed.
TEST(AtomicFile, FailedWriteKeepsTheOldFile) {
  const fs::path d = test_dir("failed");
  const std::string p = (d / "a.bin").string();
  atomic_file_write(p, "old content");
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else exceeding the limit kills the process
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big(8192, 'x');
  expect_error([&] { atomic_file_write(p, big); }, {p + ".tmp", "write failed", "File too large"});
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(file_read(p), "old content");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  fs::remove_all(d);
}

TEST(AtomicFile, SymlinkIsReplacedInOneRename) {
  const fs::path d = test_dir("link");
  fs::create_directory(d / "ckpt-step1");
  fs::create_directory(d / "ckpt-step2");
  const std::string link = (d / "ckpt").string();
  atomic_symlink("ckpt-step1", link);
  EXPECT_EQ(fs::read_symlink(link), "ckpt-step1");
  fs::create_symlink("stale", link + ".tmp");  // left by a crash: replaced
  atomic_symlink("ckpt-step2", link);
  EXPECT_EQ(fs::read_symlink(link), "ckpt-step2");
  EXPECT_TRUE(fs::is_directory(link));
  EXPECT_FALSE(fs::exists(fs::symlink_status(link + ".tmp")));
  expect_error([] { atomic_symlink("x", "/nonexistent_dir_agoq/ckpt"); },
               {"/nonexistent_dir_agoq/ckpt.tmp", "No such file or directory"});
  fs::remove_all(d);
}

// Only a regular file is replaced (issue 42: `eval --logits-out /dev/null` replaced the system's /dev/null): a link
// is followed and stays a link, a character device or a FIFO with a reader is written through, a FIFO without one
// and a folder are refused.
TEST(AtomicFile, WhatIsNotARegularFileIsNeverReplaced) {
  const fs::path d = test_dir("special");
  atomic_file_write((d / "target.txt").string(), "old");
  fs::create_symlink("target.txt", d / "link");
  atomic_file_write((d / "link").string(), "through the link");
  EXPECT_TRUE(fs::is_symlink(d / "link"));
  EXPECT_EQ(file_read(d / "target.txt"), "through the link");

  const fs::path null_dev = d / "null";  // a /dev/null of the test's own (root makes device nodes)
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    atomic_file_write(null_dev.string(), "discarded");
    EXPECT_TRUE(fs::is_character_file(null_dev));
    EXPECT_FALSE(fs::exists(null_dev.string() + ".tmp"));
  } else {
    GTEST_LOG_(INFO) << "skipping the character device case: mknod needs root (" << std::strerror(errno) << ")";
  }

  const fs::path fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { atomic_file_write(fifo.string(), "x"); }, {"fifo", "a FIFO with no reader"});
  EXPECT_TRUE(fs::is_fifo(fifo));
  std::string got;
  std::thread reader([&] { got = file_read(fifo); });
  atomic_file_write(fifo.string(), "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));

  fs::create_directory(d / "folder");
  expect_error([&] { atomic_file_write((d / "folder").string(), "x"); }, {"folder", "is a folder"});
  EXPECT_TRUE(fs::is_directory(d / "folder"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace agoq

// Files that a reader, or a crash, sees either whole in their old version or whole in their new one: the bytes go
// to `path.tmp` in the same folder, which is fsynced and then renamed over `path`, and the folder is fsynced so
// the rename itself survives a power cut. Every writer of agoq writes through here.
// Errors throw agoq::Error as one line naming the file and the system's reason ("x.tmp: write failed: No space
// left on device"); an AtomicFile destroyed before commit() removes its temp, so the old file stays as it was.
// Only a regular file (or nothing) is replaced: a link is followed to its target, a character device or a FIFO is
// written through (`--logits-out /dev/null`; a FIFO's reader has two seconds to open it), anything else is
// refused; never is such a path replaced by a file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agoq {

class AtomicFile {
 public:
  // Creates (or truncates a stale) `path.tmp`, or opens the device or FIFO `path` is.
  explicit AtomicFile(std::string path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  ~AtomicFile();

  const std::string& path() const { return path_; }
  // Appends.
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Writes at an offset, e.g. over a header whose checksum is known only at the end (does not move the end).
  void write_at(uint64_t offset, const void* data, size_t bytes);
  // The first half of commit(): the temp is complete and on disk, not yet in place. For a caller that commits
  // several files in an order of its own (checkpoints); commit() calls it when needed.
  void finish();
  // Renames the temp over `path` and fsyncs the folder.
  void commit();

 private:
  void stream_write(const void* data, size_t bytes);

  std::string path_, tmp_;  // tmp_ empty: nothing left to remove (committed, moved from, or a device or FIFO)
  int fd_ = -1;
  uint64_t size_ = 0;    // where write() appends
  bool stream_ = false;  // path_ is a device or FIFO, written through
};

// The whole file in one call.
void atomic_file_write(const std::string& path, std::string_view bytes);
// Points `link_path` at `target` (relative to the link's folder, as symlink(2) reads it) in one rename: a symlink
// `link_path.tmp` is made, renamed over link_path, and the folder fsynced. A reader sees the old target or the new.
void atomic_symlink(const std::string& target, const std::string& link_path);
// fsync of a folder, so that renames and removals in it are durable. Throws when it cannot be opened; a file system
// that refuses fsync on folders is accepted (nothing more can be done there).
void dir_fsync(const std::string& dir);

}  // namespace agoq

// A folder a command made for its own work, removed with everything in it when the command ends, however it ends
// (an error goes out all the same), unless the command keeps it.
#pragma once
#include <filesystem>
#include <system_error>
#include <utility>

namespace agoq {

class FolderCleanup {
 public:
  explicit FolderCleanup(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~FolderCleanup() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  FolderCleanup(const FolderCleanup&) = delete;
  FolderCleanup& operator=(const FolderCleanup&) = delete;
  void keep() { dir_.clear(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace agoq

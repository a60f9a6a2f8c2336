#include "data/prepared_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {
constexpr const char* kStaging = ".prepare.tmp";
constexpr const char* kMarker = "meta.json";
}  // namespace

std::string prepared_dir_earlier_set(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : kPreparedFiles)
    if (fs::exists(fs::symlink_status(dir / name, ec))) return name;
  return {};
}

void prepared_dir_check_complete(const fs::path& dir) {
  std::error_code ec;
  AGOQ_CHECK(!fs::exists(dir / kStaging, ec) || fs::exists(dir / kMarker, ec), "--data ", dir.string(),
             ": an `agoq prepare` into it was interrupted while it replaced the files (", kStaging,
             " is there, meta.json is not): run it again");
}

fs::path prepared_dir_staging(const fs::path& dir) {
  const fs::path staging = dir / kStaging;
  std::error_code ec;
  fs::remove_all(staging, ec);  // an interrupted prepare's (the caller holds the folder's lock)
  AGOQ_CHECK(!ec, staging.string(), ": cannot remove a stale staging folder: ", ec.message());
  fs::create_directory(staging, ec);
  AGOQ_CHECK(!ec, staging.string(), ": cannot create: ", ec.message());
  return staging;
}

void prepared_dir_commit(const fs::path& dir) {
  const fs::path staging = dir / kStaging;
  const fs::path marker = dir / kMarker;
  AGOQ_CHECK(::unlink(marker.c_str()) == 0 || errno == ENOENT, marker.string(),
             ": cannot remove the old set's: ", std::strerror(errno));
  dir_fsync(dir.string());
  for (const char* name : kPreparedFiles) {  // meta.json is the last of them
    const fs::path from = staging / name, to = dir / name;
    std::error_code ec;
    if (!fs::exists(from, ec)) {
      AGOQ_CHECK(::unlink(to.c_str()) == 0 || errno == ENOENT, to.string(),
                 ": cannot remove the old set's: ", std::strerror(errno));
      continue;
    }
    AGOQ_CHECK(::rename(from.c_str(), to.c_str()) == 0, to.string(),
               ": cannot move the new file into place: ", std::strerror(errno));
    if (name == std::string(kMarker)) dir_fsync(dir.string());
  }
  ::rmdir(staging.c_str());
  dir_fsync(dir.string());
}

}  // namespace agoq

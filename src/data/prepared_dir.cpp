#include "data/prepared_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {
constexpr const char* kStaging = ".prepare.tmp";
constexpr const char* kMarker = "meta.json";

// A meta.json that `agoq prepare` wrote: an object naming its token files.
bool prepared_meta_ours(const fs::path& meta) {
  std::error_code ec;
  if (!fs::is_regular_file(meta, ec) || fs::file_size(meta, ec) > (size_t(1) << 20)) return false;
  try {
    const nlohmann::json j = json_parse(input_file_read(meta.string(), "meta.json"), meta.string());
    return j.is_object() && j.contains("files") && j["files"].is_object() && j["files"].contains("train");
  } catch (const Error&) {
    return false;  // unreadable or not JSON: not a set agoq wrote
  }
}

}  // namespace

void prepared_dir_check_replaceable(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  std::string first;
  for (const char* name : kPreparedFiles)
    if (first.empty() && fs::exists(fs::symlink_status(dir / name, ec))) first = name;
  if (first.empty()) return;
  // A set of ours: committed (its meta.json), or being replaced when a prepare stopped (its staging folder).
  const bool ours = prepared_meta_ours(dir / kMarker) ||
                    (!fs::exists(fs::symlink_status(dir / kMarker, ec)) && fs::is_directory(dir / kStaging, ec));
  AGOQ_CHECK(ours, "--out ", dir.string(), " holds ", first,
             " but no corpus `agoq prepare` wrote (its meta.json): --overwrite replaces only a prepared corpus, "
             "never a model's or anyone else's files; choose another --out");
  AGOQ_CHECK(overwrite, "--out ", dir.string(), " already holds a prepared corpus (", first,
             "); runs made from it resume only with it: choose another --out, or replace it with --overwrite");
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

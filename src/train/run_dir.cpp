#include "train/run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/paths.h"
#include "formats/checkpoint.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLink = "ckpt";
constexpr const char* kMetrics = "metrics.jsonl";

bool is_link(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}
bool is_real_dir(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What in `out` belongs to an earlier run: the checkpoint link, a checkpoint folder, or the metrics log.
std::string earlier_run_in(const fs::path& out) {
  std::error_code ec;
  if (is_link(out / kLink)) return (out / fs::read_symlink(out / kLink, ec)).string();
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec))
    if (ckpt_folder_name_ours(e.path().filename().string())) return e.path().string();
  if (fs::exists(out / kMetrics, ec)) return (out / kMetrics).string();
  return {};
}

// The link must name a ckpt-step<N> folder of --out itself (or nothing yet): agoq deletes what it named.
void link_check(const fs::path& out) {
  const fs::path link = out / kLink;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(link, ec))) return;
  AGOQ_CHECK(is_link(link), "--out ", out.string(),
             ": ckpt is not the link agoq keeps to its latest checkpoint; move it away or choose another --out");
  const std::string target = fs::read_symlink(link, ec).string();
  AGOQ_CHECK(!ec && ckpt_folder_name_ours(target) &&
                 (!fs::exists(fs::symlink_status(out / target)) || is_real_dir(out / target)),
             "--out ", out.string(), ": ckpt points to '", target,
             "', not to a ckpt-step<N> folder inside --out; agoq replaces what that link names, so it will not "
             "use it: remove the link or choose another --out");
}

// Every ckpt-step* entry must be a real folder holding only checkpoint files: the next save may write into one.
void ckpt_folders_check(const fs::path& out) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-step", 0) != 0) continue;
    AGOQ_CHECK(is_real_dir(e.path()), "--out ", out.string(), ": ", name,
               " is not a folder agoq made (a link or a file); agoq writes checkpoints only into folders of its own: "
               "move it away or choose another --out");
    const std::string foreign = checkpoint_foreign_entry(e.path().string());
    AGOQ_CHECK(foreign.empty(), "--out ", out.string(), ": ", name, " holds '", foreign,
               "', which is not a checkpoint's file; agoq will not write over it: move it away or choose another "
               "--out");
  }
}

}  // namespace

bool ckpt_folder_name_ours(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-step";
  return name.size() > prefix.size() && name.rfind(prefix, 0) == 0 &&
         std::all_of(name.begin() + prefix.size(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

void run_dir_check_sources(const std::string& out_dir, const std::string& resume, const std::string& init_from) {
  for (const auto& [flag, in] : {std::pair{"--resume", resume}, std::pair{"--init-from", init_from}})
    AGOQ_CHECK(!path_within(out_dir, in), "--out ", out_dir, path_within(in, out_dir) ? " is " : " is inside ", flag,
               " ", in, ", which this run reads: a run never writes into its source; choose another --out");
  if (!path_within(init_from, out_dir)) return;
  std::error_code ec;
  const fs::path rel = fs::relative(fs::weakly_canonical(init_from, ec), fs::weakly_canonical(out_dir, ec), ec);
  const std::string first = rel.empty() ? std::string() : rel.begin()->string();
  AGOQ_CHECK(!ckpt_folder_name_ours(first), "--init-from ", init_from, " is a checkpoint of --out ", out_dir,
             ", which this run's saves replace: a run never deletes what it reads from; give another --out, or "
             "copy the checkpoint elsewhere first");
}

void run_dir_check(const std::string& out_dir, bool overwrite, const std::string& resume) {
  const fs::path out(out_dir);
  std::error_code ec;
  link_check(out);
  ckpt_folders_check(out);
  AGOQ_CHECK(
      !fs::exists(fs::symlink_status(out / kMetrics, ec)) || fs::is_regular_file(fs::symlink_status(out / kMetrics)),
      "--out ", out.string(),
      ": metrics.jsonl is not a plain file (a link?); agoq writes its log there: move "
      "it away or choose another --out");
  if (overwrite) return;
  const bool continues = !resume.empty() && path_within(resume, out);
  const std::string earlier = continues ? std::string() : earlier_run_in(out);
  if (earlier.empty()) return;
  // The way on: the latest checkpoint (the link), else the checkpoint folder found, else none to continue.
  const std::string resume_from = is_link(out / kLink)                                  ? (out / kLink).string()
                                  : ckpt_folder_name_ours(fs::path(earlier).filename()) ? earlier
                                                                                        : std::string();
  fail("--out ", out.string(), " already holds a run (", earlier, "); ",
       resume_from.empty() ? std::string("it saved no checkpoint to continue: replace")
                           : "continue it with --resume " + resume_from + ", or replace",
       " it with --overwrite");
}

std::string run_id_new() {
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) ^ rd() ^
                     uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) ^ uint64_t(::getpid());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return hex;
}

std::string ckpt_link_switch(const std::string& out_dir, const std::string& name, const RunIdentity& who) {
  const fs::path out(out_dir), link = out / kLink;
  std::error_code ec;
  const std::string previous = is_link(link) ? fs::read_symlink(link, ec).string() : std::string();
  atomic_symlink(name, link.string());
  if (previous.empty() || previous == name) return {};
  const fs::path dir = out / previous;
  if (!ckpt_folder_name_ours(previous) || !is_real_dir(dir)) return {};  // (run_dir_check refused such a link)
  const CheckpointMarker m = checkpoint_marker_read(dir.string());
  const bool ours = m.is_checkpoint && ((!m.run.empty() && m.run == who.run) ||
                                        (!who.resume_commit.empty() && m.commit == who.resume_commit) || who.overwrite);
  if (!ours) return "kept " + dir.string() + ": its marker does not name this run";
  const std::string left = checkpoint_remove(dir.string());
  return left.empty() ? std::string() : "kept " + dir.string() + ": it holds '" + left + "', not a checkpoint's file";
}

}  // namespace agoq

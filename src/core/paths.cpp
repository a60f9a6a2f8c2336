#include "core/paths.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"

namespace agoq {

namespace fs = std::filesystem;

bool path_within(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return false;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return false;
  const fs::path d_clean = d.filename().empty() ? d.parent_path() : d;  // "a/b/" is "a/b"
  const auto [end, _] = std::mismatch(d_clean.begin(), d_clean.end(), p.begin(), p.end());
  return end == d_clean.end();
}

void output_file_check_not_input(const char* out_flag, const std::string& out, const char* in_flag,
                                 const std::string& in) {
  if (!path_within(out, in)) return;
  std::error_code ec;
  const bool same = fs::equivalent(out, in, ec) || path_within(in, out);
  AGOQ_CHECK(!same && !fs::exists(out, ec), out_flag, " ", out, same ? " is " : " is a file inside ", in_flag, " ", in,
             ", which this command reads: it never writes over its input; choose another ", out_flag);
}

void output_file_check_replaceable(const std::string& flag, const std::string& path, const char* kind,
                                   const std::function<bool(const std::string& path)>& is_kind) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;  // (a link to nothing exists: refused below)
  const std::string problem = input_file_problem(path);
  AGOQ_CHECK(problem.empty(), flag, " ", path, ": ", problem);
  bool ours = false;
  try {
    ours = is_kind(path);
  } catch (const std::exception&) {}
  AGOQ_CHECK(ours, flag, " ", path, " exists and is not ", kind,
             ": agoq replaces only its own earlier output; remove it or name another file");
}

bool output_file_is_png(const std::string& path) {
  char sig[8] = {};
  std::ifstream f(path, std::ios::binary);
  return f.read(sig, sizeof sig) && std::string_view(sig, sizeof sig) == "\x89PNG\r\n\x1a\n";
}

bool output_file_is_json_with(const std::string& path, const char* key) {
  std::error_code ec;
  if (fs::file_size(path, ec) > (size_t(64) << 20) || ec) return false;
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json j = json_parse(text.str(), path);
  return j.is_object() && j.contains(key);
}

}  // namespace agoq

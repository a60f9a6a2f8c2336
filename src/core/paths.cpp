#include "core/paths.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

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

}  // namespace agoq

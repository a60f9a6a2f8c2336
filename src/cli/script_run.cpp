#include "cli/script_run.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace agoq {
namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string last_line(const std::string& text) {
  std::stringstream lines(text);
  std::string last;
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) last = l;
  return last;
}

}  // namespace

std::string cli_script_run(const std::string& what, const std::vector<std::string>& argv) {
  std::string err_path = (std::filesystem::temp_directory_path() / "agoq-script-XXXXXX").string();
  const int fd = mkstemp(err_path.data());
  AGOQ_CHECK(fd >= 0, what, ": cannot make a temporary file in ", std::filesystem::temp_directory_path().string());
  close(fd);
  std::string cmd;
  for (const std::string& a : argv) cmd += shell_quote(a) + " ";
  FILE* p = popen((cmd + "2>" + shell_quote(err_path)).c_str(), "r");
  std::string out;
  if (p) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  }
  const int st = p ? pclose(p) : -1;
  std::stringstream err;
  err << std::ifstream(err_path).rdbuf();
  std::filesystem::remove(err_path);
  const std::string why = last_line(err.str()).empty() ? last_line(out) : last_line(err.str());
  AGOQ_CHECK(p && st == 0, what, " failed (", why.empty() ? "no output" : why, ")");
  return out;
}

}  // namespace agoq

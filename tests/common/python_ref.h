// The Python references of the import tests: the project's .venv (scripts/install-deps.sh --test) with the pinned
// transformers, tokenizers, safetensors and gguf over Debian's torch. The test command installs it, so a missing
// .venv is a failure, not a skip.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace agoq {

inline std::string python_ref_exe() { return AGOQ_SOURCE_DIR "/.venv/bin/python"; }

// Runs `python_ref_exe() script args` (script relative to the source folder), stdout and stderr together; the test
// fails, with the output, when it exits non-zero or the venv is missing.
inline std::string python_ref_run(const std::string& script, const std::string& args) {
  if (!std::filesystem::exists(python_ref_exe())) {
    ADD_FAILURE() << python_ref_exe() << " missing: run scripts/install-deps.sh --test";
    return "";
  }
  const std::string cmd = python_ref_exe() + " " AGOQ_SOURCE_DIR "/" + script + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return "";
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  return out;
}

}  // namespace agoq

// Driving the agoq binary from tests: run it, check that an error is one clean line, and a fixture with a tiny
// token corpus and a tiny model (tests/cli/*.cpp).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/token_file.h"

namespace agoq {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code;  // -1 when killed by a signal
  std::string err;
};

// Per-test names, so ctest can run the cases in parallel.
inline std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

inline RunResult run_agoq(const std::string& args) {
  const fs::path err_file =
      fs::temp_directory_path() / ("agoq_cli_stderr_" + test_name() + "_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = "timeout 60 " AGOQ_BIN_PATH " " + args + " >/dev/null 2>" + err_file.string();
  const int st = std::system(cmd.c_str());
  std::string err;
  {
    std::ifstream f(err_file);
    err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::error_code ec;
  fs::remove(err_file, ec);  // nothing of the test's left in /tmp
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, err};
}

// stdout of the agoq binary (stderr to the test's log), with its exit status.
inline std::string agoq_stdout(const std::string& args, int* status, const std::string& bin = AGOQ_BIN_PATH " ") {
  std::string out;
  FILE* p = popen(("timeout 120 " + bin + args).c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = p ? pclose(p) : -1;
  return out;
}

inline std::string file_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void expect_clean_error(const std::string& args, const std::string& needle) {
  const RunResult r = run_agoq(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("agoq: error: ", 0), 0u) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nexpected '" << needle << "' in: " << r.err;
}

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    // Per process too: another checkout's suite may run the same test at the same time.
    dir_ = fs::temp_directory_path() / ("agoq_cli_" + test_name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    std::vector<int32_t> tok(3000);
    Rng rng(1);
    for (auto& t : tok) t = int32_t(rng.below(64));
    token_file_write((dir_ / "data/train.bin").string(), tok, 64);
    token_file_write((dir_ / "data/val.bin").string(), std::span(tok).subspan(0, 500), 64);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string d(const std::string& rel) const { return (dir_ / rel).string(); }
  // `train` on the tiny data set with a tiny model; `flags` override the defaults (each flag given once).
  std::string train(std::map<std::string, std::string> flags = {}) const {
    std::map<std::string, std::string> args = {
        {"--data", d("data")}, {"--dim", "16"}, {"--layers", "1"}, {"--heads", "2"}, {"--kv-heads", "2"},
        {"--ffn", "24"},       {"--seq", "8"},  {"--batch", "2"},  {"--steps", "3"}, {"--out", d("run")}};
    for (auto& [k, v] : flags) args[k] = v;
    std::string cmd = "train --quiet";
    for (auto& [k, v] : args)
      if (!v.empty()) cmd += " " + k + " " + v;
    return cmd;
  }
  fs::path dir_;
};

}  // namespace agoq

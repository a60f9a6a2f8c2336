// Helpers shared by the test_data tests.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include <unistd.h>

#include "../common/expect_error.h"
#include "core/error.h"

namespace agoq::data_test {

namespace fs = std::filesystem;

// A fresh, empty folder per test (and process, so parallel test runs never share one) under the system temp dir.
inline fs::path data_test_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("agoq_test_data_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Removes this process's test folders when the test binary exits.
struct DataTestCleanup {
  ~DataTestCleanup() {
    const std::string prefix = "agoq_test_data_" + std::to_string(getpid()) + "_";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
  }
};
inline DataTestCleanup data_test_cleanup;

inline std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void file_put(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

using agoq::expect_error;

// Deterministic English-like text (word salad with punctuation and numbers) for tokenizer tests.
inline std::string synthetic_text(size_t lines, uint64_t seed = 1) {
  static const char* words[] = {"the",         "a",        "truth",    "universally", "acknowledged", "that",
                                "single",      "man",      "in",       "possession",  "of",           "good",
                                "fortune",     "must",     "be",       "want",        "wife",         "however",
                                "little",      "known",    "feelings", "or",          "views",        "such",
                                "may",         "on",       "his",      "first",       "entering",     "neighbourhood",
                                "this",        "is",       "so",       "well",        "fixed",        "minds",
                                "surrounding", "families", "he",       "considered",  "rightful",     "property",
                                "some",        "one",      "other",    "their",       "daughters",    "Elizabeth",
                                "Darcy",       "Bennet"};
  std::string out;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  for (size_t l = 0; l < lines; ++l) {
    const uint64_t n = 4 + next(10);
    for (uint64_t w = 0; w < n; ++w) {
      if (w) out += ' ';
      out += words[next(sizeof words / sizeof *words)];
      if (next(12) == 0) out += ',';
      if (next(40) == 0) out.append(" ").append(std::to_string(next(2000)));
    }
    out += next(3) == 0 ? "." : ";";
    out += '\n';
    if (next(8) == 0) out += '\n';
  }
  return out;
}

}  // namespace agoq::data_test

// JSON read from outside (core/json_read.h) and input files (core/input_file.h): issue 42's reproducers at the level
// of the shared functions; tests/cli/test_cli_reliability_json.cpp drives the same through the commands.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/input_file.h"
#include "core/json_read.h"
#include "tests/common/expect_error.h"
#include "tests/common/temp_path.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string nested(size_t levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

// An array 100,000 levels deep parsed whole, then quoted by dump(), overflowed the stack (SIGSEGV).
TEST(JsonParse, NestingBeyondTheLimitIsRefusedByName) {
  expect_error([] { json_parse(nested(100000), "model config c.json"); },
               {"model config c.json is not JSON agoq can read", "nest deeper than 512 levels"});
  expect_error([] { json_parse("{\"a\": " + nested(kJsonMaxDepth) + "}", "x"); }, {"deeper than 512"});
  EXPECT_NO_THROW(json_parse(nested(kJsonMaxDepth), "x"));
}

// nlohmann threw out_of_range.406 with its own "[json.exception...]" text for a number beyond a double.
TEST(JsonParse, ANumberBeyondADoubleIsOneLineNamingIt) {
  try {
    json_parse("{\"unused\": 1e400}", "model config c.json");
    FAIL() << "1e400 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model config c.json is not JSON agoq can read: the number 1e400 is beyond"), std::string::npos)
        << m;
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  }
}

TEST(JsonParse, ASyntaxErrorNamesItsByteAndLine) {
  try {
    json_parse("{\n  \"a\": 1,\n  \"b\": x}", "f.json");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("f.json is not valid JSON (at byte 20 of 21, line 3: "), std::string::npos) << m;
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
    EXPECT_EQ(m.find("last read"), std::string::npos) << m;  // (raw input bytes)
  }
  expect_error([] { json_parse("{\"a\": ", "f.json"); }, {"f.json is not valid JSON (it ends before the JSON does)"});
  expect_error([] { json_parse("\"\xff\"", "f.json"); }, {"f.json is not valid JSON (at byte", "UTF-8"});
}

TEST(JsonExcerpt, IsBoundedHoweverLargeOrDeepTheValue) {
  EXPECT_EQ(json_excerpt(json{{"a", 1}}), "{\"a\":1}");
  const std::string big(50 << 20, 'a');  // a 50 MB config string was quoted whole
  const std::string e = json_excerpt(json(big), 40);
  EXPECT_EQ(e, "\"" + std::string(39, 'a') + "...");
  // A value built deeper than any parse allows (dump() recurses once per level): cut after `max_chars` levels.
  json deep = 1;
  for (int i = 0; i < 200000; ++i) deep = json::array({std::move(deep)});
  EXPECT_EQ(json_excerpt(deep, 10), std::string(10, '[') + "...");
  // A cut inside a UTF-8 character drops that character.
  EXPECT_EQ(json_excerpt(json("\xc3\xa9\xc3\xa9"), 4), "\"\xc3\xa9...");
  EXPECT_EQ(json_excerpt(json(std::string("\xff"))), "a string that is not UTF-8");
}

class InputFile : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_ = test_temp_path("input_file");
};

// A FIFO named model.safetensors (or config.json) hung in open(); a folder gave libstdc++'s "basic_filebuf::
// underflow ... Is a directory"; a symlink loop read as "no such file".
TEST_F(InputFile, WhatIsNotARegularFileIsNamedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(p("model.safetensors").c_str(), 0644), 0);
  expect_error([&] { input_file_read(p("model.safetensors"), "safetensors file"); },
               {"cannot open safetensors file " + p("model.safetensors") + ": it is a FIFO, not a file"});
  fs::create_directories(p("index.json"));
  expect_error([&] { input_file_read(p("index.json"), "safetensors index"); }, {"it is a folder, not a file"});
  fs::create_symlink(p("loop"), p("loop"));
  expect_error([&] { input_file_read(p("loop"), "model config"); }, {"Too many levels of symbolic links"});
  expect_error([&] { input_file_read(p("none"), "model config"); }, {"No such file or directory"});
  expect_error([&] { input_file_read("/dev/null", "model config"); }, {"it is a character device, not a file"});
  std::ofstream(p("ok.json")) << "{}";
  EXPECT_EQ(input_file_read(p("ok.json"), "x"), "{}");
  EXPECT_EQ(input_dir_problem(p("")), "");
  EXPECT_EQ(input_dir_problem(p("ok.json")), "it is a file, not a folder");
  EXPECT_EQ(input_dir_problem(p("loop")), "Too many levels of symbolic links");
}

}  // namespace
}  // namespace agoq

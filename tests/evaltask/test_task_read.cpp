// The task readers' error lines (file and line named, one line each) and the Python string operations lm-eval's
// templates use, against the values Python gives (written here from python3).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "evaltask/task_read.h"
#include "evaltask/task_text.h"
#include "tests/common/expect_error.h"
#include "tests/common/temp_path.h"

namespace agoq {
namespace {

// A file of the test's own, removed afterwards.
struct TempFile {
  explicit TempFile(const std::string& name, const std::string& text) : path(test_temp_path(name).string()) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

const char* const kHellaswag =
    R"({"activity_label": "Baking", "ctx_a": "Mix it [title] now.", "ctx_b": "then THE Oven", )"
    R"("endings": ["a [header] b", " c  d ", "e", "f"], "label": "2"})";

TEST(TaskText, PythonStringOperations) {
  EXPECT_EQ(py_capitalize("üBER alles"), "Über alles");  // 'üBER alles'.capitalize()
  EXPECT_EQ(py_capitalize("\xc7\x86"
                          "emal"),
            "\xc7\x85"
            "emal");                         // 'ǆemal' -> 'ǅemal': title case
  EXPECT_EQ(py_count_words("  a b\n"), 4u);  // len(re.split(r"\s+", "  a b\n"))
  EXPECT_EQ(py_count_words("a\xc2\xa0"
                           "b"),
            2u);  // U+00A0 is \s
  EXPECT_EQ(py_strip("\x1f\xc2\xa0 x y \n"), "x y");
  EXPECT_EQ(py_rstrip(" x \t"), " x");
  EXPECT_EQ(py_len("café"), 4u);
  EXPECT_EQ(py_split("a  b", ' '), (std::vector<std::string>{"a", "", "b"}));
}

TEST(TaskText, HellaswagCleaningAsLmEval) {
  EXPECT_EQ(hellaswag_clean(" Baking: a [title] How to [step] x  y   z "), "Baking: a. How to x y  z");
  EXPECT_EQ(hellaswag_clean("a [b\n c] d [e]"), "a [b\n c] d ");
  EXPECT_EQ(hellaswag_clean("[unclosed x"), "[unclosed x");
}

TEST(TaskRead, HellaswagQueryAndEndings) {
  TempFile f("hs.jsonl", std::string(kHellaswag) + "\n\n" + kHellaswag + "\n");
  const Task t = task_read("hellaswag:" + f.path);
  ASSERT_EQ(t.items.size(), 2u);
  EXPECT_EQ(t.items[1].line, 3u);
  EXPECT_EQ(t.items[0].requests[0].context, "Baking: Mix it. now. Then the oven");
  EXPECT_EQ(t.items[0].requests[1].continuation, " c d");
  EXPECT_EQ(t.items[0].choices[0], "a b");
  EXPECT_EQ(t.items[0].gold, 2);
  EXPECT_EQ(task_read("hellaswag:" + f.path, 1).items.size(), 1u);  // --limit
}

TEST(TaskRead, EveryProblemIsOneLineNamingFileAndLine) {
  expect_error([] { task_read("nosuch:x.jsonl"); }, {"unknown task \"nosuch\"", "hellaswag:FILE"});
  expect_error([] { task_read("hellaswag"); }, {"needs its file", "hellaswag:FILE"});
  expect_error([] { task_read("piqa:/nonexistent/p.jsonl"); }, {"/nonexistent/p.jsonl", "No such file"});
  const std::pair<std::string, std::string> cases[] = {
      {"{\"context\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n{\"context\": \n", ":2: not a JSON object"},
      {R"({"context": "q", "choices": ["a", "b"], "label": 2})", ":1: label 2 is out of range for 2 choices"},
      // Beyond 32 bits: reported as given, never wrapped into range (-2^32 and 2^64 - 2^32 both wrap to 0).
      {R"({"context": "q", "choices": ["a", "b"], "label": -4294967296})", ":1: label -4294967296 is out of range"},
      {R"({"context": "q", "choices": ["a", "b"], "label": 18446744069414584320})",
       ":1: label 18446744069414584320 is out of range"},
      {R"({"context": "q", "choices": ["a", ""], "label": 0})", ":1: choice 1 is empty"},
      {R"({"context": "q", "choices": "a", "label": 0})", ":1: \"choices\" must be a list of strings"},
      {R"({"context": "q", "choices": ["a"], "label": "x"})", ":1: \"label\" must be a whole number"},
      {"\n\n[1, 2]", ":3: not a JSON object"},
      {"", "no items"},
  };
  for (const auto& [text, part] : cases) {
    TempFile f("mc.jsonl", text);
    expect_error([&] { task_read("mc:" + f.path); }, {part, f.path});
  }
  TempFile hs("hs_bad.jsonl", R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "label": 0})");
  expect_error([&] { task_read("hellaswag:" + hs.path); }, {hs.path + ":1: needs \"endings\""});
  TempFile wg("wg.jsonl", R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})");
  expect_error([&] { task_read("winogrande:" + wg.path); }, {wg.path + ":1: \"sentence\" has no \"_\""});
  TempFile arc("arc.jsonl", R"({"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"})");
  expect_error([&] { task_read("arc_easy:" + arc.path); }, {arc.path + ":1: answerKey \"B\""});
}

TEST(TaskRead, PiqaOriginalFormReadsItsLabelsFile) {
  const std::string dir = std::filesystem::path(test_temp_path("piqa_valid")).string();
  std::filesystem::create_directories(dir);
  const std::string line = R"({"goal": "g", "sol1": "a", "sol2": "b"})";
  std::ofstream(dir + "/valid.jsonl") << line << "\n" << line << "\n";
  std::ofstream(dir + "/valid-labels.lst") << "1\n0\n";
  const Task t = task_read("piqa:" + dir + "/valid.jsonl");
  ASSERT_EQ(t.items.size(), 2u);
  EXPECT_EQ(t.items[0].gold, 1);
  EXPECT_EQ(t.items[1].gold, 0);
  EXPECT_EQ(t.items[0].requests[0].context, "Question: g\nAnswer:");
  std::ofstream(dir + "/valid-labels.lst") << "1\n2\n";
  expect_error([&] { task_read("piqa:" + dir + "/valid.jsonl"); }, {"valid-labels.lst:2: a label must be 0 or 1"});
  std::filesystem::remove(dir + "/valid-labels.lst");
  expect_error([&] { task_read("piqa:" + dir + "/valid.jsonl"); }, {"valid-labels.lst", "No such file"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace agoq

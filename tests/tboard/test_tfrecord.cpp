// TFRecord framing and the events writer's file handling. The expected bytes were computed independently, by the
// pure-Python CRC32C and RecordWriter of the tensorboard package (2.21.0):
//   from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c, masked_crc32c
//   from tensorboard.summary.writer.record_writer import RecordWriter
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "tboard/tensorboard.h"
#include "tboard/tfrecord.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

TEST(TfRecord, Crc32cKnownValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c_masked(""), 0xA282EAD8u);
  EXPECT_EQ(crc32c_masked("agoq tensorboard"), 0xFD438AA7u);
  EXPECT_EQ(crc32c_masked(std::string("\x10\0\0\0\0\0\0\0", 8)), 0x18FEFB95u);  // the length 16 as u64
}

TEST(TfRecord, FrameEqualsTensorBoardsRecordWriter) {
  EXPECT_EQ(hex(tfrecord_frame("agoq tensorboard")),
            "100000000000000095fbfe1861676f712074656e736f72626f617264a78a43fd");
  EXPECT_EQ(hex(tfrecord_frame("")), "000000000000000029039807d8ea82a2");
}

TEST(TensorBoard, ScalarsOfARecord) {
  const nlohmann::json rec = nlohmann::json::parse(
      R"({"step": 3, "loss": 2.5, "compute": "bf16", "ok": true, "memory": {"peak": {"weights": 1024}, "peak_total": 7},
          "list": [1, 2]})");
  const std::vector<std::pair<std::string, double>> want = {
      {"loss", 2.5}, {"memory/peak/weights", 1024}, {"memory/peak_total", 7}};
  auto got = tensorboard_scalars(rec);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

class TensorBoardDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("agoq_tboard_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TensorBoardDir, FileVersionFirstAndNothingReplaced) {
  TensorBoardWriter a((dir_ / "tb").string()), b((dir_ / "tb").string());  // likely the same second
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(fs::path(a.path()).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream f(a.path(), std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  ASSERT_GE(bytes.size(), 16u);
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  a.step(1, {{"loss", 1.0}});
  EXPECT_GT(fs::file_size(a.path()), bytes.size());  // in the file when step() returns
}

TEST_F(TensorBoardDir, BadFolderIsOneErrorNamingTheFlag) {
  fs::create_directories(dir_);
  std::ofstream((dir_ / "file").string()) << "x";
  for (const fs::path& bad : {dir_ / "file", dir_ / "file" / "sub"}) {
    try {
      TensorBoardWriter w(bad.string());
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--tensorboard " + bad.string() + ": ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace agoq

#include <gtest/gtest.h>

#include "core/hash.h"
#include "data/token_file.h"
#include "tests/data/data_test_util.h"

namespace agoq {

using namespace agoq::data_test;

namespace {

std::vector<int32_t> iota_tokens(size_t n, int32_t mod) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t((i * 7919 + 13) % size_t(mod));
  return v;
}

}  // namespace

TEST(TokenFile, RoundTripUint16) {
  const fs::path p = data_test_dir("tf16") / "t.bin";
  const auto toks = iota_tokens(12345, 4096);
  token_file_write(p, toks, 4096);
  TokenFileHeader h;
  EXPECT_EQ(token_file_read(p, &h), toks);
  EXPECT_EQ(h.dtype, 2u);
  EXPECT_EQ(h.vocab_size, 4096u);
  EXPECT_EQ(h.count, 12345u);
  EXPECT_EQ(fs::file_size(p), kTokenFileHeaderBytes + 2 * 12345);
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST(TokenFile, RoundTripUint32AndEdges) {
  const fs::path d = data_test_dir("tf32");
  const auto toks = iota_tokens(1000, 70000);
  token_file_write(d / "a.bin", toks, 70000);
  TokenFileHeader h;
  EXPECT_EQ(token_file_read(d / "a.bin", &h), toks);
  EXPECT_EQ(h.dtype, 4u);
  // 65536 still fits uint16 (ids up to 65535).
  token_file_write(d / "b.bin", std::vector<int32_t>{0, 65535}, 65536);
  EXPECT_EQ(token_file_read(d / "b.bin", &h), (std::vector<int32_t>{0, 65535}));
  EXPECT_EQ(h.dtype, 2u);
  token_file_write(d / "empty.bin", std::vector<int32_t>{}, 10);
  EXPECT_TRUE(token_file_read(d / "empty.bin").empty());
}

TEST(TokenFile, HeaderLayoutIsDocumented) {
  const fs::path p = data_test_dir("layout") / "t.bin";
  token_file_write(p, std::vector<int32_t>{1, 2, 258}, 300);
  const std::string b = file_bytes(p);
  ASSERT_EQ(b.size(), 40u + 6);
  EXPECT_EQ(b.substr(0, 8), std::string("AGOQTOK\0", 8));
  auto u32 = [&](size_t o) {
    return uint32_t(uint8_t(b[o])) | uint32_t(uint8_t(b[o + 1])) << 8 | uint32_t(uint8_t(b[o + 2])) << 16 |
           uint32_t(uint8_t(b[o + 3])) << 24;
  };
  EXPECT_EQ(u32(8), 1u);     // version
  EXPECT_EQ(u32(12), 300u);  // vocab
  EXPECT_EQ(u32(16), 2u);    // dtype
  EXPECT_EQ(u32(20), 0u);    // reserved
  EXPECT_EQ(u32(24), 3u);    // count (low word)
  EXPECT_EQ(u32(28), 0u);
  uint64_t sum = uint64_t(u32(32)) | uint64_t(u32(36)) << 32;
  EXPECT_EQ(sum, hash_fnv1a64(b.data() + 40, 6));
  EXPECT_EQ(b.substr(40), std::string("\x01\x00\x02\x00\x02\x01", 6));
  // FNV-1a 64 reference values.
  EXPECT_EQ(hash_fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash_fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
}

TEST(TokenFile, WriteRejectsTokensOutsideVocab) {
  const fs::path p = data_test_dir("badtok") / "t.bin";
  expect_error([&] { token_file_write(p, std::vector<int32_t>{1, 300}, 300); }, {"t.bin", "300", "position 1"});
  expect_error([&] { token_file_write(p, std::vector<int32_t>{-1}, 300); }, {"-1"});
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST(TokenFile, CorruptFilesAreReportedByName) {
  const fs::path d = data_test_dir("corrupt");
  const fs::path good = d / "good.bin";
  token_file_write(good, iota_tokens(100, 500), 500);
  const std::string b = file_bytes(good);
  auto variant = [&](const std::string& name, std::string bytes) {
    file_put(d / name, bytes);
    return (d / name).string();
  };
  expect_error([&] { token_file_read((d / "missing.bin").string()); }, {"missing.bin", "no such file"});
  expect_error([&] { token_file_read(variant("short.bin", b.substr(0, 20))); }, {"short.bin", "short header"});
  std::string m = b;
  m[0] = 'X';
  expect_error([&] { token_file_read(variant("magic.bin", m)); }, {"magic.bin", "wrong magic"});
  std::string v = b;
  v[8] = 3;
  expect_error([&] { token_file_read(variant("version.bin", v)); }, {"version.bin", "unsupported version 3"});
  std::string no_flags = b;  // a version 2 header over a version 1 payload: the flags are missing
  no_flags[8] = 2;
  expect_error([&] { token_file_read(variant("noflags.bin", no_flags)); }, {"noflags.bin", "truncated"});
  std::string t = b;
  t[16] = 3;
  expect_error([&] { token_file_read(variant("dtype.bin", t)); }, {"dtype.bin", "dtype 3"});
  expect_error([&] { token_file_read(variant("trunc.bin", b.substr(0, b.size() - 3))); },
               {"trunc.bin", "truncated", "100 tokens"});
  expect_error([&] { token_file_read(variant("long.bin", b + "xx")); }, {"long.bin", "size mismatch"});
  std::string c = b;
  c[50] ^= 1;
  expect_error([&] { token_file_read(variant("sum.bin", c)); }, {"sum.bin", "checksum mismatch"});
  EXPECT_EQ(token_file_read(good.string()).size(), 100u);  // the original still reads
}

TEST(TokenFile, FlagsAndWindowsRoundTripAndAreChecked) {
  const fs::path d = data_test_dir("flags");
  const std::vector<int32_t> toks = iota_tokens(12, 300);
  std::vector<uint8_t> flags(12, 0);
  flags[0] = flags[6] = kTokenFlagDocStart, flags[4] = flags[5] = flags[10] = kTokenFlagLoss;
  token_file_write(d / "f.bin", toks, 300, flags, 6);
  TokenFileHeader h;
  std::vector<uint8_t> back;
  EXPECT_EQ(token_file_read(d / "f.bin", &h, &back), toks);
  EXPECT_EQ(back, flags);
  EXPECT_EQ(h.version, kTokenFileVersionFlags);
  EXPECT_EQ(h.window, 6u);
  EXPECT_TRUE(h.has_flags());
  const std::string b = file_bytes(d / "f.bin");
  std::string c = b;
  c[b.size() - 2] ^= kTokenFlagLoss;  // a flag byte: the checksum covers them
  file_put(d / "c.bin", c);
  expect_error([&] { token_file_read((d / "c.bin").string()); }, {"c.bin", "checksum mismatch"});
  std::string w = b;
  w[20] = 5;  // a window that does not divide the 12 tokens
  file_put(d / "w.bin", w);
  expect_error([&] { token_file_read((d / "w.bin").string()); }, {"w.bin", "window 5"});
  expect_error([&] { token_file_write(d / "x.bin", toks, 300, flags, 5); }, {"x.bin", "windows of 5"});
  EXPECT_FALSE(fs::exists(d / "x.bin"));
}

}  // namespace agoq

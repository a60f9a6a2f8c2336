#include <gtest/gtest.h>

#include <set>

#include "core/memory.h"
#include "data/data_loader.h"
#include "data/token_file.h"
#include "tests/data/data_test_util.h"

namespace agoq {

using namespace agoq::data_test;

namespace {

// Token i is i % vocab, so a window's contents reveal where it starts.
std::vector<int32_t> ramp(size_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t(i % size_t(vocab));
  return v;
}

struct Batch {
  std::vector<int32_t> in, tgt;
  Batch(int B, int T) : in(size_t(B) * T), tgt(size_t(B) * T) {}
  bool operator==(const Batch&) const = default;
};

Batch draw(DataLoader& l, int B) {
  Batch b(B, l.seq_len());
  l.next_batch(B, b.in.data(), b.tgt.data());
  return b;
}

}  // namespace

TEST(DataLoader, WindowsAreContiguousAndTargetsShiftByOne) {
  const auto toks = ramp(5000, 60000);  // all distinct, so token value = position
  const TokenDataset ds = TokenDataset::from_tokens(toks, 60000);
  const int T = 17, B = 8;
  DataLoader l(ds, T, 42);
  std::set<int32_t> starts;
  for (int it = 0; it < 50; ++it) {
    const Batch b = draw(l, B);
    for (int r = 0; r < B; ++r) {
      const int32_t s = b.in[size_t(r) * T];
      ASSERT_GE(s, 0);
      ASSERT_LE(s, 5000 - T - 1);
      starts.insert(s);
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(b.in[size_t(r) * T + t], s + t);
        EXPECT_EQ(b.tgt[size_t(r) * T + t], s + t + 1);
      }
    }
  }
  EXPECT_GT(starts.size(), 350u);  // random starts, not a few repeated ones
}

TEST(DataLoader, LastStartIsReachable) {
  const TokenDataset ds = TokenDataset::from_tokens(ramp(10, 100), 100);
  DataLoader l(ds, 8, 1);  // starts 0 or 1 only
  std::set<int32_t> starts;
  for (int i = 0; i < 100; ++i) starts.insert(draw(l, 1).in[0]);
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1}));
  DataLoader exact(ds, 9, 1);  // T + 1 == count: a single window
  EXPECT_EQ(draw(exact, 2).tgt.back(), 9);
}

TEST(DataLoader, ReproducibleFromSeedAndResumableFromState) {
  const TokenDataset ds = TokenDataset::from_tokens(ramp(100000, 30000), 30000);
  DataLoader a(ds, 32, 7), b(ds, 32, 7), c(ds, 32, 8);
  const Batch a1 = draw(a, 4);
  EXPECT_EQ(a1, draw(b, 4));
  EXPECT_NE(a1, draw(c, 4));
  draw(a, 3);  // an odd batch size leaves the Philox block half used
  const DataLoader::State s = a.state();
  EXPECT_EQ(s.batches, 2u);
  EXPECT_EQ(s.windows, 7u);
  const Batch next = draw(a, 5), after = draw(a, 2);
  // Resume in a fresh loader (different seed: the state carries everything), also through the string form.
  DataLoader r(ds, 32, 999);
  r.set_state(DataLoader::State::from_string(s.to_string()));
  EXPECT_EQ(draw(r, 5), next);
  EXPECT_EQ(draw(r, 2), after);
  EXPECT_EQ(r.state().to_string(), a.state().to_string());
}

TEST(DataLoader, StateChecksShapeAndSyntax) {
  const TokenDataset ds = TokenDataset::from_tokens(ramp(1000, 500), 500);
  DataLoader a(ds, 16, 1), other_t(ds, 8, 1);
  expect_error([&] { other_t.set_state(a.state()); }, {"T=16", "T=8"});
  expect_error([&] { DataLoader::State::from_string("v1 1 2 3"); }, {"malformed"});
  expect_error([&] { DataLoader::State::from_string(a.state().to_string() + " 5"); }, {"malformed"});
}

TEST(DataLoader, SequenceLongerThanDataIsAnError) {
  const TokenDataset ds = TokenDataset::from_tokens(ramp(100, 500), 500, "val.bin");
  expect_error([&] { DataLoader(ds, 100, 1); },
               {"sequence length T (=100) needs at least T+1 tokens but val.bin has 100"});
  expect_error([&] { DataLoader(ds, 0, 1); }, {"T must be >= 1"});
  DataLoader ok(ds, 99, 1);
  std::vector<int32_t> x(99);
  expect_error([&] { ok.next_batch(0, x.data(), x.data()); }, {"batch size"});
}

TEST(DataLoader, VocabMismatchIsAnError) {
  const fs::path p = data_test_dir("vocab") / "train.bin";
  token_file_write(p, ramp(1000, 300), 4096);
  const TokenDataset ds = TokenDataset::load(p);
  EXPECT_EQ(ds.vocab_size(), 4096u);
  EXPECT_EQ(ds.max_token(), 299u);
  ds.check_vocab(4096);
  expect_error([&] { ds.check_vocab(8192); }, {"train.bin", "vocab size 4096", "8192"});
  // A file whose ids exceed its own declared vocab (header patched; the checksum covers only the tokens).
  std::string b = file_bytes(p);
  b[12] = char(200), b[13] = 0;
  file_put(p.parent_path() / "odd.bin", b);
  expect_error([&] { TokenDataset::load(p.parent_path() / "odd.bin"); }, {"odd.bin", "299", "vocab size 200"});
}

TEST(DataLoader, LoadsBothDtypesIntoTrackedMemory) {
  const fs::path d = data_test_dir("dtypes");
  const auto small = ramp(3000, 4096), big = ramp(3000, 100000);
  token_file_write(d / "s.bin", small, 4096);
  token_file_write(d / "b.bin", big, 100000);
  auto& mem = MemoryTracker::global();
  const size_t before = mem.tag_current("data");
  {
    const TokenDataset s = TokenDataset::load(d / "s.bin"), b = TokenDataset::load(d / "b.bin");
    EXPECT_EQ(mem.tag_current("data") - before, 3000u * 2 + 3000u * 4);
    for (size_t i = 0; i < 3000; i += 97) {
      EXPECT_EQ(s[i], small[i]);
      EXPECT_EQ(b[i], big[i]);
    }
  }
  EXPECT_EQ(mem.tag_current("data"), before);
  expect_error([&] { TokenDataset::load(d / "nope.bin"); }, {"nope.bin", "no such file"});
}

TEST(DataLoader, ValidationWindowsAreFixedAndEvenlySpaced) {
  const TokenDataset ds = TokenDataset::from_tokens(ramp(10001, 60000), 60000);
  const int T = 100, B = 4;
  DataLoader l(ds, T, 3);
  EXPECT_EQ(l.val_batch_count(B), 25);  // 100 non-overlapping windows fit
  EXPECT_EQ(l.val_batch_count(B, 5), 5);
  EXPECT_EQ(l.val_batch_count(B, 1000), 25);
  const auto starts = l.val_window_starts(B, 5);
  ASSERT_EQ(starts.size(), 20u);
  EXPECT_EQ(starts.front(), 0u);
  EXPECT_EQ(starts.back(), 10001u - T - 1);
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_NEAR(double(starts[i] - starts[i - 1]), 9900.0 / 19, 1.0);
  const auto all = l.val_window_starts(B);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i] - all[i - 1], uint64_t(T));  // no overlap
  // Batches follow the starts and do not depend on (or disturb) the training stream.
  const auto before = l.state().to_string();
  Batch v(B, T), w(B, T);
  for (int i = 0; i < 5; ++i) {
    l.val_batch(B, 5, i, v.in.data(), v.tgt.data());
    draw(l, 2);
    l.val_batch(B, 5, i, w.in.data(), w.tgt.data());
    EXPECT_EQ(v, w);
    for (int r = 0; r < B; ++r) {
      EXPECT_EQ(uint64_t(v.in[size_t(r) * T]), starts[size_t(i) * B + r]);
      EXPECT_EQ(v.tgt[size_t(r) * T + T - 1], v.in[size_t(r) * T + T - 1] + 1);
    }
  }
  EXPECT_NE(l.state().to_string(), before);
  expect_error([&] { l.val_batch(B, 5, 5, v.in.data(), v.tgt.data()); }, {"out of range"});
  // A tiny split still gives one batch (windows may overlap).
  const TokenDataset tiny = TokenDataset::from_tokens(ramp(12, 100), 100);
  DataLoader t(tiny, 10, 1);
  EXPECT_EQ(t.val_batch_count(3), 1);
  EXPECT_EQ(t.val_window_starts(3), (std::vector<uint64_t>{0, 0, 1}));
}

}  // namespace agoq

// The R reader's fuzz entry point (tests/fuzz/fuzz_rdata.cpp) under ctest: seeds built here the way R writes
// its streams, then thousands of deterministic mutations of them (every truncation, bit flips, 32-bit words set to
// huge or negative values). Each input must end in a result or an agoq::Error (which the entry point swallows), within
// a time bound and without any single allocation over kAllocCap: an input of a few hundred bytes that asks for more
// is trusting a length it has not checked. AGOQ_FUZZ_SEED_DIR=dir writes the seeds there, for libFuzzer;
// AGOQ_FUZZ_TRACE=1 prints each input's name before it runs (to find the one that crashes).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "data/rdata.h"
#include "tests/data/rdata_test_util.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

constexpr size_t kAllocCap = size_t(256) << 20;

}  // namespace

// This binary's allocations (new[] calls new) go through here, so an oversized request fails the test instead of
// paging.
void* operator new(size_t n) {
  if (n > kAllocCap) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that the new above pairs with these frees.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace agoq {

using namespace agoq::data_test;

namespace {

struct Seed {
  std::string name;
  std::string input;  // mode byte + payload, as LLVMFuzzerTestOneInput takes it
};

// Bare streams covering every kind the reader decodes.
std::vector<std::pair<std::string, std::string>> seed_streams() {
  std::vector<std::pair<std::string, std::string>> s;
  Xdr strs;  // plain, NA, UTF-8, latin1
  strs.header().i32(16).i32(4).chars("plain").i32(9).i32(-1).chars("caf\xC3\xA9", 0x8).chars("caf\xE9", 0x4);
  s.emplace_back("strings_v3", strs.b);
  s.emplace_back("strings_v2", Xdr().header(2).strs({"old", "lines"}).b);
  Xdr list;  // list(s = "a", p = pairlist(x = 1, x = NULL)) with a symbol back reference
  list.header().i32(19 | 1 << 9).i32(2).strs({"a"});
  list.i32(2 | 1 << 10).sym("x").i32(14).i32(1).f64(1.0).i32(2 | 1 << 10).i32(1 << 8 | 255).nil().nil();
  list.i32(2 | 1 << 10).sym("names").strs({"s", "p"}).nil();
  s.emplace_back("named_list", list.b);
  Xdr seq;  // 1:5 as R >= 3.5 writes it
  seq.header().i32(238).i32(2).sym("compact_intseq").i32(2).sym("base").i32(2).i32(13).i32(1).i32(13).nil();
  seq.i32(14).i32(3).f64(5).f64(1).f64(1).nil();
  s.emplace_back("compact_intseq", seq.b);
  Xdr df;  // data.frame(text = c("a", "b"))
  df.header().i32(19 | 1 << 8 | 1 << 9).i32(1).strs({"a", "b"});
  df.i32(2 | 1 << 10).sym("names").strs({"text"});
  df.i32(2 | 1 << 10).sym("class").strs({"data.frame"});
  df.i32(2 | 1 << 10).sym("row.names").i32(13).i32(2).i32(INT32_MIN).i32(-2).nil();
  s.emplace_back("data_frame", df.b);
  Xdr env;  // an environment whose frame binds `self` to the environment itself
  env.header().i32(4).i32(0).i32(253).i32(2 | 1 << 10).sym("self").i32(1 << 8 | 255).nil().nil().nil();
  s.emplace_back("environment", env.b);
  Xdr num;  // logical, double, complex, raw, and an integer vector with a long-vector length
  num.header().i32(19).i32(5).i32(10).i32(2).i32(1).i32(INT32_MIN).i32(14).i32(1).f64(2.5);
  num.i32(15).i32(1).f64(1).f64(-1).i32(24).i32(3).b += "abc";
  num.i32(13).i32(-1).i32(0).i32(2).i32(5).i32(6);
  s.emplace_back("numbers", num.b);
  Xdr code;  // paste("a"), the builtin `paste`, an S4 object, package:x, a wrapped character vector
  code.header().i32(19).i32(5).i32(6).sym("paste").i32(2).strs({"a"}).nil();
  code.i32(8).i32(5).b += "paste";
  code.i32(25 | 1 << 9).i32(2 | 1 << 10).sym("class").strs({"K"}).nil();
  code.i32(248).i32(0).i32(1).chars("package:x");
  code.i32(238).i32(2).sym("wrap_string").i32(2).sym("base").i32(2).i32(13).i32(1).i32(16).nil();
  code.i32(2).strs({"w"}).i32(13).i32(2).i32(0).i32(0).nil();
  s.emplace_back("code_and_altrep", code.b);
  return s;
}

std::string be32(size_t n) { return Xdr().i32(int64_t(n)).b; }

std::vector<Seed> seeds() {
  std::vector<Seed> out;
  for (const auto& [name, stream] : seed_streams()) out.push_back({name, '\0' + stream});
  const std::string strs = seed_streams()[0].second;
  out.push_back({"strings_rdb_entry", '\0' + zlib_be(strs)});
  out.push_back({"strings_gzip", '\0' + gzip(strs)});
  const LazyObjects objs = {{"second", {"Line one", "", "Line two"}}, {"first", {"Alpha"}}};
  for (bool gz : {false, true}) {
    const auto [rdx, rdb] = lazy_db_bytes(objs, gz);
    out.push_back({gz ? "lazy_db_gzip_index" : "lazy_db", '\1' + be32(rdx.size()) + rdx + rdb});
  }
  return out;
}

// Deterministic mutations of one input: every truncation, bit flips, and 32- and 64-bit words overwritten with
// lengths, indices and counts a reader must not trust. The mode byte (input[0]) is kept.
std::vector<std::pair<std::string, std::string>> mutations(const std::string& in, uint64_t seed) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t n = 1; n < in.size(); ++n) out.emplace_back("truncated to " + std::to_string(n), in.substr(0, n));
  uint64_t x = seed;
  auto next = [&x] {  // splitmix64
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int i = 0; i < 300 && in.size() > 1; ++i) {
    std::string m = in;
    const size_t bit = 8 + next() % ((in.size() - 1) * 8);
    m[bit / 8] = char(uint8_t(m[bit / 8]) ^ (1u << (bit % 8)));
    out.emplace_back("bit " + std::to_string(bit) + " flipped", std::move(m));
  }
  for (uint32_t v : {0x7FFFFFFFu, 0xFFFFFFFFu, 0x80000000u, 0x40000000u, 0x00FFFFFFu}) {
    for (size_t at = 1; at + 4 <= in.size(); ++at) {
      std::string m = in;
      for (int k = 0; k < 4; ++k) m[at + size_t(k)] = char(v >> (24 - 8 * k));
      out.emplace_back("word at " + std::to_string(at) + " = " + std::to_string(v), std::move(m));
    }
  }
  // Doubles (compact sequence states, index offsets) set to 2^30, +inf, -1 and 2^63.
  for (uint64_t v : {0x41D0000000000000ull, 0x7FF0000000000000ull, 0xBFF0000000000000ull, 0x43E0000000000000ull}) {
    for (size_t at = 1; at + 8 <= in.size(); ++at) {
      std::string m = in;
      for (int k = 0; k < 8; ++k) m[at + size_t(k)] = char(v >> (56 - 8 * k));
      out.emplace_back("double at " + std::to_string(at) + " = " + std::to_string(v), std::move(m));
    }
  }
  return out;
}

// Runs one input through the entry point; a failure names the seed and the mutation.
void run_one(const std::string& what, const std::string& in, int& failures) {
  using clock = std::chrono::steady_clock;
  if (std::getenv("AGOQ_FUZZ_TRACE")) std::cerr << what << "\n";
  const auto t0 = clock::now();
  try {
    fuzz::rdata(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": escaped as " << typeid(e).name() << ": " << e.what();
    ++failures;
  }
  const double s = std::chrono::duration<double>(clock::now() - t0).count();
  if (s > 2.0) {
    ADD_FAILURE() << what << ": took " << s << " s";
    ++failures;
  }
}

}  // namespace

TEST(RDataFuzz, SeedsDecode) {
  for (const auto& [name, stream] : seed_streams()) {
    try {
      EXPECT_NE(r_unserialize(stream), nullptr);
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
  }
  const auto [rdx, rdb] = lazy_db_bytes({{"second", {"Line one", "", "Line two"}}, {"first", {"Alpha"}}}, false);
  const RLazyLoadDb db(rdx, rdb, "mem");
  EXPECT_EQ(db.load_strings("second"), (std::vector<std::string>{"Line one", "", "Line two"}));
  if (const char* dir = std::getenv("AGOQ_FUZZ_SEED_DIR")) {  // the seed corpus for libFuzzer
    std::filesystem::create_directories(dir);
    for (const Seed& s : seeds()) file_put(std::filesystem::path(dir) / s.name, s.input);
  }
}

TEST(RDataFuzz, MutatedSeedsEndInResultOrError) {
  int failures = 0;
  size_t runs = 0;
  uint64_t rng = 1;
  for (const Seed& s : seeds()) {
    run_one(s.name, s.input, failures);
    std::string other_mode = s.input;  // the same bytes read as the other kind of input
    other_mode[0] = char(other_mode[0] ^ 1);
    run_one(s.name + ", other mode", other_mode, failures);
    for (const auto& [what, m] : mutations(s.input, rng++)) {
      run_one(s.name + ", " + what, m, failures);
      ++runs;
      ASSERT_LT(failures, 20) << "stopping after 20 failures";
    }
  }
  EXPECT_GT(runs, 5000u);
  std::cout << runs << " mutated inputs\n";
}

}  // namespace agoq

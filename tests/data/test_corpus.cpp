#include <gtest/gtest.h>

#include "data/corpus.h"
#include "data/rdata.h"
#include "tests/data/data_test_util.h"
#include "tests/data/rdata_test_util.h"

namespace agoq {

using namespace agoq::data_test;

TEST(RData, DecodesHandBuiltSerialization) {
  Xdr x;
  x.header(3).i32(19 | 1 << 9).i32(3);
  x.i32(16).i32(4).chars("plain").i32(9).i32(-1).chars("caf\xC3\xA9", 0x8).chars("caf\xE9", 0x4);  // NA, UTF-8, latin1
  x.i32(13).i32(2).i32(7).i32(-3);
  // A tagged pairlist whose second tag refers back to symbol "x" (the first symbol read: reference 1).
  x.i32(2 | 1 << 10).sym("x").i32(14).i32(1).i32(0x3FF00000).i32(0);  // x = 1.0
  x.i32(2 | 1 << 10).i32(1 << 8 | 255).nil().nil();
  // Attributes: names = c("s", "i", "p").
  x.i32(2 | 1 << 10).sym("names").strs({"s", "i", "p"}).nil();

  const RObjectPtr o = r_unserialize(x.b);
  ASSERT_EQ(o->type, kRVec);
  EXPECT_EQ(o->names(), (std::vector<std::string>{"s", "i", "p"}));
  const RObject* s = o->get("s");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->strings.size(), 4u);
  EXPECT_EQ(s->strings[0], "plain");
  EXPECT_FALSE(s->strings[1].has_value());
  EXPECT_EQ(s->strings[2], "caf\xC3\xA9");
  EXPECT_EQ(s->strings[3], "caf\xC3\xA9");  // latin1 converted to UTF-8
  EXPECT_EQ(o->get("i")->ints, (std::vector<int32_t>{7, -3}));
  const RObject* p = o->get("p");
  ASSERT_EQ(p->type, kRList);
  EXPECT_EQ(p->tags, (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(p->get("x")->reals, (std::vector<double>{1.0}));

  // R >= 3.5 writes 1:n as an ALTREP compact sequence: (class info pairlist, state c(n, first, step), attributes).
  Xdr seq;
  seq.header().i32(238);
  seq.i32(2).sym("compact_intseq").i32(2).sym("base").i32(2).i32(13).i32(1).i32(13).nil();
  seq.i32(14).i32(3).i32(0x40140000).i32(0).i32(0x3FF00000).i32(0).i32(0x3FF00000).i32(0).nil();  // 5, 1, 1
  EXPECT_EQ(r_unserialize(seq.b)->ints, (std::vector<int32_t>{1, 2, 3, 4, 5}));

  // Version 2 streams have no encoding field.
  Xdr v2;
  v2.header(2).strs({"old"});
  EXPECT_EQ(r_unserialize(v2.b)->strings[0], "old");
}

TEST(RData, RejectsUnsupportedInput) {
  Xdr bytecode;
  bytecode.header().i32(21);
  expect_error([&] { r_unserialize(bytecode.b); }, {"type code 21"});
  Xdr cut;
  cut.header().strs({"abcdef"});
  expect_error([&] { r_unserialize(cut.b.substr(0, cut.b.size() - 3)); }, {"ends"});
  expect_error([&] { r_unserialize("A\n1\n"); }, {"XDR"});
  Xdr v4;
  v4.header(2);
  v4.b[5] = 4;
  expect_error([&] { r_unserialize(v4.b + Xdr().nil().b); }, {"version 4"});
  Xdr huge;
  huge.header().i32(16).i32(1 << 30);
  expect_error([&] { r_unserialize(huge.b); }, {"bad vector length"});
  expect_error([&] { r_decompress(Xdr().i32(100).b + "\x78garbage", "x.rdb"); }, {"x.rdb", "corrupt"});
}

// Lengths, counts and offsets the input claims are checked against the bytes present (or, for compact
// sequences, capped) before anything is allocated or cast; libFuzzer found the first three (tests/fuzz/).
TEST(RData, RefusesClaimsBeyondTheInput) {
  expect_error([&] { r_decompress(Xdr().i32(0xFFFFFFFF).b + "\x78\x9c" + "abc", "x.rdb"); }, {"x.rdb", "claims"});
  std::string gz = gzip(Xdr().header().strs({"a"}).b);
  gz.replace(gz.size() - 4, 4, "\xFF\xFF\xFF\xFF");  // the trailer's size, a hint only, claims 4 GiB
  expect_error([&] { r_decompress(gz, "x.rds"); }, {"x.rds", "corrupt gzip"});
  Xdr enc;
  enc.header(2).b[5] = 3;  // a version 3 stream whose native encoding has a negative length
  expect_error([&] { r_unserialize(enc.i32(-5).b + Xdr().nil().b); }, {"native encoding length -5"});
  auto seq = [](double n, double first) {
    Xdr x;
    x.header().i32(238).i32(2).sym("compact_intseq").i32(2).sym("base").i32(2).i32(13).i32(1).i32(13).nil();
    return x.i32(14).i32(3).f64(n).f64(first).f64(1).nil().b;
  };
  expect_error([&] { r_unserialize(seq(double(1u << 31), 1)); }, {"compact_intseq length"});
  expect_error([&] { r_unserialize(seq(0.0 / 0.0, 1)); }, {"compact_intseq length"});
  expect_error([&] { r_unserialize(seq(3, 2147483646.0)); }, {"integer range"});
  EXPECT_EQ(r_unserialize(seq(0, 1))->ints.size(), 0u);
  // An index whose offset is negative and whose length is 1e300.
  Xdr idx;
  idx.header();
  const std::string bad = named_list({{"x", Xdr().i32(14).i32(2).f64(-1).f64(1e300).b}}, true);
  expect_error(
      [&] {
    RLazyLoadDb(idx.b + named_list({{"variables", bad}}, false), "", "mem");
      },
      {"mem.rdx", "index entry -1 is not a byte count"});
  // An object past the end of the .rdb is refused before its length is allocated.
  const auto db = lazy_db_bytes({{"a", {"x"}}});  // a pair, not bindings: the lambda uses it (clang 14)
  expect_error([&] { RLazyLoadDb(db.first, db.second.substr(0, 3), "mem").load("a"); },
               {"mem.rdb", "'a'", "past the end"});
}

TEST(RData, BoundsNesting) {
  auto nested = [](int depth) {
    Xdr x;
    x.header();
    for (int i = 0; i < depth; ++i) x.i32(19).i32(1);
    return x.nil().b;
  };
  EXPECT_EQ(r_unserialize(nested(1000))->type, kRVec);
  expect_error([&] { r_unserialize(nested(5000)); }, {"nested deeper than 1024"});
}

// An environment that binds itself decodes (its contents are dropped, so no shared_ptr cycle is kept).
TEST(RData, ReadsSelfReferencingEnvironment) {
  Xdr env;
  env.header().i32(19).i32(1).i32(4).i32(0).i32(253).i32(2 | 1 << 10).sym("self").i32(1 << 8 | 255).nil();
  env.nil().nil();
  const RObjectPtr o = r_unserialize(env.b);
  ASSERT_EQ(o->items.size(), 1u);
  EXPECT_EQ(o->items[0]->type, kREnv);
  EXPECT_TRUE(o->items[0]->items.empty());
}

TEST(RData, ReadsLazyLoadDatabase) {
  const fs::path d = data_test_dir("rdata");
  write_lazy_db(d, {{"second", {"Line one", "", "Line two"}}, {"first", {"Alpha"}}});
  const RLazyLoadDb db((d / "Rdata.rdx").string());
  EXPECT_EQ(db.names(), (std::vector<std::string>{"second", "first"}));
  EXPECT_EQ(db.load_strings("first"), (std::vector<std::string>{"Alpha"}));
  expect_error([&] { db.load("third"); }, {"third"});
  const Corpus c = corpus_read(d.string());
  EXPECT_EQ(c.kind, "rdata");
  EXPECT_EQ(c.documents, (std::vector<std::string>{"second", "first"}));
  EXPECT_EQ(c.text, "Line one\n\nLine two\n\nAlpha");
  // A truncated .rdb names the file and the object.
  const std::string rdb = file_bytes(d / "Rdata.rdb");
  file_put(d / "Rdata.rdb", rdb.substr(0, rdb.size() - 5));
  expect_error([&] { db.load("first"); }, {"Rdata.rdb", "'first'"});
}

TEST(Corpus, ReadsFolderOfTextFilesSortedByPath) {
  const fs::path d = data_test_dir("corpus");
  fs::create_directories(d / "a" / "b");
  file_put(d / "a" / "b" / "1.txt", "one\n");
  file_put(d / "a" / "2.txt", "two\r\nlines\r\n\r\n");
  file_put(d / "0.txt", "\xEF\xBB\xBFzero");
  file_put(d / "notes.md", "ignored");
  file_put(d / "empty.txt", "");
  const Corpus c = corpus_read(d.string());
  EXPECT_EQ(c.kind, "folder");
  EXPECT_EQ(c.text, "zero\n\ntwo\nlines\n\none");
  ASSERT_EQ(c.documents.size(), 4u);
  EXPECT_EQ(fs::path(c.documents[0]).filename(), "0.txt");
  EXPECT_EQ(fs::path(c.documents[2]).filename(), "1.txt");
  EXPECT_EQ(fs::path(c.documents[3]).filename(), "empty.txt");
  const Corpus f = corpus_read((d / "a" / "2.txt").string());
  EXPECT_EQ(f.kind, "file");
  EXPECT_EQ(f.text, "two\nlines\n\n");
  EXPECT_EQ(utf8_length("caf\xC3\xA9 \xF0\x9F\x8E\x89"), 6u);
}

TEST(Corpus, ErrorsNameThePath) {
  const fs::path d = data_test_dir("corpus_err");
  expect_error([&] { corpus_read((d / "nope").string()); }, {"nope", "no such file"});
  fs::create_directories(d / "empty");
  expect_error([&] { corpus_read((d / "empty").string()); }, {"empty", "no .txt files"});
  file_put(d / "blank.txt", "");
  expect_error([&] { corpus_read((d / "blank.txt").string()); }, {"blank.txt", "empty"});
}

TEST(Corpus, ReadsJaneAustenWhenFetched) {
  const fs::path dir = fs::path(AGOQ_SOURCE_DIR) / "data" / "janeaustenr";
  if (!fs::exists(dir / "Rdata.rdx"))
    GTEST_SKIP() << dir << " is absent: run scripts/fetch-corpus.sh to fetch the janeaustenr corpus";
  const Corpus c = corpus_read(dir.string());
  EXPECT_EQ(c.documents, (std::vector<std::string>{"emma", "mansfieldpark", "northangerabbey", "persuasion",
                                                   "prideprejudice", "sensesensibility"}));
  EXPECT_GT(c.text.size(), 3'900'000u);
  EXPECT_LT(c.text.size(), 4'500'000u);
  EXPECT_NE(c.text.find("It is a truth universally acknowledged"), std::string::npos);
  EXPECT_EQ(c.text.rfind("SENSE AND SENSIBILITY", 0), std::string::npos);  // index order: Emma first
  EXPECT_EQ(c.text.rfind("EMMA", 0), 0u);
}

}  // namespace agoq

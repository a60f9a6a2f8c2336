#include <gtest/gtest.h>
#include <zlib.h>

#include "tests/data/data_test_util.h"
#include "data/corpus.h"
#include "data/rdata.h"

namespace agoq {

using namespace agoq::data_test;

namespace {

// Builds R XDR serializations by hand (R's serialize.c layout: big-endian ints, flags = type | attr bit 9 |
// tag bit 10 | levels << 12).
struct Xdr {
  std::string b;
  Xdr& i32(int64_t v) {
    for (int s = 24; s >= 0; s -= 8) b += char(uint32_t(v) >> s);
    return *this;
  }
  Xdr& header(int version = 3) {
    b += "X\n";
    i32(version).i32(0x040201).i32(version == 3 ? 0x030500 : 0x020300);
    if (version == 3) i32(5), b += "UTF-8";
    return *this;
  }
  Xdr& chars(std::string_view s, int levels = 0x40) {
    i32(9 | levels << 12).i32(int64_t(s.size()));
    b += s;
    return *this;
  }
  Xdr& strs(std::initializer_list<std::string_view> v) {
    i32(16).i32(int64_t(v.size()));
    for (auto s : v) chars(s);
    return *this;
  }
  Xdr& sym(std::string_view name) { return i32(1).chars(name); }
  Xdr& nil() { return i32(254); }
};

// A named list (VECSXP + names attribute) of the given (already serialized) items.
std::string named_list(const std::vector<std::pair<std::string, std::string>>& items, bool first_use_of_names) {
  Xdr x;
  x.i32(19 | 1 << 9).i32(int64_t(items.size()));
  for (const auto& [name, body] : items) x.b += body;
  x.i32(2 | 1 << 10);
  if (first_use_of_names) x.sym("names");
  else x.i32(1 << 8 | 255);  // REFSXP to the first symbol read
  x.i32(16).i32(int64_t(items.size()));
  for (const auto& [name, body] : items) x.chars(name);
  return x.nil().b;
}

std::string zlib_be(const std::string& s) {  // R's lazy-load entry: 4-byte big-endian length + zlib stream
  uLongf n = compressBound(uLong(s.size()));
  std::string out(n, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(s.data()),
                      uLong(s.size()), 6), Z_OK);
  out.resize(n);
  return Xdr().i32(int64_t(s.size())).b + out;
}

std::string gzip(const std::string& s) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, uLong(s.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = uInt(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Writes dir/Rdata.rdx + Rdata.rdb holding character vectors, the way R's makeLazyLoadDB does.
void write_lazy_db(const fs::path& dir, const std::vector<std::pair<std::string, std::vector<std::string>>>& objs) {
  std::string rdb;
  std::vector<std::pair<std::string, std::string>> vars;
  for (const auto& [name, lines] : objs) {
    Xdr x;
    x.header().i32(16).i32(int64_t(lines.size()));
    for (const auto& l : lines) x.chars(l);
    const std::string entry = zlib_be(x.b);
    vars.emplace_back(name, Xdr().i32(13).i32(2).i32(int64_t(rdb.size())).i32(int64_t(entry.size())).b);
    rdb += entry;
  }
  Xdr idx;
  idx.header();
  const std::string index = named_list({{"variables", named_list(vars, true)},
                                        {"references", named_list({}, false)},
                                        {"compressed", Xdr().i32(10).i32(1).i32(1).b}},
                                       false);
  file_put(dir / "Rdata.rdb", rdb);
  file_put(dir / "Rdata.rdx", gzip(idx.b + index));
}

}  // namespace

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

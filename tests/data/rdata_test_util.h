// Builders of R serializations and lazy-load databases, written the way R's serialize.c and makeLazyLoadDB
// write them, for the R reader's tests (tests/data/test_corpus.cpp) and its fuzz seeds (tests/fuzz/).
#pragma once
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/data/data_test_util.h"

namespace agoq::data_test {

// Builds R XDR serializations by hand (R's serialize.c layout: big-endian ints, flags = type | attr bit 9 |
// tag bit 10 | levels << 12).
struct Xdr {
  std::string b;
  Xdr& i32(int64_t v) {
    for (int s = 24; s >= 0; s -= 8) b += char(uint32_t(v) >> s);
    return *this;
  }
  Xdr& f64(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return i32(int64_t(u >> 32)).i32(int64_t(u & 0xFFFFFFFF));
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
inline std::string named_list(const std::vector<std::pair<std::string, std::string>>& items, bool first_use_of_names) {
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

inline std::string zlib_be(const std::string& s) {  // R's lazy-load entry: 4-byte big-endian length + zlib stream
  uLongf n = compressBound(uLong(s.size()));
  std::string out(n, '\0');
  EXPECT_EQ(
      compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(s.data()), uLong(s.size()), 6),
      Z_OK);
  out.resize(n);
  return Xdr().i32(int64_t(s.size())).b + out;
}

inline std::string gzip(const std::string& s) {
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

using LazyObjects = std::vector<std::pair<std::string, std::vector<std::string>>>;

// The .rdx and .rdb bytes of a lazy-load database of character vectors, the way R's makeLazyLoadDB writes them
// (with `gzip_index` false the index is left a bare serialization, which the reader also accepts).
inline std::pair<std::string, std::string> lazy_db_bytes(const LazyObjects& objs, bool gzip_index = true) {
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
  return {gzip_index ? gzip(idx.b + index) : idx.b + index, rdb};
}

// Writes dir/Rdata.rdx + Rdata.rdb holding character vectors.
inline void write_lazy_db(const std::filesystem::path& dir, const LazyObjects& objs) {
  const auto [rdx, rdb] = lazy_db_bytes(objs);
  file_put(dir / "Rdata.rdb", rdb);
  file_put(dir / "Rdata.rdx", rdx);
}

}  // namespace agoq::data_test

// The corpus importer for R data: a reader for R's serialization format ("X\n" XDR, versions 2 and 3) and
// lazy-load databases (Rdata.rdx + Rdata.rdb), just enough to pull character vectors such as the janeaustenr
// novels out of an installed R package without R (why not librdata or R itself: docs/data-format.md). Unknown or
// unsupported object types, and lengths the bytes cannot hold, end in an agoq::Error; tests/fuzz/ fuzzes it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

// R's SEXPTYPE codes that the decoder understands (plus the serializer's pseudo types).
enum RType : int {
  kRNil = 0,
  kRSym = 1,
  kRList = 2,
  kRClosure = 3,
  kREnv = 4,
  kRProm = 5,
  kRLang = 6,
  kRChar = 9,
  kRLgl = 10,
  kRInt = 13,
  kRReal = 14,
  kRCplx = 15,
  kRStr = 16,
  kRDot = 17,
  kRVec = 19,
  kRExpr = 20,
  kRRaw = 24,
  kRS4 = 25,
  kRNilValue = 254,
  kRRef = 255,
};

struct RObject;
using RObjectPtr = std::shared_ptr<const RObject>;

// One decoded R object. Only the fields that belong to `type` are filled.
struct RObject {
  int type = kRNil;
  std::string text;                                 // CHARSXP bytes (UTF-8), SYMSXP name
  bool na = false;                                  // CHARSXP NA_STRING
  std::vector<std::optional<std::string>> strings;  // STRSXP (nullopt = NA)
  std::vector<int32_t> ints;                        // INTSXP, LGLSXP (NA = INT32_MIN)
  std::vector<double> reals;                        // REALSXP (complex: re, im interleaved)
  std::string raw;                                  // RAWSXP
  std::vector<RObjectPtr> items;                    // VECSXP/EXPRSXP elements, pairlist CARs (envs keep none)
  std::vector<std::string> tags;                    // pairlist tags, parallel to items ("" = none)
  RObjectPtr attributes;                            // pairlist, or null

  // The attribute `name`, or null.
  const RObject* attr(std::string_view name) const;
  // The "names" attribute as strings (empty when absent).
  std::vector<std::string> names() const;
  // The element called `name` of a named list (VECSXP by "names", or pairlist by tag), or null.
  const RObject* get(std::string_view name) const;
};

// Decodes one serialized object ("X\n" XDR; version 2 or 3).
RObjectPtr r_unserialize(std::string_view bytes);

// Decompresses an R stream: gzip (saveRDS/.rds/.rdx), or R's memCompress form (4-byte big-endian length + zlib
// stream, used for .rdb entries), or returns uncompressed serializations as they are.
std::string r_decompress(std::string_view bytes, std::string_view what);

// A lazy-load database: `<prefix>.rdx` indexes objects stored compressed in `<prefix>.rdb`. This is the corpus
// importer's entry point (src/data/corpus.cpp); the functions above are the layers beneath it.
class RLazyLoadDb {
 public:
  // `path` is the .rdx file, the .rdb file, or their common prefix. The index is read now, objects on load().
  explicit RLazyLoadDb(const std::string& path);
  // A database held in memory (tests, the fuzz target); errors name `label` as they would the file prefix.
  RLazyLoadDb(std::string_view rdx, std::string rdb, std::string label);
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const;
  RObjectPtr load(std::string_view name) const;
  // load(name) as a character vector; NA elements become empty strings.
  std::vector<std::string> load_strings(std::string_view name) const;

 private:
  void read_index(std::string_view rdx_bytes);
  std::string read_entry(std::string_view name, uint64_t offset, uint64_t length) const;

  std::string prefix_;
  std::optional<std::string> rdb_;  // the .rdb bytes when held in memory
  std::vector<std::string> names_;
  std::vector<std::pair<uint64_t, uint64_t>> spans_;  // (offset, length) into the .rdb, parallel to names_
  int compression_ = 1;                               // 1 = zlib; 2 = bzip2, 3 = xz (unsupported)
};

}  // namespace agoq

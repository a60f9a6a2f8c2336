// Training text: one .txt file, a folder of .txt files (recursive, sorted by path, joined with blank lines), or
// an R package's data folder holding character vectors in a lazy-load database (the janeaustenr novels:
// data/janeaustenr/Rdata.rdx + Rdata.rdb, fetched by scripts/fetch-corpus.sh).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

struct Corpus {
  std::string text;                    // UTF-8, "\n" line ends
  std::string kind;                    // "file", "folder" or "rdata"
  std::vector<std::string> documents;  // file paths or R object names, in reading order
};

// Reads `path` (see above). Errors name the path: missing, empty folder, unreadable file.
Corpus corpus_read(const std::string& path);

// True if `dir` (or dir/data) holds an R lazy-load database Rdata.rdx + Rdata.rdb.
bool corpus_is_rdata_dir(const std::string& dir);

// Every character vector of the R data folder, in index order: lines joined with "\n", objects separated by a
// blank line.
Corpus corpus_read_rdata(const std::string& dir);

// Number of UTF-8 code points (continuation bytes are not counted).
size_t utf8_length(std::string_view s);

}  // namespace agoq

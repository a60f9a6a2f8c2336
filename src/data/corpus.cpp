#include "data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/rdata.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

// Windows line ends and a UTF-8 byte order mark would otherwise become tokens of their own.
std::string text_normalize_newlines(std::string s) {
  if (s.size() >= 3 && s.compare(0, 3, "\xEF\xBB\xBF") == 0) s.erase(0, 3);
  if (s.find('\r') == std::string::npos) return s;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string file_read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  AGOQ_CHECK(f, p.string(), ": cannot open file");
  std::string s(std::istreambuf_iterator<char>(f), {});
  AGOQ_CHECK(!f.bad(), p.string(), ": read error");
  return text_normalize_newlines(std::move(s));
}

// Appends `doc` after a blank line (documents never run into each other).
void text_append_document(std::string& out, std::string_view doc) {
  while (!doc.empty() && doc.back() == '\n') doc.remove_suffix(1);
  if (doc.empty()) return;
  if (!out.empty()) out += "\n\n";
  out += doc;
}

fs::path rdata_prefix(const fs::path& dir) {
  for (const fs::path& p : {dir / "Rdata", dir / "data" / "Rdata"})
    if (fs::is_regular_file(p.string() + ".rdx") && fs::is_regular_file(p.string() + ".rdb")) return p;
  return {};
}

}  // namespace

size_t utf8_length(std::string_view s) {
  return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
}

bool corpus_is_rdata_dir(const std::string& dir) { return !rdata_prefix(dir).empty(); }

Corpus corpus_read_rdata(const std::string& dir) {
  const fs::path prefix = rdata_prefix(dir);
  AGOQ_CHECK(!prefix.empty(), dir, ": no Rdata.rdx/Rdata.rdb here (run scripts/fetch-corpus.sh for the default ",
             "corpus)");
  const RLazyLoadDb db(prefix.string());
  Corpus c{.text = {}, .kind = "rdata", .documents = {}};
  for (const std::string& name : db.names()) {
    const RObjectPtr o = db.load(name);
    if (o->type != kRStr) continue;  // only character vectors are text
    std::string doc;
    for (const auto& line : o->strings) {
      doc += line.value_or("");
      doc += '\n';
    }
    text_append_document(c.text, text_normalize_newlines(std::move(doc)));
    c.documents.push_back(name);
  }
  AGOQ_CHECK(!c.documents.empty(), prefix.string(), ".rdx: holds no character vectors");
  return c;
}

Corpus corpus_read(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  AGOQ_CHECK(fs::exists(st), "input ", path, ": no such file or folder");
  if (fs::is_regular_file(st)) {
    Corpus c{.text = file_read_text(path), .kind = "file", .documents = {path}};
    AGOQ_CHECK(!c.text.empty(), "input ", path, ": file is empty");
    return c;
  }
  AGOQ_CHECK(fs::is_directory(st), "input ", path, ": not a file or folder");
  if (corpus_is_rdata_dir(path)) return corpus_read_rdata(path);
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(path, fs::directory_options::follow_directory_symlink))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  AGOQ_CHECK(!files.empty(), "input ", path, ": folder has no .txt files (and no R data Rdata.rdx)");
  std::sort(files.begin(), files.end());
  Corpus c{.text = {}, .kind = "folder", .documents = {}};
  for (const fs::path& f : files) {
    text_append_document(c.text, file_read_text(f));
    c.documents.push_back(f.string());
  }
  AGOQ_CHECK(!c.text.empty(), "input ", path, ": all ", files.size(), " .txt files are empty");
  return c;
}

}  // namespace agoq

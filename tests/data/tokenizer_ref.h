// The reference tokenizers of the tokenizer tests: built once per build folder by tests/data/tokenizer_reference.py
// (HF tokenizers and sentencepiece in the project's .venv) from a varied text the test makes, and kept under
// <build>/test_tokenizer_ref/<hash of text, samples and script>/ so that each test process (ctest runs one per
// test) reuses them.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "tests/common/python_ref.h"
#include "tests/data/data_test_util.h"

namespace agoq::tokenizer_ref {

namespace fs = std::filesystem;

// The first `most` bytes of s, cut before a character.
inline std::string read_some_of(const std::string& s, size_t most) {
  if (s.size() <= most) return s;
  while (most > 0 && (uint8_t(s[most]) & 0xC0) == 0x80) --most;
  return s.substr(0, most);
}
inline std::string read_some(const fs::path& p, size_t most) { return read_some_of(data_test::file_bytes(p), most); }

// About 1.3 MiB: English prose (Austen when fetched, else synthetic), the licence texts, this repository's C++,
// numbers, emoji, CJK, combining marks, contractions in any case, Unicode spaces (U+180E, which PCRE2 alone
// counts as \s, NBSP, U+2028, U+3000, U+0085), long runs of spaces and newlines, and the added tokens of the
// reference tokenizers written in the text.
inline std::string varied_text() {
  std::string t;
  const fs::path austen = fs::path(AGOQ_SOURCE_DIR) / "data" / "janeaustenr";
  if (fs::exists(austen / "Rdata.rdx")) t += corpus_read(austen.string()).text.substr(0, 300000);
  else t += data_test::synthetic_text(4000, 3);
  t += "\n<|endoftext|>";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const std::string s = read_some(f, 60000);
    if (utf8_valid(s) && t.size() < 650000) t += s + "\n<|end_of_text|>\n";
  }
  files.clear();
  for (const auto& e : fs::recursive_directory_iterator(fs::path(AGOQ_SOURCE_DIR) / "src"))
    if (e.path().extension() == ".cpp" || e.path().extension() == ".h") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files)
    if (t.size() < 1000000) t += data_test::file_bytes(f) + "<|begin_of_text|>";
  for (int i = 0; i < 3000; ++i) t += std::to_string(uint64_t(i) * 7919u * 104729u) + (i % 7 ? " " : ",\n");
  t += "3.14159 1,000,000 0x1F 12345678901234567890\n";
  // The texts are laid out by hand (the escapes of one string side by side).
  // clang-format off
  for (int i = 0; i < 300; ++i)
    t += "emoji \xF0\x9F\x8E\x89\xF0\x9F\xA6\x80 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
         "CJK \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0\xE3\x80\x82 "
         "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 e\xCC\x81t\xC3\xA9 I'M YOU'LL they'Re it's DON'T \xC5\xBF'S ";
  for (int i = 0; i < 200; ++i)
    t += std::string(i % 37, ' ') + std::string(i % 5, '\n') + "\t \t" + std::string(i % 3, '\r') + "x" +
         " a\xE1\xA0\x8E" "b \xE1\xA0\x8E\xE1\xA0\x8E c\xC2\xA0" "d\xE2\x80\xA8" "e\xE3\x80\x80" "f\xC2\x85g\n";
  // clang-format on
  t += std::string(5000, ' ') + "\n" + std::string(3000, '\n') + "end";
  return t;
}

// Short texts for the per-sample checks (special tokens, prefix spaces, strip and single-word tokens), then 400
// made of random runs of such pieces.
inline std::vector<std::string> samples() {
  // clang-format off
  std::vector<std::string> s = {
      "", " ", "hello world", "<|endoftext|>hello", "hello<|endoftext|>", "a<|endoftext|><|endoftext|>b",
      "a <mask> b", "a   <mask>", "tok tokens tok,tok", "xtok tok_ tok", "x [end]   y", "[end]",
      "<|begin_of_text|>Hi<|eot_id|>  there", "<|begin_of_text|>", "123456 7.5", "  lead", "trail  ",
      "\n\n\n", "It's DON'T \xC5\xBF'S", "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x8E\x89", "a\xE1\xA0\x8E b"};
  static const char* atoms[] = {
      "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<mask>", "tok", "[end]", " ", "  ", "\n", "\r\n", "\t",
      "\xC2\xA0", "\xE1\xA0\x8E", "\xE3\x80\x80", "\xE2\x80\xA8", "a", "Hello", "world", "'s", "'LL", "'Re",
      "\xC5\xBF", "123", "4567890", "3.14", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x8E\x89", "e\xCC\x81", "!!",
      "...", "\xE2\x80\x94", "x_y", "__init__", "{", "}", "(", "\\", "\"", "0x1F", "\x7F", "\xEF\xBB\xBF", "\xE2\x84\xAA"};
  // clang-format on
  uint64_t x = 0x2545F4914F6CDD1Dull;
  const auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  for (int i = 0; i < 400; ++i) {
    std::string t;
    for (int k = int(next() % 13); k > 0; --k) t += atoms[next() % (sizeof atoms / sizeof *atoms)];
    s.push_back(t);
  }
  return s;
}

struct Reference {
  fs::path dir;             // holds <name>/ for every reference tokenizer
  std::string text, small;  // small: the start of text, for the variants (tokenizer_reference.py's SMALL)
  std::vector<std::string> samples;
};

inline std::vector<int32_t> ids_read(const fs::path& p) {
  const std::string b = data_test::file_bytes(p);
  std::vector<int32_t> ids(b.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), b.data(), ids.size() * 4);
  return ids;
}

// Built on first use in this process (or found from an earlier process).
inline const Reference& reference() {
  static const Reference ref = [] {
    Reference r{{}, varied_text(), {}, samples()};
    r.small = read_some_of(r.text, 256 << 10);
    const std::string script = data_test::file_bytes(fs::path(AGOQ_SOURCE_DIR) / "tests/data/tokenizer_reference.py");
    const nlohmann::json samples_json = r.samples;
    uint64_t h = hash_fnv1a64(r.text.data(), r.text.size());
    h = hash_fnv1a64(script.data(), script.size(), h);
    const std::string sj = samples_json.dump();
    h = hash_fnv1a64(sj.data(), sj.size(), h);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    const fs::path root = fs::path(AGOQ_BIN_PATH).parent_path() / "test_tokenizer_ref";
    fs::create_directories(root);
    r.dir = root / hex;
    // One process builds; the others wait on the lock and find it done.
    const int lock = open((root / "lock").c_str(), O_CREAT | O_RDWR, 0644);
    flock(lock, LOCK_EX);
    if (!fs::exists(r.dir / "done")) {
      const fs::path tmp = root / (std::string(hex) + ".tmp");
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      data_test::file_put(tmp / "text.txt", r.text);
      data_test::file_put(tmp / "small.txt", r.small);
      data_test::file_put(tmp / "samples.json", sj);
      python_ref_run("tests/data/tokenizer_reference.py", "make " + tmp.string() + " " + (tmp / "text.txt").string() +
                                                              " " + (tmp / "small.txt").string() + " " +
                                                              (tmp / "samples.json").string());
      if (!::testing::Test::HasFailure()) {  // a failed build is not kept: the next process tries again
        data_test::file_put(tmp / "done", "");
        fs::remove_all(r.dir);
        fs::rename(tmp, r.dir);
      }
    }
    flock(lock, LOCK_UN);
    close(lock);
    return r;
  }();
  return ref;
}

// Where two id lists first differ, with the text decoded just before and the two tokens there; "" when equal.
inline std::string first_difference(const Tokenizer& tok, const std::vector<int32_t>& ours,
                                    const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < ours.size() && i < want.size() && ours[i] == want[i]) ++i;
  if (i == ours.size() && i == want.size()) return "";
  const auto show = [&](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t k = i; k < std::min(v.size(), i + 6); ++k)
      s += std::to_string(v[k]) + "'" + (v[k] >= 0 && v[k] < tok.vocab_size() ? tok.piece(v[k]) : "?") + "' ";
    return s;
  };
  const size_t from = i > 12 ? i - 12 : 0;
  const std::vector<int32_t> before(ours.begin() + long(from), ours.begin() + long(i));
  return "first difference at id " + std::to_string(i) + " of " + std::to_string(ours.size()) + " (reference " +
         std::to_string(want.size()) + "), after text \"" + tok.decode(before) + "\": ours " + show(ours) +
         "| reference " + show(want);
}

}  // namespace agoq::tokenizer_ref

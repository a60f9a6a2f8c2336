// The split regexes of byte-level BPE tokenizers, through PCRE2 (UTF + UCP, JIT when the library has it), scanned
// the way HF tokenizers scans them with Oniguruma (onig's find_iter): left to right, each search starting where the
// last match ended; an empty match right where the last one ended is skipped by moving on one character.
// Private to src/data (tokenizer_bpe.cpp).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace agoq {

// Rust's regex::escape, which tokenizers applies to a {"String": ...} pattern (Split, Replace) before compiling it.
std::string regex_escape_rust(std::string_view s);

class SplitRegex {
 public:
  // Errors (a pattern PCRE2 does not compile) are one line naming `what` and PCRE2's reason.
  SplitRegex(const std::string& pattern, const std::string& what);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  const std::string& pattern() const { return pattern_; }

  // One scan over `subject` (valid UTF-8: the caller has checked) from byte `from`, calling on_match(start, end)
  // for each match until it returns false or the subject ends. `after_match` says that `from` is where a match
  // ended (so an empty match there is skipped). Thread-safe: each call uses a match block of its own thread.
  template <class F>
  void scan(std::string_view subject, size_t from, bool after_match, F&& on_match) const {
    size_t last_end = from, s, e;
    size_t last_match_end = after_match ? from : std::string_view::npos;
    while (last_end <= subject.size() && find(subject, last_end, &s, &e)) {
      if (s == e && e == last_match_end) {  // onig: no empty match right where the last match ended
        last_end += last_end < subject.size() ? utf8_len(subject[last_end]) : 1;
        continue;
      }
      last_end = last_match_end = e;
      if (!on_match(s, e)) return;
    }
  }

  // Whether the whole of `text` (one character, say) matches: for the added tokens' word and space tests.
  bool matches_whole(std::string_view text) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_, what_;
  bool find(std::string_view subject, size_t from, size_t* start, size_t* end) const;
  static size_t utf8_len(char lead) {
    const auto b = static_cast<unsigned char>(lead);
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  }
};

}  // namespace agoq

#include "data/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace agoq {

namespace {

// What one match may cost: PCRE2's own defaults for steps (backtracking points, counted per start position; the
// JIT honours it) and depth (pcre2_match only), and a heap of 64 MiB for pcre2_match's backtracking frames. A split
// regex of a real tokenizer needs a few steps a piece; a pattern that backtracks without end (nested quantifiers)
// is stopped by them and named in one line. Back references are refused at compile time: their work is in the
// comparing, which no limit counts (`(a+)\1+$` on 50 KB of a is ~n^3 within the step limit).
constexpr uint32_t kMatchLimit = 10'000'000, kDepthLimit = 10'000'000, kHeapLimitKiB = 64 << 10;

// One thread's match block, JIT stack and match context, reused by every scan on that thread.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(64, nullptr);  // group 0 is all a scan reads
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 16 << 20, nullptr);  // long runs of one class
  MatchScratch() {
    AGOQ_CHECK(data && context, "split regex: out of memory for a match block");
    if (stack) pcre2_jit_stack_assign(context, nullptr, stack);
    pcre2_set_match_limit(context, kMatchLimit);
    pcre2_set_depth_limit(context, kDepthLimit);
    pcre2_set_heap_limit(context, kHeapLimitKiB);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

MatchScratch& match_scratch() {
  thread_local MatchScratch s;
  return s;
}

// Oniguruma's \s is Unicode's White_Space; PCRE2's (with UCP) also holds U+180E. Ruby syntax's \h is a hex digit.
constexpr const char* kOnigSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr const char* kOnigHex = "0-9A-Fa-f";

// The pattern with \s, \S, \h and \H spelled out as tokenizers' Oniguruma reads them (\S inside a class is left as
// PCRE2's: it differs only at U+180E).
std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      const char* set = n == 's' || n == 'S' ? kOnigSpace : n == 'h' || n == 'H' ? kOnigHex : nullptr;
      const bool negated = n == 'S' || n == 'H';
      if (set && in_class && !negated) out += set;
      else if (set && !in_class) out += std::string(negated ? "[^" : "[") + set + "]";
      else out += c, out += n;
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
    } else if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t end = p.find(":]", i + 2);  // [:alpha:]
      if (end != std::string_view::npos) out.append(p.substr(i + 1, end + 1 - i)), i = end + 1;
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

// The pattern as an error quotes it: whole when short, else its start and its size.
std::string pattern_excerpt(const std::string& p) {
  constexpr size_t kMost = 120;
  if (p.size() <= kMost) return p;
  size_t cut = kMost;
  while (cut > 0 && (uint8_t(p[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return p.substr(0, cut) + "... (" + std::to_string(p.size()) + " bytes)";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string regex_escape_rust(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct SplitRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex(const std::string& pattern, const std::string& what)
    : code_(std::make_unique<Code>()), pattern_(pattern), what_(what) {
  int err = 0;
  PCRE2_SIZE at = 0;
  // MULTILINE: Oniguruma's Ruby syntax (what tokenizers compiles with) makes ^ and $ line anchors.
  const std::string translated = onig_to_pcre2(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at, nullptr);
  AGOQ_CHECK(code_->code, what, ": regex '", pattern_excerpt(pattern),
             "' does not compile (PCRE2: ", pcre2_message(err), " at offset ", at, ")");
  uint32_t backrefs = 0;
  pcre2_pattern_info(code_->code, PCRE2_INFO_BACKREFMAX, &backrefs);
  AGOQ_CHECK(backrefs == 0, what, ": regex '", pattern_excerpt(pattern),
             "' has a back reference, which agoq refuses: matching one can take time that grows as the cube of the "
             "text's length, and PCRE2's limits do not bound it");
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

bool SplitRegex::find(std::string_view subject, size_t from, size_t* start, size_t* end) const {
  MatchScratch& m = match_scratch();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = code_->jit ? pcre2_jit_match(code_->code, s, subject.size(), from, 0, m.data, m.context)
                            : pcre2_match(code_->code, s, subject.size(), from, PCRE2_NO_UTF_CHECK, m.data, m.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  // rc == 0: more groups than the block holds; group 0 is still set.
  AGOQ_CHECK(rc >= 0, what_, ": regex '", pattern_excerpt(pattern_), "' failed at byte ", from, " of a ",
             subject.size(), "-byte piece (PCRE2: ", pcre2_message(rc),
             rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
                     rc == PCRE2_ERROR_JIT_STACKLIMIT
                 ? "; the pattern backtracks more than agoq lets one match"
                 : "",
             ")");
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
  *start = ov[0];
  *end = ov[1];
  // \K can put a match's start after its end; such a match is read as empty at its end.
  if (*start > *end) *start = *end;
  return true;
}

bool SplitRegex::matches_whole(std::string_view text) const {
  MatchScratch& m = match_scratch();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK, m.data, m.context);
  return rc >= 0;
}

}  // namespace agoq

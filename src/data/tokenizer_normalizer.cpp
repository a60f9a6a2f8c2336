#include "data/tokenizer_normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer_regex.h"
#include "data/utf8.h"

namespace agoq {

using nlohmann::json;

namespace {

constexpr const char* kImplemented = "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace";

struct NormalizerReader {
  const std::string& what;
  json steps = json::array();
  template <class... P>
  [[noreturn]] void refuse(const std::string& where, const P&... parts) const {
    fail("tokenizer ", what, ": ", where, parts...);
  }
  const json& field(const json& n, const char* key, bool (json::*is)() const, const char* kind,
                    const std::string& where) const {
    const auto it = n.find(key);
    if (it == n.end() || !((*it).*is)()) refuse(where, ".", key, " is missing or not ", kind);
    return *it;
  }
  void read(const json& n, const std::string& where) {
    if (!n.is_object()) refuse(where, " is not an object");
    const std::string type = field(n, "type", &json::is_string, "a string", where).get<std::string>();
    if (type == "Sequence") {
      const json& list = field(n, "normalizers", &json::is_array, "a list", where);
      for (size_t i = 0; i < list.size(); ++i) read(list[i], where + ".normalizers[" + std::to_string(i) + "]");
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase") {
      steps.push_back({{"type", type}});
    } else if (type == "Strip") {
      steps.push_back({{"type", type},
                       {"strip_left", field(n, "strip_left", &json::is_boolean, "true or false", where)},
                       {"strip_right", field(n, "strip_right", &json::is_boolean, "true or false", where)}});
    } else if (type == "Prepend") {
      steps.push_back({{"type", type}, {"prepend", field(n, "prepend", &json::is_string, "a string", where)}});
    } else if (type == "Replace") {
      const json& pattern = field(n, "pattern", &json::is_object, "an object", where);
      const bool regex = pattern.contains("Regex");
      const json& p = field(pattern, regex ? "Regex" : "String", &json::is_string, "a string", where + ".pattern");
      const std::string content = field(n, "content", &json::is_string, "a string", where).get<std::string>();
      // tokenizers compiles a String pattern as the Regex of its regex::escape.
      steps.push_back({{"type", type},
                       {"pattern", {{"Regex", regex ? p.get<std::string>() : regex_escape_rust(p.get<std::string>())}}},
                       {"content", content}});
    } else {
      refuse(where, " type '", type, "' is not supported (agoq implements ", kImplemented, ")");
    }
  }
};

// utf8proc's normalization forms, as tokenizers' NFC/NFD/NFKC/NFKD (unicode-normalization) compute them.
utf8proc_option_t form_options(const std::string& type) {
  const int compat = type == "NFKC" || type == "NFKD" ? UTF8PROC_COMPAT : 0;
  const int way = type == "NFC" || type == "NFKC" ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
  return utf8proc_option_t(UTF8PROC_STABLE | compat | way);
}

}  // namespace

std::string normalizer_read(const json* normalizer, const std::string& what) {
  if (!normalizer || normalizer->is_null()) return "";
  NormalizerReader r{what};
  r.read(*normalizer, "normalizer");
  return r.steps.empty() ? "" : r.steps.dump();
}

struct Normalizer::Step {
  enum Kind { form, lowercase, strip, prepend, replace } kind = form;
  utf8proc_option_t options = utf8proc_option_t(0);  // form's
  bool left = false, right = false;                  // strip's
  std::string text;                                  // prepend's prefix, replace's content
  std::unique_ptr<SplitRegex> pattern;               // replace's
};

namespace {

// A normalization form over text, in pieces cut after a newline (a starter that no form joins to or splits from its
// neighbours), so that utf8proc's scratch (4 bytes a code point) stays small for a large text.
std::string unicode_form(std::string_view text, utf8proc_option_t options, const std::string& what) {
  constexpr size_t kPiece = size_t(1) << 20;
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t nl = at + kPiece < text.size() ? text.find('\n', at + kPiece) : std::string_view::npos;
    const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                            utf8proc_ssize_t(end - at), &dst, options);
    AGOQ_CHECK(n >= 0, "tokenizer ", what, ": normalizer: utf8proc: ", utf8proc_errmsg(n));
    out.append(reinterpret_cast<const char*>(dst), size_t(n));
    std::free(dst);
    at = end;
  }
  return out;
}

// Rust's char::to_lowercase, character by character (tokenizers' NormalizedString::lowercase, so no final sigma):
// Unicode's simple lowercase mapping, but for U+0130, the one character whose unconditional mapping
// (SpecialCasing.txt) is two: i and U+0307.
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t len;
  for (size_t i = 0; i < text.size(); i += len) {
    const uint32_t c = utf8_decode(text, i, &len);
    if (c == 0x130) {
      out += "i\xCC\x87";
      continue;
    }
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_tolower(utf8proc_int32_t(c)), buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
  }
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size(), len;
  if (left)
    while (begin < end && utf8_is_white_space(utf8_decode(text, begin, &len))) begin += len;
  if (right)
    while (end > begin) {
      const size_t p = utf8_char_start(text, end - 1);
      if (!utf8_is_white_space(utf8_decode(text, p, &len))) break;
      end = p;
    }
  return std::string(text.substr(begin, end - begin));
}

// Each match of the pattern (found as tokenizers' onig find_iter finds them) replaced by `content`, taken as is.
std::string replace(std::string_view text, const SplitRegex& pattern, const std::string& content) {
  std::string out;
  size_t done = 0;
  pattern.scan(text, 0, false, [&](size_t s, size_t e) {
    out.append(text.substr(done, s - done)).append(content);
    done = e;
    return true;
  });
  return out.append(text.substr(done));
}

}  // namespace

Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

Normalizer::Normalizer(const std::string& steps, const std::string& what) : what_(what) {
  if (steps.empty()) return;
  // The steps are read again, so that a spec made elsewhere (a BpeSpec) is checked as a file's is.
  const json sequence = {{"type", "Sequence"}, {"normalizers", json::parse(steps, nullptr, false)}};
  const std::string checked = normalizer_read(&sequence, what);
  for (const json& s : json::parse(checked.empty() ? "[]" : checked)) {
    const std::string type = s["type"];
    Step step;
    if (type == "Lowercase") step.kind = Step::lowercase;
    else if (type == "Strip") step.kind = Step::strip, step.left = s["strip_left"], step.right = s["strip_right"];
    else if (type == "Prepend") step.kind = Step::prepend, step.text = s["prepend"];
    else if (type == "Replace") {
      step.kind = Step::replace, step.text = s["content"];
      step.pattern = std::make_unique<SplitRegex>(s["pattern"]["Regex"].get<std::string>(),
                                                  "tokenizer " + what + ": normalizer Replace");
    } else step.options = form_options(type);
    steps_.push_back(std::move(step));
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string t(text);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::form: t = unicode_form(t, s.options, what_); break;
      case Step::lowercase: t = lowercase(t); break;
      case Step::strip: t = strip(t, s.left, s.right); break;
      case Step::prepend:
        if (!t.empty()) t.insert(0, s.text);  // tokenizers: an empty part stays empty
        break;
      case Step::replace: t = replace(t, *s.pattern, s.text); break;
    }
  }
  return t;
}

}  // namespace agoq

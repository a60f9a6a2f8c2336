#include "core/json_read.h"

#include <algorithm>
#include <ostream>
#include <streambuf>

#include "core/error.h"

namespace agoq {

namespace {

using json = nlohmann::json;

// The library's message without its "[json.exception.parse_error.101] parse error at line 1, column 5: " prefix
// and without the "; last read: '...'" suffix (raw input bytes, possibly not UTF-8, possibly huge).
std::string parser_reason(const std::string& what) {
  std::string m = what.substr(std::min(what.size(), what.find("] ") + 2));
  if (m.starts_with("parse error")) m = m.substr(std::min(m.size(), m.find(": ") + 2));
  return m.substr(0, m.find("; last read"));
}

// Drops a UTF-8 sequence cut short at the end of s, so an excerpt stays valid UTF-8.
void utf8_trim_cut(std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    const size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (need > back) s.resize(s.size() - back);
    return;
  }
}

// Keeps the first `cap` characters written, then stops the writer by throwing (through std::ostream, whose
// exceptions() lets it pass): nlohmann's serializer writes at least one character per level it descends and flushes
// long strings in pieces, so stopping it bounds both its recursion and its walk.
struct ExcerptFull {};
class CappedBuf final : public std::streambuf {
 public:
  explicit CappedBuf(size_t cap) : cap_(cap) {}
  std::string text;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const size_t room = cap_ - text.size();
    text.append(s, std::min(size_t(n), room));
    if (size_t(n) > room) throw ExcerptFull{};
    return n;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
  }

 private:
  size_t cap_;
};

}  // namespace

json json_parse(std::string_view text, const std::string& what) {
  // The parser's own hook: called as each array or object opens, with the number of those around it.
  const json::parser_callback_t depth_bound = [&](int depth, json::parse_event_t event, json&) {
    const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    AGOQ_CHECK(!opens || depth < kJsonMaxDepth, what,
               " is not JSON agoq can read: arrays and objects nest deeper than ", kJsonMaxDepth, " levels");
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), depth_bound);
  } catch (const json::parse_error& e) {
    if (e.byte >= text.size()) fail(what, " is not valid JSON (it ends before the JSON does)");
    const auto line = 1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(e.byte), '\n');
    fail(what, " is not valid JSON (at byte ", e.byte, " of ", text.size(), ", line ", line, ": ",
         parser_reason(e.what()), ")");
  } catch (const json::out_of_range& e) {  // 406: a number beyond a double, e.g. 1e400
    const std::string m = e.what();
    const size_t q = m.find('\'');
    const std::string number = q == std::string::npos ? "" : m.substr(q + 1, m.size() - q - 2);
    fail(what, " is not JSON agoq can read: the number ", number.size() > 40 ? number.substr(0, 40) + "..." : number,
         " is beyond the range of a double");
  } catch (const json::exception& e) {
    fail(what, " is not JSON agoq can read: ", parser_reason(e.what()));
  }
}

std::string json_excerpt(const json& v, size_t max_chars) {
  CappedBuf buf(max_chars);
  std::ostream os(&buf);
  os.exceptions(std::ios::badbit);
  try {
    os << v;
    return buf.text;
  } catch (const ExcerptFull&) {
    utf8_trim_cut(buf.text);
    return buf.text + "...";
  } catch (const json::exception&) {  // a string that is not UTF-8 (a value not parsed from JSON text)
    return std::string("a ") + v.type_name() + " that is not UTF-8";
  }
}

}  // namespace agoq

#include "evaltask/task_text.h"

#include <utf8proc.h>

#include "data/utf8.h"

namespace agoq {
namespace {

// The byte offsets where each code point of valid UTF-8 text starts (invalid bytes count one each, as JSON input
// never has them: the readers check).
template <class Fn>
void for_each_char(std::string_view s, Fn&& fn) {
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t c = utf8_sequence(s, i, &len) ? utf8_decode(s, i, &len) : 0xFFFD;
    fn(i, len, c);
    i += len;
  }
}

}  // namespace

bool py_is_space(uint32_t c) { return utf8_is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

std::string py_rstrip(std::string_view s) {
  size_t end = 0;
  for_each_char(s, [&](size_t i, size_t len, uint32_t c) {
    if (!py_is_space(c)) end = i + len;
  });
  return std::string(s.substr(0, end));
}

std::string py_strip(std::string_view s) {
  size_t begin = s.size();
  for_each_char(s, [&](size_t i, size_t, uint32_t c) {
    if (begin == s.size() && !py_is_space(c)) begin = i;
  });
  return py_rstrip(s.substr(begin));
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  for_each_char(s, [&](size_t i, size_t, uint32_t c) {
    utf8_append(out, uint32_t(i == 0 ? utf8proc_totitle(utf8proc_int32_t(c)) : utf8proc_tolower(utf8proc_int32_t(c))));
  });
  return out;
}

size_t py_len(std::string_view s) {
  size_t n = 0;
  for_each_char(s, [&](size_t, size_t, uint32_t) { ++n; });
  return n;
}

size_t py_count_words(std::string_view s) {
  size_t runs = 0;
  bool in_space = false;
  for_each_char(s, [&](size_t, size_t, uint32_t c) {
    const bool sp = py_is_space(c);
    runs += sp && !in_space;
    in_space = sp;
  });
  return runs + 1;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  for (size_t hit; (hit = s.find(from, i)) != std::string_view::npos; i = hit + from.size())
    out.append(s.substr(i, hit - i)).append(to);
  return out.append(s.substr(i));
}

std::vector<std::string> py_split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  for (size_t hit; (hit = s.find(sep, i)) != std::string_view::npos; i = hit + 1)
    out.emplace_back(s.substr(i, hit - i));
  out.emplace_back(s.substr(i));
  return out;
}

std::string hellaswag_clean(std::string_view s) {
  const std::string t = py_replace(py_strip(s), " [title]", ". ");
  std::string out;  // re.sub(r"\[.*?\]", "", t): the shortest bracket from each "[", "." not matching "\n"
  for (size_t i = 0; i < t.size();) {
    const size_t close = t[i] == '[' ? t.find_first_of("]\n", i + 1) : std::string::npos;
    if (close != std::string::npos && t[close] == ']') {
      i = close + 1;
    } else {
      out += t[i++];
    }
  }
  return py_replace(out, "  ", " ");
}

}  // namespace agoq

// The Python string operations lm-eval's task templates apply to dataset text (str.strip, str.capitalize, len,
// re.split(r"\s+"), HellaSwag's cleaning), on UTF-8, so agoq builds the same contexts and continuations.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

// str.isspace() of a code point (re's \s on str): Unicode's White_Space and the separators U+001C..U+001F.
bool py_is_space(uint32_t c);
std::string py_strip(std::string_view s);   // str.strip()
std::string py_rstrip(std::string_view s);  // str.rstrip()
// str.capitalize(): the first character in title case, the rest in lower case (simple case mappings: utf8proc's).
std::string py_capitalize(std::string_view s);
size_t py_len(std::string_view s);  // len(str): code points
// len(re.split(r"\s+", s)): the runs of whitespace plus one (a leading or trailing run makes an empty word).
size_t py_count_words(std::string_view s);
// str.replace(from, to): every non-overlapping occurrence, left to right.
std::string py_replace(std::string_view s, std::string_view from, std::string_view to);
std::vector<std::string> py_split(std::string_view s, char sep);  // str.split(sep) with a one-character sep
// lm-eval's HellaSwag preprocess: strip, " [title]" -> ". ", every "[...]" (not across a newline) removed, then
// double spaces made single (one pass, as str.replace).
std::string hellaswag_clean(std::string_view s);

}  // namespace agoq

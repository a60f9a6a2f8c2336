#include "data/tokenizer_added.h"

#include <algorithm>

#include "data/utf8.h"

namespace agoq {

namespace {

// The start of the last character of text[0, end).
size_t utf8_prev(std::string_view text, size_t end) { return utf8_char_start(text, end - 1); }

// Where the whitespace at the end of text[0, end) begins.
size_t space_start_before(std::string_view text, size_t end) {
  while (end > 0) {
    const size_t p = utf8_prev(text, end);
    size_t len;
    if (!utf8_is_white_space(utf8_decode(text, p, &len))) break;
    end = p;
  }
  return end;
}

// Where the whitespace at text[begin...] ends.
size_t space_end_after(std::string_view text, size_t begin) {
  size_t len;
  while (begin < text.size() && utf8_is_white_space(utf8_decode(text, begin, &len))) begin += len;
  return begin;
}

}  // namespace

void AddedTokenSplitter::Trie::add(std::string_view s, int32_t token) {
  int32_t n = 0;
  for (const char ch : s) {
    const auto b = uint8_t(ch);
    auto& next = nodes[n].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t(-1)));
    if (it == next.end() || it->first != b) {
      it = next.insert(it, {b, int32_t(nodes.size())});
      nodes.emplace_back();  // invalidates `next`; `it` is not used after
      n = int32_t(nodes.size() - 1);
    } else {
      n = it->second;
    }
  }
  nodes[n].token = token;
  first[uint8_t(s[0])] = true;
}

bool AddedTokenSplitter::Trie::find(std::string_view text, size_t from, size_t* start, size_t* end,
                                    int32_t* token) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!first[uint8_t(text[i])]) continue;
    int32_t n = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& next = nodes[n].next;
      const auto b = uint8_t(text[j]);
      const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t(-1)));
      if (it == next.end() || it->first != b) break;
      n = it->second;
      if (nodes[n].token >= 0) best = nodes[n].token, best_end = j + 1;
    }
    if (best >= 0) {
      *start = i, *end = best_end, *token = best;
      return true;
    }
  }
  return false;
}

AddedTokenSplitter::AddedTokenSplitter(const std::vector<BpeSpec::Added>& added, const Normalizer& normalizer)
    : word_(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "added tokens' word test") {
  for (const BpeSpec::Added& a : added) {
    if (a.content.empty()) continue;  // tokenizers ignores them
    tokens_.push_back(a);
    const std::string matched = a.normalized ? normalizer.apply(a.content) : a.content;
    if (!matched.empty()) (a.normalized ? normalized_ : raw_).add(matched, int32_t(tokens_.size() - 1));
  }
}

// tokenizers' AddedVocabulary::find_matches over text[0, size) of one part, which starts at `base` in the whole.
void AddedTokenSplitter::find_matches(std::string_view text, size_t base, const Trie& trie,
                                      std::vector<TextPart>& out) const {
  size_t done = 0, from = 0, s, e;
  int32_t t;
  while (trie.find(text, from, &s, &e, &t)) {
    from = e;  // the matcher moves on from the match's own end, whatever strip does below
    const BpeSpec::Added& tok = tokens_[t];
    if (tok.single_word) {
      size_t len;
      const bool word_before = s > 0 && word_.matches_whole(text.substr(utf8_prev(text, s), s - utf8_prev(text, s)));
      const bool word_after = e < text.size() && (utf8_decode(text, e, &len), word_.matches_whole(text.substr(e, len)));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) s = std::max(space_start_before(text, s), done);
    if (tok.rstrip) e = space_end_after(text, e);
    if (done < s) out.push_back({-1, base + done, base + s});
    out.push_back({tok.id, base + s, base + e});
    done = e;
  }
  if (done < text.size()) out.push_back({-1, base + done, base + text.size()});
}

std::vector<TextPart> AddedTokenSplitter::split_raw(std::string_view text) const {
  std::vector<TextPart> out;
  if (!text.empty()) find_matches(text, 0, raw_, out);
  return out;
}

std::vector<TextPart> AddedTokenSplitter::split_normalized(std::string_view text) const {
  std::vector<TextPart> out;
  if (!text.empty()) find_matches(text, 0, normalized_, out);
  return out;
}

}  // namespace agoq

// The added tokens of a byte-level BPE tokenizer, found in the text before it is split, as tokenizers'
// AddedVocabulary finds them: the tokens with normalized = false first, over the whole text, then those with
// normalized = true in each part that is left, once the normalizer has run on it; each pass takes the
// leftmost match and of those the longest (Aho-Corasick leftmost-longest), drops a single_word token that touches a
// word character, and lets lstrip/rstrip take the whitespace beside a token. Private to src/data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "data/tokenizer_normalizer.h"
#include "data/tokenizer_regex.h"

namespace agoq {

// A piece of the text: an added token (id >= 0) or text still to split (id = -1), as [begin, end) of the text.
struct TextPart {
  int32_t id;
  size_t begin, end;
};

class AddedTokenSplitter {
 public:
  // The normalized = true tokens are matched as the normalizer makes them (tokenizers' refresh_added_tokens).
  AddedTokenSplitter(const std::vector<BpeSpec::Added>& added, const Normalizer& normalizer);
  bool empty() const { return tokens_.empty(); }
  // The parts of `text` (valid UTF-8), in order, split at the tokens with normalized = false; text parts are never
  // empty.
  std::vector<TextPart> split_raw(std::string_view text) const;
  // The parts of one text part of split_raw's, as the normalizer left it, split at the tokens with normalized = true.
  std::vector<TextPart> split_normalized(std::string_view text) const;

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
      int32_t token = -1;                             // index into tokens_
    };
    std::vector<Node> nodes{1};
    bool first[256] = {};
    void add(std::string_view s, int32_t token);
    // The leftmost-longest match at or after `from`.
    bool find(std::string_view text, size_t from, size_t* start, size_t* end, int32_t* token) const;
  };
  std::vector<BpeSpec::Added> tokens_;
  Trie raw_, normalized_;  // normalized = false / true
  SplitRegex word_;        // one word character (Rust regex's \w)
  void find_matches(std::string_view text, size_t base, const Trie& trie, std::vector<TextPart>& out) const;
};

}  // namespace agoq

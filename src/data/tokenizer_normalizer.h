// tokenizer.json's normalizer, run as HF tokenizers runs it: on each part of the text between the added tokens that
// are not `normalized` (tokenizers' AddedVocabulary::extract_and_normalize), before the normalized added tokens are
// matched and the pre-tokenizer splits. The normalizers real tokenizers use: Sequence (empty or nested), NFC, NFD,
// NFKC, NFKD (utf8proc), Lowercase (Rust's char::to_lowercase), Strip, Prepend, Replace (a String or an Oniguruma
// Regex, through tokenizer_regex.h); any other is refused by name. Private to src/data.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace agoq {

class SplitRegex;

// tokenizer.json's "normalizer" value (nullptr or null: none) as the steps agoq runs: Sequences flattened, as JSON
// text (a list of steps); "" when there is no step (an empty Sequence is no normalizer: the same tokenizer as
// without one). Errors are one line naming the tokenizer, where in "normalizer" and the type or field.
std::string normalizer_read(const nlohmann::json* normalizer, const std::string& what);

class Normalizer {
 public:
  Normalizer();
  // From normalizer_read's steps ("" for none); `what` names the tokenizer in errors.
  Normalizer(const std::string& steps, const std::string& what);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  bool empty() const { return steps_.empty(); }
  // `text` (valid UTF-8) through every step; valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  struct Step;
  std::vector<Step> steps_;
  std::string what_;
};

}  // namespace agoq

// Hugging Face's tokenizer.json and tokenizer_config.json, read into a BpeSpec and written from one. Reading
// follows what AutoTokenizer (transformers 4.46, tokenizers 0.20) makes of the files: the tokenizer class's own
// changes (LlamaTokenizerFast rebuilds the post-processor from add_bos_token/add_eos_token; GPT2TokenizerFast and
// its kin set ByteLevel's add_prefix_space from the config) are applied. Everything agoq does not implement is
// refused in one line naming the field and its value. Private to src/data.
#pragma once
#include <string>
#include <string_view>

#include "data/tokenizer.h"
#include "data/tokenizer_engine.h"

namespace agoq {

// GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel (use_regex) holds it.
extern const char* const kGpt2SplitRegex;

// config_json: "" when there is no tokenizer_config.json.
BpeSpec bpe_spec_from_json(std::string_view tokenizer_json, std::string_view config_json, const std::string& what);
// Whether tokenizer.json is transformers' conversion of a SentencePiece model (a BPE model with byte_fallback):
// the tokenizer.model beside it is the same tokenizer, read by the SentencePiece engine.
bool tokenizer_json_is_sentencepiece(std::string_view tokenizer_json);
// tokenizer.json and tokenizer_config.json that tokenizers and AutoTokenizer load to the same ids.
TokenizerFiles bpe_spec_to_json(const BpeSpec& spec);

}  // namespace agoq

// The fuzz target of tokenizer.json (fuzz_target.h): the byte-level BPE reader, the tokenizer it builds on a text
// with added tokens, invalid UTF-8 and runs of spaces, and the files it writes read back.
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

namespace agoq::fuzz {

// tokenizer.json, then optionally "\n#config\n" and a tokenizer_config.json.
int tokenizer_json(const uint8_t* data, size_t size) {
  static const std::string kSplit = "\n#config\n";
  const std::string_view in = text_of(data, size);
  const size_t cut = in.find(kSplit);
  try {
    const std::string path = file_of(in.substr(0, cut), "tokenizer.json");
    const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    if (cut == std::string_view::npos) std::filesystem::remove(config);
    else file_of(in.substr(cut + kSplit.size()), "tokenizer_config.json");
    const Tokenizer tok = Tokenizer::load(path);
    const std::string text = "Hello world, 123 <s>x</s> <|endoftext|>  \n\n\t caf\xC3\xA9 \xE6\x97\xA5 \xFF\xFE end";
    const std::vector<int32_t> ids = tok.encode_for_model(text);
    (void)tok.decode(ids);
    (void)tok.identity();
    for (int id : {0, tok.vocab_size() - 1}) (void)tok.piece(id);
    (void)tok.files();
  } catch (const Error& e) {
    refused(e);
  }
  return 0;
}

}  // namespace agoq::fuzz

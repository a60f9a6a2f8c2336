// The fuzz target of prompt/completion JSON lines (fuzz_target.h, data/examples.h): read with a byte-level BPE
// tokenizer that has ChatML tokens, both ways of treating a long example, then packed into windows.
#include <string>

#include "core/error.h"
#include "data/examples.h"
#include "data/tokenizer.h"
#include "tests/common/bpe_byte_chars.h"
#include "tests/fuzz/fuzz_target.h"

namespace agoq::fuzz {
namespace {

// Every byte a token (no merges), then <|endoftext|> (EOS), <|im_start|> and <|im_end|>.
const Tokenizer& chatml_tokenizer() {
  static const Tokenizer tok = [] {
    BpeSpec s;
    s.vocab = bpe_byte_chars();
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
      s.added.push_back({int(s.vocab.size()), special, true});
      s.vocab.push_back(special);
    }
    s.eos_id = 256;
    return Tokenizer::from_bpe(s, "fuzz tokenizer");
  }();
  return tok;
}

}  // namespace

int examples_jsonl(const uint8_t* data, size_t size) {
  const Tokenizer& tok = chatml_tokenizer();
  const std::string path = file_of(text_of(data, size), "train.jsonl");
  for (OverlongExamples overlong : {OverlongExamples::refuse, OverlongExamples::truncate}) {
    try {
      const ExamplesRead read = examples_read_jsonl(path, tok, 16, overlong);
      (void)examples_pack(read.examples, 17, tok.eos_id());
    } catch (const Error& e) {
      refused(e);
    }
  }
  return 0;
}

}  // namespace agoq::fuzz

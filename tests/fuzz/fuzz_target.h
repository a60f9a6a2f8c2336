// The fuzz targets of agoq's parsers of outside input. Each target is a function that takes any bytes and must end
// in a result or an agoq::Error (which it swallows): anything else that escapes (another exception, a crash, a
// sanitizer report, a hang, an oversized allocation) is a bug. One function per parser, so libFuzzer builds one
// binary per target (fuzz_main.cpp, -DAGOQ_FUZZ=ON) and ctest replays every committed corpus through all of them
// (test_fuzz_corpus.cpp). tests/fuzz/README.md says how to fuzz.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

namespace agoq::fuzz {

int rdata(const uint8_t* data, size_t size);           // the R reader (.rds / lazy-load database)
int safetensors(const uint8_t* data, size_t size);     // a safetensors file: header, tensor table, tensor reads
int hf_config(const uint8_t* data, size_t size);       // config.json
int checkpoint(const uint8_t* data, size_t size);      // trainer.json of a checkpoint ("COMMIT": its commit id)
int token_file(const uint8_t* data, size_t size);      // a token file (train.bin): header and payload
int act_policy(const uint8_t* data, size_t size);      // --act-policy specs
int flags(const uint8_t* data, size_t size);           // size strings (--mem-budget) and --stage-layers
int hf_index(const uint8_t* data, size_t size);        // model.safetensors.index.json of a sharded HF folder
int gguf(const uint8_t* data, size_t size);            // a GGUF file: header, metadata, tensors, model, tokenizer
int tokenizer_json(const uint8_t* data, size_t size);  // tokenizer.json (+ "\n#config\n" tokenizer_config.json)
int examples_jsonl(const uint8_t* data, size_t size);  // prompt/completion JSON lines (prepare --format ...)
int eval_task(const uint8_t* data, size_t size);       // a --task file, read as every task form (evaltask/)

// The bytes as a file in a private temporary folder (for parsers that read paths); the same path every call.
std::string file_of(std::string_view bytes, const char* name);
inline std::string_view text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
// The expected end of bad input; AGOQ_FUZZ_TRACE=1 prints the message (to see how far a corpus input gets).
void refused(const std::exception& e);

}  // namespace agoq::fuzz

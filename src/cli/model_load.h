// A model from any source (formats/model_source.h: an agoq checkpoint, a Hugging Face folder, a GGUF file) made
// ready for inference by `agoq sample` and `agoq eval`: its tokenizer, and its weights in a LlamaModel for one
// sequence of `window` tokens, after the memory model has said it fits this machine.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "formats/model_source.h"
#include "model/llama.h"

namespace agoq {

struct InferenceModel {
  std::unique_ptr<ModelReader> source;
  Tokenizer tok;
  ComputeChoice compute;                  // --compute, resolved for this CPU
  std::unique_ptr<ModelBackend> backend;  // the bf16 GEMMs' backend (null: the CPU's fp32 ops)
  std::unique_ptr<LlamaModel> model;
  int window = 0;
};

// The window a command uses by default: the model's context, at most 2048 tokens.
int inference_window_default(const LlamaConfig& cfg);

// Opens `src` (tokenizer_path: another tokenizer instead of the model's own; window 0: the default) and loads it,
// its GEMMs in the precision `compute` resolves to.
// Every problem (the source, a tokenizer larger than the vocabulary, too little memory, a window beyond the
// context or a sliding window) is one error line.
InferenceModel inference_model_load(const std::string& src, const std::string& tokenizer_path, int window,
                                    ComputeMode compute);

// A model's output (a loss, a position's logits) that is not finite is an error saying where it came from:
// "<what> not finite (nan) <where>: the model's weights or activations overflow float32" (a weight of 3e38 is a
// finite value, and loads; its products are not).
void model_output_check(const float* x, size_t n, const std::string& what, const std::string& where);

}  // namespace agoq

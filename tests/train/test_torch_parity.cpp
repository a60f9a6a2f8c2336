// Parity with PyTorch: agoq writes a tiny LLaMA checkpoint, a batch and its loss + gradients; the independent
// PyTorch implementation in tests/torch/llama_reference.py recomputes them in float64 and compares (relative
// error <= 1e-4; <= 1e-5 for the masked loss over packed documents). The test command installs Debian's
// python3-torch, so a missing torch is a failure, not a skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "tests/common/op_check.h"
#include "tests/common/temp_path.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return "popen failed";
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  *status = pclose(p);
  return out;
}

// masked: about half the targets ignored (-1, prompt tokens) and the rows packed into documents, which the reference
// sees as ignore_index and a block-diagonal causal mask.
void check_parity(LlamaConfig c, int B, int T, const char* tag, bool masked = false) {
  LlamaModel m(c, B, T, ActPolicy::parse("fp32", c.n_layers));
  m.init_weights(11);
  // Non-trivial norm weights and larger matrices, so every path carries signal.
  Rng rng(12);
  for (const ParamTensor& t : m.params().named())
    for (size_t i = 0; i < t.numel(); ++i)
      t.data[i] = t.shape.size() == 1 ? 1.0f + 0.2f * rng.normal() : 4.0f * t.data[i];
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = int32_t(rng.below(c.vocab_size)), tgt[i] = int32_t(rng.below(c.vocab_size));
  std::vector<int32_t> docs;
  MicroBatchRun run;
  if (masked) {
    for (int i = 0; i < B * T; ++i)
      if (rng.below(2) == 0) tgt[i] = -1;
    docs = doc_starts_random(B, T, 13, 12);
    run.doc_start = docs.data();
  }
  m.grads().zero();
  const float loss = m.forward_backward(in.data(), tgt.data(), B, T, run);

  const fs::path dir = test_temp_path("parity_" + std::string(tag));
  fs::remove_all(dir);
  NamedTensors weights;
  for (const ParamTensor& t : m.params().named()) weights.push_back({t.name, t.shape, t.data});
  checkpoint_save((dir / "ckpt").string(), c, weights, {}, nlohmann::json::object(), 0);
  SafetensorsWriter batch;
  batch.add("inputs", "I32", {B, T}, in.data(), in.size() * 4);
  batch.add("targets", "I32", {B, T}, tgt.data(), tgt.size() * 4);
  if (masked) batch.add("doc_start", "I32", {B, T}, docs.data(), docs.size() * 4);
  batch.write((dir / "batch.safetensors").string());
  SafetensorsWriter grads;
  grads.add_f32("loss", {1}, &loss);
  for (const ParamTensor& t : m.params().named())
    grads.add_f32(t.name, t.shape, m.grads().data() + (t.data - m.params().data()));
  grads.write((dir / "grads.safetensors").string());

  int status = 0;
  const std::string out = run_capture("/usr/bin/python3 " AGOQ_SOURCE_DIR "/tests/torch/llama_reference.py " +
                                          (dir / "ckpt").string() + " " + (dir / "batch.safetensors").string() + " " +
                                          (dir / "grads.safetensors").string() + " --tol " + (masked ? "1e-5" : "1e-4"),
                                      &status);
  EXPECT_EQ(status, 0) << out;
  const size_t at = out.find("max_rel_err=");
  ASSERT_NE(at, std::string::npos) << out;
  std::printf("%s: %s", tag, out.substr(at, out.find('\n', at) - at + 1).c_str());
  fs::remove_all(dir);
}

TEST(TorchParity, LossAndAllGradientsMatchPyTorch) {
  LlamaConfig c;
  c.vocab_size = 97, c.dim = 48, c.n_layers = 2, c.n_heads = 6, c.n_kv_heads = 2, c.ffn_dim = 72;
  c.max_seq_len = 80, c.rope_theta = 500.0f;
  check_parity(c, 2, 70, "gqa");  // T = 70 spans two attention tiles with a ragged tail
}

TEST(TorchParity, MaskedLossAndPackedDocumentsMatchPyTorch) {
  LlamaConfig c;
  c.vocab_size = 97, c.dim = 48, c.n_layers = 2, c.n_heads = 6, c.n_kv_heads = 2, c.ffn_dim = 72;
  c.max_seq_len = 80, c.rope_theta = 500.0f;
  check_parity(c, 2, 70, "masked", true);
}

TEST(TorchParity, TiedEmbeddingsMatchPyTorch) {
  LlamaConfig c;
  c.vocab_size = 64, c.dim = 32, c.n_layers = 1, c.n_heads = 4, c.n_kv_heads = 4, c.ffn_dim = 40;
  c.max_seq_len = 16, c.tie_embeddings = true;
  check_parity(c, 3, 9, "tied");
}

}  // namespace
}  // namespace agoq

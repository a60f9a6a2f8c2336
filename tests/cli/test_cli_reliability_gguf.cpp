// Issue 42 (reliability round 3), GGUF import and results that are not finite, through the agoq binary:
// - a GGUF whose header's tensor count is one short (output.weight left out of the count) made `inspect` say "tied"
//   for an untied model and `eval` print loss 2.5e31: now refused in one line naming the file and the count;
// - a GGUF with llama.attention.head_count 0 was blamed on llama.rope.dimension_count: now named itself;
// - a finite 3e38 weight made `eval` print `loss -nan` (JSON `null`, exit 0) and `sample` print end-of-text x5: a
//   loss or logits that are not finite are now one error saying where (the window, the generated token).
#include <cstring>
#include <fstream>

#include "formats/gguf.h"
#include "tests/cli/cli_test_util.h"
#include "tests/common/python_ref.h"

namespace agoq {
namespace {

// The models of `gguf_reference.py model` (a random untied LlamaForCausalLM as llama.cpp's converter writes it,
// output.weight its last tensor), made once per test process.
struct ModelDir {
  fs::path path = fs::temp_directory_path() / ("agoq_cli_gguf_rel_" + std::to_string(::getpid()));
  ModelDir() {
    fs::create_directories(path);
    python_ref_run("tests/formats/gguf_reference.py", "model " + path.string());
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
const fs::path& models() {
  static const ModelDir dir;
  return dir.path;
}

// A copy of untied-F32.gguf under `name`, changed by `edit` (the whole file's bytes).
template <class Edit>
std::string untied_copy(const std::string& name, Edit edit) {
  std::string bytes = file_text((models() / "untied-F32.gguf").string());
  edit(bytes);
  const fs::path p = models() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return p.string();
}

void u32_after_key(std::string& bytes, const std::string& key, uint32_t v) {
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos) << key;
  ASSERT_EQ(bytes[at + key.size()], 4) << key << " is not a uint32";
  std::memcpy(&bytes[at + key.size() + 4], &v, 4);
}

std::string text_file() {
  const fs::path p = models() / "text.txt";
  if (!fs::exists(p))
    std::ofstream(p) << "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                        "must be in want of a wife.\n";
  return p.string();
}

// Reproducer: the untied model with its header's tensor count lowered by one, so that output.weight is never read.
TEST(CliGgufReliability, TensorCountOneShortRefusedNotReadAsTied) {
  const std::string p = untied_copy("count-short.gguf", [](std::string& b) { --b[8]; });  // uint64 at byte 8
  for (const std::string& args :
       {"inspect " + p, "eval --ckpt " + p + " --text " + text_file(), "sample --ckpt " + p + " --tokens 3"}) {
    expect_clean_error(args, p);
    expect_clean_error(args, "tensor count (20) is not the number of tensor infos the file holds");
  }
}

// A tensor count one too short whatever the layout: trailing data after the last tensor is refused too when the
// infos themselves line up (the count is right, but the file holds a tensor's worth of bytes more).
TEST(CliGgufReliability, DataAfterTheLastTensorRefused) {
  const std::string p = untied_copy("trailing.gguf", [](std::string& b) { b += std::string(4096, '\1'); });
  expect_clean_error("inspect " + p, "belong to no tensor");
}

// Reproducer: llama.attention.head_count 0 was reported as "llama.rope.dimension_count = 16 differs from the head
// dim 0".
TEST(CliGgufReliability, HeadCountZeroNamedItself) {
  const std::string p =
      untied_copy("heads0.gguf", [](std::string& b) { u32_after_key(b, "llama.attention.head_count", 0); });
  expect_clean_error("inspect " + p, "llama.attention.head_count' = 0 must be >= 1");
  const RunResult r = run_agoq("inspect " + p);
  EXPECT_EQ(r.err.find("rope.dimension_count"), std::string::npos) << r.err;
}

// Every value of output.weight set to 3e38: finite (accepted at load), but the logits overflow to +-inf and the loss
// is NaN.
std::string huge_weight_model() {
  const fs::path src = models() / "untied-F32.gguf";
  const GgufFile f = GgufFile::open(src.string());
  const GgufTensorInfo* t = f.tensor("output.weight");
  EXPECT_NE(t, nullptr);
  const uint64_t at = t->offset, n = t->bytes / 4;
  return untied_copy("huge-weight.gguf", [&](std::string& b) {
    const float big = 3e38f;
    for (uint64_t i = 0; i < n; ++i) std::memcpy(&b[at + 4 * i], &big, 4);
  });
}

// Reproducer: `agoq eval` printed "loss -nan  perplexity -nan" (with --json: "loss": null) and exited 0.
TEST(CliGgufReliability, EvalRefusesALossThatIsNotFinite) {
  const std::string p = huge_weight_model();
  for (const char* extra : {"", " --json"}) {
    const std::string args = "eval --ckpt " + p + " --text " + text_file() + extra;
    expect_clean_error(args, "loss is not finite (nan) at window 0");
    expect_clean_error(args, "overflow");
    int status = 0;
    const std::string out = agoq_stdout(args + " 2>/dev/null", &status);
    EXPECT_EQ(out.find("null"), std::string::npos) << out;
    EXPECT_EQ(out.find("nan"), std::string::npos) << out;
  }
}

// output.weight times 3000: a finite loss of ~1400 nats per token, whose perplexity exp(loss) overflows float64
// (before: "perplexity inf", with --json "perplexity": null and exit 0).
TEST(CliGgufReliability, EvalRefusesAPerplexityBeyondFloat64) {
  const fs::path src = models() / "untied-F32.gguf";
  const GgufFile f = GgufFile::open(src.string());
  const GgufTensorInfo* t = f.tensor("output.weight");
  ASSERT_NE(t, nullptr);
  const std::string p = untied_copy("scaled-weight.gguf", [&](std::string& b) {
    for (uint64_t i = 0; i < t->bytes / 4; ++i) {
      float x;
      std::memcpy(&x, &b[t->offset + 4 * i], 4);
      x *= 3000.0f;
      std::memcpy(&b[t->offset + 4 * i], &x, 4);
    }
  });
  expect_clean_error("eval --ckpt " + p + " --text " + text_file() + " --json",
                     "the perplexity exp(loss) overflows float64 (loss ");
}

// Reproducer: `agoq sample` drew end-of-text 5 times from logits that were all +-inf or NaN.
TEST(CliGgufReliability, SampleRefusesLogitsThatAreNotFinite) {
  const std::string p = huge_weight_model();
  for (const char* extra : {"", " --json", " --temperature 0"}) {
    expect_clean_error("sample --ckpt " + p + " --tokens 5" + extra, "logits are not finite");
    expect_clean_error("sample --ckpt " + p + " --tokens 5" + extra, "at generated token 0");
  }
}

// The unchanged model still evaluates and samples (the checks refuse only what is not finite).
TEST(CliGgufReliability, TheModelItselfStillRuns) {
  const std::string p = (models() / "untied-F32.gguf").string();
  int status = 0;
  const std::string out = agoq_stdout("eval --ckpt " + p + " --text " + text_file() + " --json", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\"loss\""), std::string::npos) << out;
  EXPECT_EQ(out.find("null"), std::string::npos) << out;
  const RunResult r = run_agoq("sample --ckpt " + p + " --tokens 5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const RunResult i = run_agoq("inspect " + p);
  EXPECT_EQ(i.exit_code, 0) << i.err;
}

}  // namespace
}  // namespace agoq

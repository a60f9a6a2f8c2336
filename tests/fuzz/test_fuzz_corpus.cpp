// Every fuzz target (fuzz_target.h) on its committed corpus, tests/fuzz/corpus/<target>/ (what libFuzzer kept
// after its runs; tests/fuzz/README.md), and on every truncation of each input: each must end in a result or an
// agoq::Error, in under 2 s. The seeds that make a corpus start somewhere are built here too (AGOQ_FUZZ_SEED_DIR).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/fuzz_target.h"

namespace agoq {

namespace fs = std::filesystem;

namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};
constexpr Target kTargets[] = {{"rdata", fuzz::rdata},
                               {"safetensors", fuzz::safetensors},
                               {"hf_config", fuzz::hf_config},
                               {"checkpoint", fuzz::checkpoint},
                               {"token_file", fuzz::token_file},
                               {"act_policy", fuzz::act_policy},
                               {"flags", fuzz::flags},
                               {"hf_index", fuzz::hf_index},
                               {"gguf", fuzz::gguf},
                               {"tokenizer_json", fuzz::tokenizer_json},
                               {"examples_jsonl", fuzz::examples_jsonl},
                               {"eval_task", fuzz::eval_task}};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The input through the target; a failure names the input.
void replay_one(const Target& t, const std::string& what, const std::string& in) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    t.run(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  } catch (const std::exception& e) {
    ADD_FAILURE() << t.name << " " << what << ": escaped as " << typeid(e).name() << ": " << e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0) << t.name << " " << what;
}

class FuzzCorpus : public ::testing::TestWithParam<Target> {};

}  // namespace

TEST_P(FuzzCorpus, EveryInputEndsInResultOrError) {
  const Target& t = GetParam();
  const fs::path dir = fs::path(AGOQ_SOURCE_DIR) / "tests/fuzz/corpus" / t.name;
  ASSERT_TRUE(fs::is_directory(dir)) << "no committed corpus at " << dir;
  size_t inputs = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string in = file_bytes(e.path()), name = e.path().filename().string();
    replay_one(t, name, in);
    for (size_t n = 0; n < in.size(); n += 1 + in.size() / 64)
      replay_one(t, name + " cut to " + std::to_string(n), in.substr(0, n));
    ++inputs;
  }
  EXPECT_GE(inputs, 5u) << "the corpus of " << t.name << " is nearly empty";
  std::cout << t.name << ": " << inputs << " corpus inputs\n";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace agoq

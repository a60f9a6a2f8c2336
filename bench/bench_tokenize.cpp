// `agoq bench tokenize`: MB/s of agoq's two tokenizer engines next to their references in the same run, on the
// same text: agoq's SentencePiece engine and the sentencepiece package on a model trained here; agoq's byte-level
// BPE and HF tokenizers on one tokenizer.json (--bpe, or a Llama-3-style one tokenizers trains here). The
// references run in the project's .venv (bench/bench_tokenize.py); without it their rows are skipped, said so.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/folder_cleanup.h"
#include "cli/script_run.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string text, bpe;
  double mb = 4;
  int reps = 3, vocab = 8192;
  bool json = false;
};

struct Row {
  std::string engine, tokenizer;
  int threads;
  double seconds;
  size_t tokens;
  std::string same;  // "yes", "no", or "" (no reference to compare with)
};

// The repository the binary was built in (build/agoq -> .), where .venv and bench/ are.
fs::path source_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& d : {exe.parent_path().parent_path(), fs::current_path()})
    if (fs::exists(d / "bench" / "bench_tokenize.py")) return d;
  return {};
}

double best_of(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::string text_for(const Options& o, const fs::path& src) {
  std::string path = o.text;
  if (path.empty() && fs::exists(src / "data" / "janeaustenr" / "Rdata.rdx"))
    path = (src / "data" / "janeaustenr").string();
  std::string text;
  if (!path.empty()) {
    text = corpus_read(path).text;
  } else {  // synthetic: words of 1-4 syllables (a large vocabulary), numbers, punctuation, a little code
    static const char* syl[] = {"ka",  "te", "ri", "so", "mun", "der", "el", "iz", "ab", "eth", "ar", "cy", "ben",
                                "net", "lo", "ve", "wi", "th",  "ou",  "gh", "pr", "id", "e",   "an", "st", "ing"};
    const size_t n_syl = sizeof syl / sizeof *syl;
    uint64_t x = 88172645463325252ull;
    const auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
    while (text.size() < size_t(o.mb * 1e6)) {
      for (int k = int(next() % 4); k >= 0; --k) text += syl[next() % n_syl];
      const uint64_t r = next() % 40;
      text += r == 0   ? ".\n"
              : r == 1 ? ", "
              : r == 2 ? " " + std::to_string(next() % 100000) + " "
              : r == 3 ? "();\n  "
                       : " ";
    }
  }
  const size_t want = size_t(o.mb * 1e6);
  while (text.size() < want) text += text.substr(0, want - text.size());
  size_t cut = std::min(want, text.size());
  while (cut > 0 && (uint8_t(text[cut]) & 0xC0) == 0x80) --cut;  // whole characters
  text.resize(cut);
  return text;
}

std::vector<int32_t> ids_read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(f)), {});
  std::vector<int32_t> ids(b.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), b.data(), ids.size() * 4);
  return ids;
}

// Times agoq's engine with all threads and with one; `ref` (may be empty) is the reference's ids.
void time_engine(const Tokenizer& tok, const std::string& name, const std::string& what, const std::string& text,
                 int reps, const std::vector<int32_t>& ref, std::vector<Row>& rows) {
  const int threads = omp_get_max_threads();
  for (const int t : {threads, 1}) {
    omp_set_num_threads(t);
    std::vector<int32_t> ids;
    const double s = best_of(reps, [&] { ids = tok.encode(text); });
    rows.push_back({name, what, t, s, ids.size(), ref.empty() ? "" : ids == ref ? "yes" : "no"});
    if (threads == 1) break;
  }
  omp_set_num_threads(threads);
}

void run(const Options& o) {
  if (!o.bpe.empty()) Tokenizer::load(o.bpe);  // a path that is no tokenizer: one line naming it, before any work
  const fs::path src = source_dir();
  const std::string text = text_for(o, src);
  const fs::path tmp = fs::temp_directory_path() / ("agoq-bench-tokenize-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const FolderCleanup cleanup(tmp);
  const Tokenizer sp = Tokenizer::train(text, {.vocab_size = o.vocab, .max_bytes = 2'000'000});
  sp.save((tmp / "tokenizer.model").string());
  atomic_file_write((tmp / "text.txt").string(), text);
  const fs::path python = src / ".venv" / "bin" / "python";
  nlohmann::json ref;
  std::string skipped;
  if (src.empty() || !fs::exists(python)) {
    skipped = std::string("no .venv (scripts/install-deps.sh --test): the reference rows are skipped") +
              (o.bpe.empty() ? ", and without --bpe the byte-level BPE rows too" : "");
  } else {
    std::vector<std::string> argv = {python.string(),
                                     (src / "bench" / "bench_tokenize.py").string(),
                                     (tmp / "text.txt").string(),
                                     (tmp / "tokenizer.model").string(),
                                     tmp.string(),
                                     std::to_string(o.reps)};
    if (!o.bpe.empty()) argv.push_back(o.bpe);
    const std::string out = cli_script_run("bench tokenize: bench/bench_tokenize.py", argv);
    ref = nlohmann::json::parse(out.substr(out.rfind('{')));
  }
  std::vector<Row> rows;
  const std::string sp_what = "trained here, " + std::to_string(o.vocab) + " pieces";
  time_engine(sp, "agoq sentencepiece", sp_what, text, o.reps,
              ref.empty() ? std::vector<int32_t>{} : ids_read(tmp / "sp.ids"), rows);
  if (!ref.empty()) rows.push_back({"sentencepiece (python)", sp_what, 1, ref["sp_s"], ref["sp_tokens"], ""});
  const std::string bpe_dir = !ref.empty() ? ref["bpe_dir"].get<std::string>() : o.bpe;
  if (!bpe_dir.empty()) {
    const Tokenizer bpe = Tokenizer::load(bpe_dir);
    const std::string what = (o.bpe.empty() ? "Llama-3-style, " : fs::path(bpe_dir).filename().string() + ", ") +
                             std::to_string(bpe.vocab_size()) + " tokens";
    time_engine(bpe, "agoq byte-level bpe", what, text, o.reps,
                ref.empty() ? std::vector<int32_t>{} : ids_read(tmp / "hf.ids"), rows);
    if (!ref.empty()) {
      rows.push_back({"tokenizers encode(text)", what, 1, ref["hf_encode_s"], ref["hf_tokens"], ""});
      rows.push_back({"tokenizers encode_batch(lines)", what, int(ref["cpus"]), ref["hf_batch_s"], 0, ""});
    }
  } else if (skipped.empty()) {
    skipped = "no --bpe and no .venv to train one: the byte-level BPE rows are skipped";
  }
  const double mb = double(text.size()) / 1e6;
  if (o.json) {
    nlohmann::json j = {{"text_mb", mb}, {"reps", o.reps}, {"rows", nlohmann::json::array()}};
    if (!skipped.empty()) j["skipped"] = skipped;
    if (!ref.empty()) j["tokenizers_version"] = ref["tokenizers"], j["sentencepiece_version"] = ref["sentencepiece"];
    for (const Row& r : rows)
      j["rows"].push_back({{"engine", r.engine},
                           {"tokenizer", r.tokenizer},
                           {"threads", r.threads},
                           {"seconds", r.seconds},
                           {"mb_per_s", mb / r.seconds},
                           {"tokens", r.tokens},
                           {"same_ids_as_reference", r.same}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("tokenize: %.1f MB of %s, best of %d; 'same ids' compares agoq's with the reference's below it\n", mb,
              o.text.empty() ? (fs::exists(src / "data" / "janeaustenr") ? "data/janeaustenr" : "synthetic text")
                             : o.text.c_str(),
              o.reps);
  if (!skipped.empty()) std::printf("(%s)\n", skipped.c_str());
  std::printf("\n%-31s %-28s %7s %9s %10s %8s\n", "engine", "tokenizer", "threads", "MB/s", "tokens", "same ids");
  for (const Row& r : rows)
    std::printf("%-31s %-28s %7d %9.2f %10s %8s\n", r.engine.c_str(), r.tokenizer.c_str(), r.threads, mb / r.seconds,
                r.tokens ? std::to_string(r.tokens).c_str() : "-", r.same.c_str());
  if (!ref.empty()) {
    const auto mbps = [&](const char* engine, int threads) {
      for (const Row& r : rows)
        if (r.engine == engine && (threads == 0 || r.threads == threads)) return mb / r.seconds;
      return 0.0;
    };
    std::printf("\nagoq byte-level bpe / tokenizers encode(text): %.1fx (1 thread), %.1fx (%d threads)\n",
                mbps("agoq byte-level bpe", 1) / mbps("tokenizers encode(text)", 0),
                mbps("agoq byte-level bpe", 0) / mbps("tokenizers encode(text)", 0), omp_get_max_threads());
  }
}

const CliCommand kTokenize("bench", 95, [](CLI::App& bench) {
  static Options o;
  CLI::App* cmd = bench.add_subcommand("tokenize",
                                       "tokenizer MB/s: agoq's SentencePiece and byte-level BPE engines "
                                       "next to sentencepiece and HF tokenizers");
  cmd->add_option("--text", o.text,
                  "text to encode (.txt, folder or R data folder; default data/janeaustenr, "
                  "else synthetic)");
  cmd->add_option("--mb", o.mb, "MB of it to encode (repeated when shorter)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 4096.0));
  cmd->add_option("--bpe", o.bpe,
                  "a tokenizer.json (or its folder) for the byte-level BPE rows (default: one "
                  "tokenizers trains here)");
  cmd->add_option("--vocab-size", o.vocab, "pieces of the SentencePiece model trained here (as prepare's)")
      ->capture_default_str()
      ->check(CLI::Range(300, 100000));
  cmd->add_option("--reps", o.reps, "repetitions (the best is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--json", o.json, "print JSON instead of a table");
  cmd->callback([] { run(o); });
});

}  // namespace
}  // namespace agoq

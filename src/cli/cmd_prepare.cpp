// `agoq prepare`: text -> the tokenizer's files + train.bin + val.bin + meta.json (formats: docs/data-format.md). The
// tokenizer is trained here (SentencePiece BPE) or a model's own (--tokenizer: a file, a model folder, a GGUF file).
// --format prompt-completion: a JSON-lines file of examples (data/examples.h), packed for --seq with loss flags.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/folder_cleanup.h"
#include "cli/path_flag.h"
#include "core/atomic_file.h"
#include "core/dir_lock.h"
#include "core/error.h"
#include "core/paths.h"
#include "data/corpus.h"
#include "data/examples.h"
#include "data/prepared_dir.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "formats/model_source.h"

namespace agoq {
namespace {

namespace fs = std::filesystem;

// The longest --seq examples are packed for (2^24): beyond any model's context, and a padded window of it fits in
// memory (5 bytes a token) and in the token file's window field; `--seq + 1` cannot overflow.
constexpr int kPrepareSeqMost = 1 << 24;

struct PrepareArgs {
  std::string input, out = "data/prepared", tokenizer;
  int vocab_size = 4096;
  bool vocab_given = false;
  double val_fraction = 0.05;
  int64_t max_chars = 0;
  bool overwrite = false;
  std::string format = "text";  // or "prompt-completion"
  int seq = 0;                  // prompt-completion: the windows are seq + 1 tokens
  std::string overlong = "refuse";
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Byte offset of the first `chars` code points of s.
size_t utf8_prefix_bytes(std::string_view s, uint64_t chars) {
  uint64_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if ((uint8_t(s[i]) & 0xC0) != 0x80 && seen++ == chars) return i;
  return s.size();
}

// The tokenizer, trained on (a prefix of) the corpus or loaded from --tokenizer.
struct PreparedTokenizer {
  Tokenizer tok;
  size_t train_bytes = 0;  // bytes of text it was trained on (0 when loaded)
  double seconds = 0;
};

PreparedTokenizer prepare_tokenizer(const PrepareArgs& a, const Corpus& corpus) {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedTokenizer p;
  if (a.tokenizer.empty()) {
    TokenizerTrainOptions opt;
    opt.vocab_size = a.vocab_size;
    opt.max_bytes = a.max_chars > 0 ? utf8_prefix_bytes(corpus.text, uint64_t(a.max_chars)) : 0;
    p.train_bytes = opt.max_bytes ? std::min(opt.max_bytes, corpus.text.size()) : corpus.text.size();
    if (p.train_bytes > (size_t(16) << 20)) {
      std::printf("tokenizer: training a %d-piece BPE vocabulary on %zu bytes (--max-chars N trains on fewer)...\n",
                  a.vocab_size, p.train_bytes);
      std::fflush(stdout);
    }
    try {
      p.tok = Tokenizer::train(corpus.text, opt);
    } catch (const Error& e) {
      fail("--input ", a.input, ": ", e.what());
    }
  } else {
    p.tok = tokenizer_open(a.tokenizer);
  }
  p.seconds = seconds_since(t0);
  const auto vocab = uint32_t(p.tok.vocab_size());
  AGOQ_CHECK(!a.vocab_given || int64_t(vocab) == a.vocab_size, "--vocab-size ", a.vocab_size, " but tokenizer ",
             a.tokenizer.empty() ? std::string("training") : a.tokenizer, " gives vocab ", vocab);
  if (a.tokenizer.empty())
    std::printf("tokenizer: trained BPE, vocab %u, on %zu bytes in %.1f s\n", vocab, p.train_bytes, p.seconds);
  else std::printf("tokenizer: %s, vocab %u\n", a.tokenizer.c_str(), vocab);
  return p;
}

std::vector<std::string> tokenizer_file_names(const Tokenizer& tok) {
  std::vector<std::string> names;
  for (const auto& [name, bytes] : tok.files()) names.push_back(name);
  return names;
}

// meta.json: where the data came from and how it was split (docs/data-format.md).
nlohmann::json prepare_meta(const PrepareArgs& a, const Corpus& corpus, size_t chars, const PreparedTokenizer& t,
                            size_t tokens, uint64_t n_train, bool exact, double total_s) {
  const auto vocab = uint32_t(t.tok.vocab_size());
  return {
      {"source", a.input},
      {"source_kind", corpus.kind},
      {"documents", corpus.documents},
      {"chars", chars},
      {"bytes", corpus.text.size()},
      {"tokens", tokens},
      {"vocab_size", vocab},
      {"token_dtype", token_dtype_for_vocab(vocab) == 2 ? "uint16" : "uint32"},
      {"val_fraction", a.val_fraction},
      {"train_tokens", n_train},
      {"val_tokens", tokens - n_train},
      {"round_trip_exact", exact},
      {"tokenizer",
       {{"files", tokenizer_file_names(t.tok)},
        {"trained", a.tokenizer.empty()},
        {"source", a.tokenizer.empty() ? std::string("trained here") : a.tokenizer},
        {"type", t.tok.kind_name()},
        {"identity", t.tok.identity()},
        {"training_bytes", t.train_bytes},
        {"seconds", t.seconds}}},
      {"files", {{"train", "train.bin"}, {"val", "val.bin"}}},
      {"seconds", total_s},
  };
}

// Examples, packed: train.bin from the first of them, val.bin from the last --val-fraction (at least one when the
// fraction is not 0), each in windows of --seq + 1 tokens.
void prepare_examples(const PrepareArgs& a, std::chrono::steady_clock::time_point t0) {
  const PreparedTokenizer t = prepare_tokenizer(a, Corpus{});
  const ExamplesRead read = examples_read_jsonl(
      a.input, t.tok, a.seq, a.overlong == "truncate" ? OverlongExamples::truncate : OverlongExamples::refuse);
  const size_t n = read.examples.size();
  const size_t n_val = a.val_fraction > 0 ? std::max<size_t>(1, size_t(std::llround(double(n) * a.val_fraction))) : 0;
  AGOQ_CHECK(n_val < n, "--input ", a.input, ": ", n, " example", n == 1 ? "" : "s",
             " leave none for training after --val-fraction ", a.val_fraction);
  const std::span<const Example> all(read.examples);
  const int32_t pad = t.tok.eos_id();  // never counted; any id would do, EOS reads naturally when decoded
  const PackedExamples train = examples_pack(all.first(n - n_val), a.seq + 1, pad);
  const PackedExamples val = examples_pack(all.subspan(n - n_val), a.seq + 1, pad);
  const fs::path out(a.out), staging = prepared_dir_staging(out);
  // A prepare that fails before its commit (a full disk, a refused input) leaves no half-written set behind. From
  // the commit on, the staging folder is what says that a replacement was interrupted (data/prepared_dir.h): kept.
  FolderCleanup cleanup(staging);
  const auto vocab = uint32_t(t.tok.vocab_size());
  t.tok.save_files(staging.string());
  token_file_write((staging / "train.bin").string(), train.tokens, vocab, train.flags, uint32_t(a.seq + 1));
  token_file_write((staging / "val.bin").string(), val.tokens, vocab, val.flags, uint32_t(a.seq + 1));
  auto part = [](const PackedExamples& p, size_t examples) {
    return nlohmann::json{{"examples", examples},
                          {"windows", p.windows},
                          {"tokens", p.tokens.size()},
                          {"loss_tokens", p.loss_tokens},
                          {"pad_tokens", p.pad_tokens}};
  };
  const double total_s = seconds_since(t0);
  const nlohmann::json meta = {
      {"source", a.input},
      {"source_kind", read.chatml ? "jsonl messages (ChatML)" : "jsonl prompt-completion"},
      {"format", "prompt-completion"},
      {"seq", a.seq},
      {"vocab_size", vocab},
      {"token_dtype", token_dtype_for_vocab(vocab) == 2 ? "uint16" : "uint32"},
      {"val_fraction", a.val_fraction},
      {"truncated_examples", read.truncated},
      {"train", part(train, n - n_val)},
      {"val", part(val, n_val)},
      {"tokenizer",
       {{"files", tokenizer_file_names(t.tok)},
        {"trained", false},
        {"source", a.tokenizer},
        {"type", t.tok.kind_name()},
        {"identity", t.tok.identity()}}},
      {"files", {{"train", "train.bin"}, {"val", "val.bin"}}},
      {"seconds", total_s},
  };
  atomic_file_write((staging / "meta.json").string(), meta.dump(2) + "\n");
  cleanup.keep();
  prepared_dir_commit(out);
  std::printf(
      "examples: %zu (%zu truncated): train %zu in %zu windows of %d tokens (%zu counted in the loss, %zu "
      "padding), val %zu in %zu windows\n",
      n, read.truncated, n - n_val, train.windows, a.seq + 1, train.loss_tokens, train.pad_tokens, n_val, val.windows);
  std::printf("wrote %s in %.1f s\n", a.out.c_str(), total_s);
}

// The set's files must not be what this prepare reads: --out is not the --tokenizer's or the --input's folder, and
// none of the files it writes there is one of them.
void prepare_check_out_not_input(const PrepareArgs& a) {
  for (const char* name : kPreparedFiles) {
    const std::string file = (fs::path(a.out) / name).string();
    for (const auto& [flag, in] : {std::pair{"--tokenizer", a.tokenizer}, std::pair{"--input", a.input}})
      AGOQ_CHECK(!path_within(file, in), "--out ", a.out, " would write ", name, " into ", flag, " ", in,
                 ", which this command reads: it never writes over its input; choose another --out");
  }
}

void prepare_run(const PrepareArgs& a) {
  AGOQ_CHECK(a.val_fraction >= 0 && a.val_fraction < 1, "--val-fraction must be in [0, 1) (got ", a.val_fraction, ")");
  AGOQ_CHECK(a.max_chars >= 0, "--max-chars must be >= 0 (got ", a.max_chars, ")");
  const bool examples = a.format == "prompt-completion";
  AGOQ_CHECK(!examples || !a.tokenizer.empty(),
             "--format prompt-completion needs --tokenizer (the model's own: its "
             "file, folder or GGUF)");
  AGOQ_CHECK(!examples || a.seq >= 1,
             "--format prompt-completion needs --seq N (the training's): examples are "
             "packed into windows of N + 1 tokens");
  AGOQ_CHECK(examples || a.seq == 0, "--seq is for --format prompt-completion (a text corpus is one stream)");
  AGOQ_CHECK(a.seq <= kPrepareSeqMost, "--seq ", a.seq, " is more than agoq packs examples for (at most ",
             kPrepareSeqMost, " tokens a window; each window is padded in memory to --seq + 1 tokens)");
  const auto t0 = std::chrono::steady_clock::now();
  // The folder is this prepare's until it ends; an earlier set is replaced only when asked (checkpoints made from
  // it resume only with its tokens).
  prepare_check_out_not_input(a);
  const DirLock lock = DirLock::acquire(a.out, "--out");
  prepared_dir_check_replaceable(a.out, a.overwrite);
  if (examples) return prepare_examples(a, t0);
  const Corpus corpus = corpus_read(a.input);
  const size_t chars = utf8_length(corpus.text);
  std::printf("prepare: %s (%s, %zu document%s): %zu chars, %zu bytes\n", a.input.c_str(), corpus.kind.c_str(),
              corpus.documents.size(), corpus.documents.size() == 1 ? "" : "s", chars, corpus.text.size());
  std::fflush(stdout);  // each status line as it happens (a long input takes minutes)
  const PreparedTokenizer t = prepare_tokenizer(a, corpus);
  std::fflush(stdout);

  const auto t_enc = std::chrono::steady_clock::now();
  // Lossless by construction unless the input had invalid UTF-8 (SentencePiece replaces it); say so if it differs.
  bool exact = false;
  // A model's own tokenizer gives it its BOS first, as it was trained (agoq's trained tokenizers add none).
  const bool progress = corpus.text.size() > (size_t(64) << 20);
  std::vector<int32_t> ids = t.tok.encode(corpus.text, progress, &exact);
  if (t.tok.add_bos() && t.tok.bos_id() >= 0) ids.insert(ids.begin(), t.tok.bos_id());
  const double enc_s = seconds_since(t_enc);
  AGOQ_CHECK(ids.size() >= 2, "input ", a.input, ": only ", ids.size(), " token(s) after encoding");

  const auto n_val = uint64_t(std::llround(double(ids.size()) * a.val_fraction));
  const uint64_t n_train = ids.size() - n_val;
  AGOQ_CHECK(n_train >= 1, "--val-fraction ", a.val_fraction, " leaves no training tokens");
  const std::span<const int32_t> all(ids);

  const fs::path out(a.out), staging = prepared_dir_staging(out);
  FolderCleanup cleanup(staging);  // (as for examples above: kept from the commit on)
  const auto vocab = uint32_t(t.tok.vocab_size());
  t.tok.save_files(staging.string());
  token_file_write((staging / "train.bin").string(), all.first(n_train), vocab);
  token_file_write((staging / "val.bin").string(), all.subspan(n_train), vocab);
  const double total_s = seconds_since(t0);
  atomic_file_write((staging / "meta.json").string(),
                    prepare_meta(a, corpus, chars, t, ids.size(), n_train, exact, total_s).dump(2) + "\n");
  cleanup.keep();
  prepared_dir_commit(out);

  std::printf("tokens: %zu (%.2f chars/token), encoded in %.1f s, round trip %s\n", ids.size(),
              double(chars) / double(ids.size()), enc_s, exact ? "exact" : "NOT exact (invalid UTF-8 in input?)");
  std::printf("split: train %llu tokens, val %llu tokens (%.1f%%)\n", (unsigned long long)n_train,
              (unsigned long long)n_val, 100.0 * double(n_val) / double(ids.size()));
  std::string files;
  for (const std::string& name : tokenizer_file_names(t.tok)) files += name + ",";
  std::printf("wrote %s/{%strain.bin,val.bin,meta.json} in %.1f s\n", a.out.c_str(), files.c_str(), total_s);
}

const CliCommand kPrepare("", 10, [](CLI::App& app) {
  auto a = std::make_shared<PrepareArgs>();
  CLI::App* cmd =
      app.add_subcommand("prepare", "tokenize a corpus: train a BPE tokenizer, write train/val token files");
  cmd->add_option("--input", a->input, "a .txt file, a folder of .txt files, or an R data folder (data/janeaustenr)")
      ->required()
      ->check(cli_path());
  cmd->add_option("--out", a->out, "output folder")->capture_default_str()->check(cli_path());
  CLI::Option* vocab =
      cmd->add_option("--vocab-size", a->vocab_size, "tokenizer vocabulary size")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "use this tokenizer instead of training one: tokenizer.model, tokenizer.json, a model folder or a "
                  "GGUF file")
      ->check(cli_path());
  cmd->add_option("--val-fraction", a->val_fraction, "the last fraction of the token stream held out for validation")
      ->capture_default_str();
  cmd->add_option("--max-chars", a->max_chars, "train the tokenizer on at most the first N chars (0 = all)");
  cmd->add_flag("--overwrite", a->overwrite, "replace the prepared corpus --out already holds");
  cmd->add_option("--format", a->format,
                  "text: a corpus (one token stream); prompt-completion: a .jsonl of "
                  "{\"prompt\", \"completion\"} or {\"messages\"} examples, the loss on completions only")
      ->check(CLI::IsMember({"text", "prompt-completion"}))
      ->capture_default_str();
  cmd->add_option("--seq", a->seq, "prompt-completion: the --seq the data will be trained with");
  cmd->add_option("--overlong", a->overlong,
                  "prompt-completion: an example longer than --seq + 1 tokens is "
                  "refused, or its completion cut")
      ->check(CLI::IsMember({"refuse", "truncate"}))
      ->capture_default_str();
  cmd->callback([a, vocab] {
    a->vocab_given = vocab->count() > 0;
    prepare_run(*a);
  });
});

}  // namespace
}  // namespace agoq

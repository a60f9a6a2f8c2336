// Token datasets in memory and the batch loader: random contiguous windows of T+1 tokens for training
// (reproducible from a seed, resumable exactly from state()), fixed evenly spaced windows for validation. A
// dataset of packed prompt/completion examples (token_file.h, version 2) is drawn window by window instead, its
// prompt tokens' targets masked (-1) and each row's document start given for attention's document masking.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/rng.h"

namespace agoq {

// A token file held in memory in its compact dtype (uint16 for vocabularies up to 65536, else int32), tracked as
// workspace memory with tag "data".
class TokenDataset {
 public:
  TokenDataset() = default;
  // Reads and validates a token file (see token_file.h).
  static TokenDataset load(const std::string& path);
  // From tokens in memory (tests, tools); `name` stands in for the path in messages.
  // flags (one per token, token_file.h) and window as a version 2 file holds them.
  static TokenDataset from_tokens(std::span<const int32_t> tokens, uint32_t vocab_size, std::string name = "<memory>",
                                  std::span<const uint8_t> flags = {}, uint32_t window = 0);

  uint64_t size() const { return count_; }
  uint32_t vocab_size() const { return vocab_; }
  uint32_t max_token() const { return max_token_; }
  const std::string& path() const { return path_; }
  int32_t operator[](uint64_t i) const { return u16_.empty() ? i32_[i] : int32_t(u16_[i]); }
  // Packed examples: the windows' length (T+1 of the --seq they were packed for), 0 for a stream; whether the
  // tokens carry loss and document flags (kTokenFlag*), and token i's.
  uint32_t window() const { return window_; }
  bool has_flags() const { return !flags_.empty(); }
  uint8_t flags(uint64_t i) const { return flags_[i]; }
  // Copies tokens [start, start + n) as int32.
  void copy(uint64_t start, size_t n, int32_t* out) const;
  // Errors unless the file was made for a model of `model_vocab` tokens (same vocab_size, every id below it).
  // padded: a pretrained model's vocabulary may have rows past the tokenizer's (padding), never fewer.
  void check_vocab(int64_t model_vocab, bool padded = false) const;

 private:
  Buffer<uint16_t> u16_;
  Buffer<int32_t> i32_;
  Buffer<uint8_t> flags_;
  uint64_t count_ = 0;
  uint32_t vocab_ = 0, max_token_ = 0, window_ = 0;
  std::string path_;
};

class DataLoader {
 public:
  // Errors when the dataset is shorter than T+1 tokens, or was packed for another T. The dataset must outlive the
  // loader.
  DataLoader(const TokenDataset& data, int T, uint64_t seed);

  int seq_len() const { return T_; }
  const TokenDataset& dataset() const { return *data_; }

  // B windows with starts uniform in [0, size - T - 1] (packed: window starts, uniform over the windows):
  // inputs[b*T + t] = x[s_b + t], targets = x[s_b + t + 1], or -1 where that target does not count in the loss (a
  // prompt token, or the first of an example). doc_start (B*T, with flags; may be null): each row's document start
  // within its sequence (model/attention.h).
  void next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* doc_start = nullptr);

  // Everything needed to continue the exact window sequence (with checks that it is resumed on the same data).
  struct State {
    Rng::State rng{};
    uint64_t batches = 0;  // next_batch calls so far
    uint64_t windows = 0;  // windows drawn so far
    int T = 0;
    uint64_t data_size = 0;
    // One line of numbers, for checkpoint metadata.
    std::string to_string() const;
    static State from_string(std::string_view s);
  };
  State state() const;
  void set_state(const State& s);  // errors if saved for another T or dataset size

  // Validation: a fixed set of windows, evenly spaced over the dataset; independent of the training stream.
  // max_batches <= 0 means as many batches as fit without overlap (at least one).
  int val_batch_count(int B, int max_batches = 0) const;
  void val_batch(int B, int max_batches, int index, int32_t* inputs, int32_t* targets,
                 int32_t* doc_start = nullptr) const;
  // The window starts val_batch uses (B * val_batch_count of them).
  std::vector<uint64_t> val_window_starts(int B, int max_batches = 0) const;

 private:
  const TokenDataset* data_;
  int T_;
  Rng rng_;
  uint64_t batches_ = 0, windows_ = 0;
  void fill_window(uint64_t start, int32_t* in, int32_t* tgt, int32_t* doc_start) const;
  uint64_t window_count() const;            // windows a start may begin (packed: whole windows)
  uint64_t window_start(uint64_t i) const;  // where window i begins
};

}  // namespace agoq

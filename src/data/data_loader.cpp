#include "data/data_loader.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "data/token_file.h"

namespace agoq {

namespace {
// Data windows draw from their own Philox stream, so sharing a seed with weight init never correlates them.
constexpr uint64_t kDataRngStream = 0x64617461;  // "data"

// Window i of W spread evenly over starts 0 .. last (first and last window included).
uint64_t spaced_start(uint64_t i, uint64_t W, uint64_t last) {
  return W == 1 ? 0 : uint64_t((unsigned __int128)i * last / (W - 1));
}
}  // namespace

TokenDataset TokenDataset::load(const std::string& path) {
  const TokenFileHeader h = token_file_read_header(path);
  TokenDataset d;
  d.count_ = h.count;
  d.vocab_ = h.vocab_size;
  d.path_ = path;
  d.window_ = h.window;
  if (h.has_flags()) d.flags_ = Buffer<uint8_t>(h.count, MemCategory::workspace, "data");
  if (h.dtype == 2) {
    d.u16_ = Buffer<uint16_t>(h.count, MemCategory::workspace, "data");
    token_file_read_payload(path, h, d.u16_.data(), d.flags_.data());
    for (uint16_t t : d.u16_) d.max_token_ = std::max<uint32_t>(d.max_token_, t);
  } else {
    d.i32_ = Buffer<int32_t>(h.count, MemCategory::workspace, "data");
    token_file_read_payload(path, h, d.i32_.data(), d.flags_.data());
    for (int32_t t : d.i32_) {
      AGOQ_CHECK(t >= 0, "token file ", path, ": negative token ", t);
      d.max_token_ = std::max<uint32_t>(d.max_token_, uint32_t(t));
    }
  }
  AGOQ_CHECK(d.count_ == 0 || d.max_token_ < d.vocab_, "token file ", path, ": holds token id ", d.max_token_,
             " but its header says vocab size ", d.vocab_, " (corrupt file?)");
  return d;
}

TokenDataset TokenDataset::from_tokens(std::span<const int32_t> tokens, uint32_t vocab_size, std::string name,
                                       std::span<const uint8_t> flags, uint32_t window) {
  TokenDataset d;
  d.count_ = tokens.size();
  d.vocab_ = vocab_size;
  d.path_ = std::move(name);
  AGOQ_CHECK(flags.empty() || flags.size() == tokens.size(), d.path_, ": ", flags.size(), " flags for ", tokens.size(),
             " tokens");
  AGOQ_CHECK(window == 0 || (!flags.empty() && window >= 2 && tokens.size() % window == 0), d.path_, ": ",
             tokens.size(), " tokens do not fill windows of ", window);
  d.window_ = window;
  if (!flags.empty()) {
    d.flags_ = Buffer<uint8_t>(flags.size(), MemCategory::workspace, "data");
    std::copy(flags.begin(), flags.end(), d.flags_.data());
  }
  const bool small = token_dtype_for_vocab(vocab_size) == 2;
  if (small) d.u16_ = Buffer<uint16_t>(tokens.size(), MemCategory::workspace, "data");
  else d.i32_ = Buffer<int32_t>(tokens.size(), MemCategory::workspace, "data");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    AGOQ_CHECK(t >= 0 && uint32_t(t) < vocab_size, d.path_, ": token ", t, " at position ", i,
               " is outside the vocabulary (size ", vocab_size, ")");
    if (small) d.u16_[i] = uint16_t(t);
    else d.i32_[i] = t;
    d.max_token_ = std::max(d.max_token_, uint32_t(t));
  }
  return d;
}

void TokenDataset::copy(uint64_t start, size_t n, int32_t* out) const {
  AGOQ_CHECK(start <= count_ && n <= count_ - start, path_, ": window [", start, ", ", start + n, ") is outside the ",
             count_, " tokens");
  if (u16_.empty()) std::copy_n(i32_.data() + start, n, out);
  else std::copy_n(u16_.data() + start, n, out);
}

void TokenDataset::check_vocab(int64_t model_vocab, bool padded) const {
  AGOQ_CHECK(padded ? int64_t(vocab_) <= model_vocab : int64_t(vocab_) == model_vocab, "token file ", path_,
             " was made with vocab size ", vocab_, " but the model has vocab size ", model_vocab);
  AGOQ_CHECK(count_ == 0 || int64_t(max_token_) < model_vocab, "token file ", path_, " holds token id ", max_token_,
             ", outside the model's vocab size ", model_vocab);
}

DataLoader::DataLoader(const TokenDataset& data, int T, uint64_t seed)
    : data_(&data), T_(T), rng_(seed, kDataRngStream) {
  AGOQ_CHECK(T >= 1, "sequence length T must be >= 1 (got ", T, ")");
  AGOQ_CHECK(uint64_t(T) + 1 <= data.size(), "sequence length T (=", T, ") needs at least T+1 tokens but ", data.path(),
             " has ", data.size());
  AGOQ_CHECK(data.window() == 0 || data.window() == uint32_t(T) + 1, data.path(), " packs its examples for --seq ",
             data.window() - 1, ", not ", T, " (train with --seq ", data.window() - 1, ", or prepare again with --seq ",
             T, ")");
}

uint64_t DataLoader::window_count() const {
  return data_->window() ? data_->size() / data_->window() : data_->size() - uint64_t(T_);
}

uint64_t DataLoader::window_start(uint64_t i) const { return data_->window() ? i * data_->window() : i; }

void DataLoader::fill_window(uint64_t start, int32_t* in, int32_t* tgt, int32_t* doc_start) const {
  data_->copy(start, size_t(T_), in);
  data_->copy(start + 1, size_t(T_), tgt);
  if (!data_->has_flags()) return;
  for (int t = 0; t < T_; ++t) {
    const uint8_t next = data_->flags(start + t + 1);
    if (!(next & kTokenFlagLoss) || (next & kTokenFlagDocStart)) tgt[t] = -1;  // no prediction across examples
  }
  if (doc_start)
    for (int t = 0; t < T_; ++t)
      doc_start[t] = t == 0 || (data_->flags(start + t) & kTokenFlagDocStart) ? t : doc_start[t - 1];
}

void DataLoader::next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* doc_start) {
  AGOQ_CHECK(B >= 1, "batch size B must be >= 1 (got ", B, ")");
  for (int b = 0; b < B; ++b)
    fill_window(window_start(rng_.below(window_count())), inputs + size_t(b) * T_, targets + size_t(b) * T_,
                doc_start ? doc_start + size_t(b) * T_ : nullptr);
  ++batches_;
  windows_ += uint64_t(B);
}

DataLoader::State DataLoader::state() const {
  return {.rng = rng_.state(), .batches = batches_, .windows = windows_, .T = T_, .data_size = data_->size()};
}

void DataLoader::set_state(const State& s) {
  AGOQ_CHECK(s.T == T_ && s.data_size == data_->size(), "data loader state was saved for T=", s.T, " over ",
             s.data_size, " tokens, but this loader has T=", T_, " over ", data_->size(), " tokens (", data_->path(),
             ")");
  rng_.set_state(s.rng);
  batches_ = s.batches;
  windows_ = s.windows;
}

std::string DataLoader::State::to_string() const {
  std::ostringstream os;
  os << "v1 " << rng.key << ' ' << rng.stream << ' ' << rng.counter << ' ' << rng.pos;
  for (uint32_t w : rng.block) os << ' ' << w;
  os << ' ' << batches << ' ' << windows << ' ' << T << ' ' << data_size;
  return os.str();
}

DataLoader::State DataLoader::State::from_string(std::string_view text) {
  std::istringstream is{std::string(text)};
  std::string tag;
  State s;
  is >> tag >> s.rng.key >> s.rng.stream >> s.rng.counter >> s.rng.pos;
  for (uint32_t& w : s.rng.block) is >> w;
  is >> s.batches >> s.windows >> s.T >> s.data_size;
  std::string extra;
  AGOQ_CHECK(tag == "v1" && is && !(is >> extra) && s.rng.pos <= 4, "data loader state '", text, "' is malformed");
  return s;
}

int DataLoader::val_batch_count(int B, int max_batches) const {
  AGOQ_CHECK(B >= 1, "batch size B must be >= 1 (got ", B, ")");
  const uint64_t windows = data_->window() ? window_count() : (data_->size() - 1) / uint64_t(T_);  // disjoint
  const uint64_t fit = std::max<uint64_t>(1, windows / uint64_t(B));
  const uint64_t n = max_batches > 0 ? std::min<uint64_t>(fit, uint64_t(max_batches)) : fit;
  return int(std::min<uint64_t>(n, 1u << 30));
}

std::vector<uint64_t> DataLoader::val_window_starts(int B, int max_batches) const {
  const uint64_t W = uint64_t(val_batch_count(B, max_batches)) * uint64_t(B);
  std::vector<uint64_t> starts(W);
  for (uint64_t i = 0; i < W; ++i) starts[i] = window_start(spaced_start(i, W, window_count() - 1));
  return starts;
}

void DataLoader::val_batch(int B, int max_batches, int index, int32_t* inputs, int32_t* targets,
                           int32_t* doc_start) const {
  const int n = val_batch_count(B, max_batches);
  AGOQ_CHECK(index >= 0 && index < n, "validation batch ", index, " out of range (", n, " batches)");
  const uint64_t W = uint64_t(n) * uint64_t(B);
  for (int b = 0; b < B; ++b) {
    const uint64_t i = spaced_start(uint64_t(index) * uint64_t(B) + uint64_t(b), W, window_count() - 1);
    fill_window(window_start(i), inputs + size_t(b) * T_, targets + size_t(b) * T_,
                doc_start ? doc_start + size_t(b) * T_ : nullptr);
  }
}

}  // namespace agoq

// The byte-level BPE engine, stage by stage as tokenizers runs it: added tokens (tokenizer_added.cpp), the
// pre-tokenizer (ByteLevel's prefix space, then each split regex over each piece of the one before), the model
// (GPT-2's byte-to-unicode alphabet, merges by rank), the ByteLevel decoder. Large texts are split in parallel in
// a way that gives exactly a whole-text scan's pieces (encode_segment).
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer_added.h"
#include "data/tokenizer_engine.h"
#include "data/tokenizer_json.h"
#include "data/tokenizer_normalizer.h"
#include "data/tokenizer_regex.h"
#include "data/utf8.h"

namespace agoq {

namespace {

// ---- GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest for 256 + n ----

struct ByteAlphabet {
  uint32_t cp[256];
  int16_t byte_of[512];  // code point -> byte; -1 for none (every mapped code point is below 512)
  ByteAlphabet() {
    std::fill(std::begin(byte_of), std::end(byte_of), int16_t(-1));
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? uint32_t(b) : 256 + n++;
      byte_of[cp[b]] = int16_t(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

// What tokenizers' ByteLevel decoder makes of one token: its bytes when every character is in the alphabet, else
// the token's own UTF-8 (an added token such as "<|endoftext|>" reads the same either way).
// *in_alphabet: whether it was the former (only such a token can be what the model makes of a piece).
std::string token_bytes(std::string_view token, bool* in_alphabet) {
  const ByteAlphabet& a = byte_alphabet();
  std::string out;
  size_t len;
  *in_alphabet = false;
  for (size_t i = 0; i < token.size(); i += len) {
    const uint32_t cp = utf8_decode(token, i, &len);
    if (cp >= 512 || a.byte_of[cp] < 0) return std::string(token);
    out += char(a.byte_of[cp]);
  }
  *in_alphabet = true;
  return out;
}

// ---- merges: (left id, right id) -> (rank, merged id), open addressing ----

class MergeTable {
 public:
  struct Merge {
    int32_t rank = -1, id = -1;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {});
    mask_ = cap - 1;
  }
  void put(int32_t a, int32_t b, Merge m) {  // a pair listed twice keeps its later rank, as tokenizers' map does
    const uint64_t k = key(a, b);
    size_t i = slot(k);
    while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask_;
    keys_[i] = k, vals_[i] = m;
  }
  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  size_t mask_ = 0;
  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A short-string hash: eight bytes at a time, multiply and fold.
inline uint64_t bytes_hash(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  if (i < s.size()) std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

// Open addressing from bytes (held elsewhere: the vocabulary's decoded tokens, or the text) to two numbers. The hot
// lookups of encoding, where std::unordered_map's node chasing cost a quarter of the time.
class BytesMap {
 public:
  struct Entry {
    uint64_t hash = 0;
    const char* key = nullptr;  // nullptr: empty
    uint32_t len = 0, a = 0, b = 0;
  };
  size_t size() const { return size_; }
  void clear() {
    slots_.assign(slots_.size(), Entry{});
    size_ = 0;
  }
  const Entry* find(std::string_view k, uint64_t h) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (!e.key) return nullptr;
      if (e.hash == h && e.len == k.size() && std::memcmp(e.key, k.data(), k.size()) == 0) return &e;
    }
  }
  void put(std::string_view k, uint64_t h, uint32_t a, uint32_t b) {  // k not present
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = h & mask_;
    while (slots_[i].key) i = (i + 1) & mask_;
    slots_[i] = {h, k.data() ? k.data() : "", uint32_t(k.size()), a, b};
    ++size_;
  }

 private:
  std::vector<Entry> slots_;
  size_t mask_ = 0, size_ = 0;
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, 2 * old.size()), Entry{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Entry& e : old)
      if (e.key) put({e.key, e.len}, e.hash, e.a, e.b);
  }
};

// The ids of pieces already encoded in this call, by their bytes (which live as long as the call).
struct PieceCache {
  BytesMap index;  // piece -> [a, a + b) in pool
  std::vector<int32_t> pool;
};
constexpr size_t kCachePieceMost = 64;  // longer pieces are rare: not cached
constexpr size_t kCacheEntriesMost = 1 << 18;

// One parallel chunk's scan of a segment with the first split regex (encode_segment).
struct ChunkScan {
  std::vector<int32_t> ids;
  std::vector<std::pair<size_t, size_t>> ends;  // (a match's end, ids.size() then), near the chunk's start and end
  size_t scan_end = 0;                          // the last match's end
  bool complete = false;                        // reached the segment's end
};
constexpr size_t kParallelLeast = 1 << 20;  // segments shorter than this are scanned by one thread
constexpr size_t kSyncWindow = 1 << 16;     // a chunk's scan must meet the next chunk's within this many bytes
constexpr size_t kOverlapBytes = 4096;      // how far a chunk's scan runs into the next chunk
constexpr int kOverlapMatches = 16;

class BpeEngine final : public TokenizerEngine {
 public:
  BpeEngine(BpeSpec spec, TokenizerFiles files, const std::string& what);
  TokenizerKind kind() const override { return TokenizerKind::byte_bpe; }
  const std::string& serialized() const override {
    static const std::string kNone;
    return kNone;
  }
  std::vector<int32_t> encode(std::string_view text, bool progress, bool* round_trips) const override;
  std::string decode(std::span<const int32_t> ids) const override {
    std::string bytes;
    for (const int32_t id : ids) bytes += id_bytes_[id];
    return utf8_valid(bytes) ? bytes : utf8_replace_invalid(bytes);  // tokenizers: String::from_utf8_lossy
  }
  int vocab_size() const override { return int(spec_.vocab.size()); }
  std::string piece(int id) const override { return spec_.vocab[id]; }
  int piece_id(std::string_view piece) const override {
    const auto it = token_id_.find(piece);
    return it == token_id_.end() ? -1 : it->second;
  }
  int unk_id() const override { return spec_.unk_id; }
  int bos_id() const override { return spec_.bos_id; }
  int eos_id() const override { return spec_.eos_id; }
  bool add_bos() const override { return spec_.add_bos; }
  bool add_eos() const override { return spec_.add_eos; }
  TokenizerFiles files() const override { return files_.empty() ? bpe_spec_to_json(spec_) : files_; }
  uint64_t identity_hash() const override;

 private:
  BpeSpec spec_;
  TokenizerFiles files_;
  std::string what_;
  int32_t byte_id_[256];               // each byte's character's id; -1 when the vocabulary lacks it
  std::vector<std::string> id_bytes_;  // what each id decodes to
  TokenMap token_id_;                  // token (in the alphabet) -> id
  BytesMap bytes_id_;                  // a vocabulary token's bytes (in id_bytes_) -> id (ignore_merges)
  MergeTable merges_;
  std::vector<SplitRegex> regexes_;
  Normalizer normalizer_;
  AddedTokenSplitter added_;

  void check_spec() const;
  void merge(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_long(std::vector<int32_t>& syms) const;
  void encode_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
  void split_piece(size_t stage, std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
  ChunkScan scan(std::string_view seg, size_t from, bool after_match, size_t stop_at, int extra, size_t keep_below,
                 PieceCache& cache) const;
  void encode_segment(std::string_view seg, std::vector<PieceCache>& caches, std::vector<int32_t>& out,
                      const std::function<void(size_t)>& report) const;
};

BpeEngine::BpeEngine(BpeSpec spec, TokenizerFiles files, const std::string& what)
    : spec_(std::move(spec)),
      files_(std::move(files)),
      what_(what),
      normalizer_(spec_.normalizer, what_),
      added_(spec_.added, normalizer_) {
  check_spec();
  for (size_t id = 0; id < spec_.vocab.size(); ++id)
    if (!spec_.vocab[id].empty()) token_id_.emplace(spec_.vocab[id], int32_t(id));  // the first id of a token
  std::vector<bool> is_added(spec_.vocab.size());
  for (const auto& a : spec_.added) is_added[a.id] = true;
  id_bytes_.resize(spec_.vocab.size());
  for (size_t id = 0; id < spec_.vocab.size(); ++id) {
    bool in_alphabet;
    id_bytes_[id] = token_bytes(spec_.vocab[id], &in_alphabet);
    const std::string_view b = id_bytes_[id];  // the first id of equal bytes, as token_id_ keeps
    if (spec_.ignore_merges && in_alphabet && !is_added[id] && !b.empty() && !bytes_id_.find(b, bytes_hash(b)))
      bytes_id_.put(b, bytes_hash(b), uint32_t(id), 0);
  }
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8_append(c, byte_alphabet().cp[b]);
    byte_id_[b] = piece_id(c);
  }
  merges_.reserve(spec_.merges.size());
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto& [a, b] = spec_.merges[r];
    const int32_t ia = piece_id(a), ib = piece_id(b), im = piece_id(a + b);
    AGOQ_CHECK(ia >= 0 && ib >= 0 && im >= 0, "tokenizer ", what_, ": merge ", r, " ('", a, " ", b, "'): '",
               ia < 0   ? a
               : ib < 0 ? b
                        : a + b,
               "' is not in the vocabulary");
    merges_.put(ia, ib, {int32_t(r), im});
  }
  for (size_t i = 0; i < spec_.split_regexes.size(); ++i)
    regexes_.emplace_back(spec_.split_regexes[i], "tokenizer " + what_ + ": split regex " + std::to_string(i));
}

void BpeEngine::check_spec() const {
  const size_t n = spec_.vocab.size();
  AGOQ_CHECK(n > 0, "tokenizer ", what_, ": the vocabulary is empty");
  AGOQ_CHECK(n < (size_t(1) << 31), "tokenizer ", what_, ": ", n, " tokens are more than int32 ids can name");
  for (size_t id = 0; id < n; ++id)
    AGOQ_CHECK(utf8_valid(spec_.vocab[id]), "tokenizer ", what_, ": token ", id, " is not valid UTF-8");
  for (size_t r = 0; r < spec_.merges.size(); ++r)
    AGOQ_CHECK(utf8_valid(spec_.merges[r].first) && utf8_valid(spec_.merges[r].second), "tokenizer ", what_, ": merge ",
               r, " is not valid UTF-8");
  for (const auto& a : spec_.added) {
    AGOQ_CHECK(a.id >= 0 && size_t(a.id) < n, "tokenizer ", what_, ": added token '", a.content, "' has id ", a.id,
               ", outside the ", n, "-token vocabulary");
    AGOQ_CHECK(spec_.vocab[a.id] == a.content, "tokenizer ", what_, ": added token '", a.content, "' has id ", a.id,
               ", which the vocabulary holds as '", spec_.vocab[a.id], "'");
  }
  const std::pair<const char*, int> specials[] = {
      {"bos", spec_.bos_id}, {"eos", spec_.eos_id}, {"unk", spec_.unk_id}, {"pad", spec_.pad_id}};
  for (const auto& [name, id] : specials)
    AGOQ_CHECK(id >= -1 && id < int64_t(n), "tokenizer ", what_, ": ", name, " id ", id, " is outside the ", n,
               "-token vocabulary");
  AGOQ_CHECK(!spec_.add_bos || spec_.bos_id >= 0, "tokenizer ", what_, ": add_bos is set but there is no BOS token");
  AGOQ_CHECK(!spec_.add_eos || spec_.eos_id >= 0, "tokenizer ", what_, ": add_eos is set but there is no EOS token");
  AGOQ_CHECK(!spec_.add_prefix_space || spec_.split_regexes.empty() ||
                 (spec_.split_regexes.size() == 1 && spec_.split_regexes[0] == kGpt2SplitRegex),
             "tokenizer ", what_, ": add_prefix_space with split regexes other than GPT-2's is not supported (the ",
             "prefix space is put before each part of the text, then split)");
}

// tokenizers' BPE::merge_word without dropout: each byte's character, then the lowest-ranked merge of two neighbours
// (the leftmost of equals) until none applies. A byte missing from the vocabulary is the unknown token, or dropped
// when there is none.
void BpeEngine::merge(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> syms, ranks;
  syms.clear();
  for (const char c : piece) {
    const int32_t id = byte_id_[uint8_t(c)];
    if (id >= 0) syms.push_back(id);
    else if (spec_.unk_id >= 0) syms.push_back(spec_.unk_id);
  }
  if (syms.size() > 48) {  // quadratic below, a heap above
    merge_long(syms);
    out.insert(out.end(), syms.begin(), syms.end());
    return;
  }
  const auto rank_of = [&](size_t i) {
    const MergeTable::Merge* m = merges_.find(syms[i], syms[i + 1]);
    return m ? m->rank : INT32_MAX;
  };
  ranks.clear();
  for (size_t i = 0; i + 1 < syms.size(); ++i) ranks.push_back(rank_of(i));
  while (!ranks.empty()) {
    const size_t best = size_t(std::min_element(ranks.begin(), ranks.end()) - ranks.begin());
    if (ranks[best] == INT32_MAX) break;
    syms[best] = merges_.find(syms[best], syms[best + 1])->id;
    syms.erase(syms.begin() + best + 1);
    ranks.erase(ranks.begin() + best);
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
    if (best < ranks.size()) ranks[best] = rank_of(best);
  }
  out.insert(out.end(), syms.begin(), syms.end());
}

// The same merges with a min-heap on (rank, position) over a linked list of symbols, as tokenizers' Word::merge_all.
void BpeEngine::merge_long(std::vector<int32_t>& syms) const {
  const int n = int(syms.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  using Entry = std::tuple<int32_t, int, int32_t>;  // rank, position, merged id
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  const auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeTable::Merge* m = merges_.find(syms[i], syms[next[i]])) heap.emplace(m->rank, i, m->id);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, i, id] = heap.top();
    heap.pop();
    if (!alive[i] || next[i] < 0) continue;
    const MergeTable::Merge* m = merges_.find(syms[i], syms[next[i]]);
    if (!m || m->id != id) continue;  // the pair has changed since it was pushed
    const int j = next[i];
    syms[i] = id;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  size_t k = 0;
  for (int i = 0; i < n; ++i)
    if (alive[i]) syms[k++] = syms[i];
  syms.resize(k);
}

void BpeEngine::encode_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const {
  const bool cached = piece.size() <= kCachePieceMost;
  const uint64_t h = bytes_hash(piece);
  if (cached) {
    if (const BytesMap::Entry* e = cache.index.find(piece, h)) {
      out.insert(out.end(), cache.pool.begin() + e->a, cache.pool.begin() + e->a + e->b);
      return;
    }
  }
  const size_t at = out.size();
  if (const BytesMap::Entry* e = spec_.ignore_merges ? bytes_id_.find(piece, h) : nullptr) out.push_back(int32_t(e->a));
  else merge(piece, out);
  if (!cached) return;
  if (cache.index.size() >= kCacheEntriesMost) cache.index.clear(), cache.pool.clear();
  cache.index.put(piece, h, uint32_t(cache.pool.size()), uint32_t(out.size() - at));
  cache.pool.insert(cache.pool.end(), out.begin() + at, out.end());
}

// Split regexes from `stage` on over one piece (each regex sees the piece alone, as tokenizers' Split does), then
// the model.
void BpeEngine::split_piece(size_t stage, std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const {
  if (stage == regexes_.size()) return encode_piece(piece, cache, out);
  size_t done = 0;
  regexes_[stage].scan(piece, 0, false, [&](size_t s, size_t e) {
    if (s > done) split_piece(stage + 1, piece.substr(done, s - done), cache, out);
    if (e > s) split_piece(stage + 1, piece.substr(s, e - s), cache, out);
    done = e;
    return true;
  });
  if (done < piece.size()) split_piece(stage + 1, piece.substr(done), cache, out);
}

// The first regex over seg from `from`, each piece through the later stages. Stops at the first match end at or
// past stop_at that has `extra` more after it (or at the segment's end); keeps the match ends below keep_below and
// from stop_at - (kOverlapBytes) on, which is where encode_segment looks for the chunks' meeting points.
ChunkScan BpeEngine::scan(std::string_view seg, size_t from, bool after_match, size_t stop_at, int extra,
                          size_t keep_below, PieceCache& cache) const {
  ChunkScan c;
  size_t done = from;
  int past = 0;
  bool stopped = false;
  const size_t keep_from = stop_at > kOverlapBytes ? stop_at - kOverlapBytes : 0;
  regexes_[0].scan(seg, from, after_match, [&](size_t s, size_t e) {
    if (s > done) split_piece(1, seg.substr(done, s - done), cache, c.ids);
    if (e > s) split_piece(1, seg.substr(s, e - s), cache, c.ids);
    done = e;
    if (e < keep_below || e >= keep_from) c.ends.emplace_back(e, c.ids.size());
    if (e >= stop_at && past++ >= extra) stopped = true;
    return !stopped;
  });
  c.scan_end = done;
  if (!stopped) {
    if (done < seg.size()) split_piece(1, seg.substr(done), cache, c.ids);
    c.complete = true;
  }
  return c;
}

size_t utf8_floor(std::string_view s, size_t i) {
  while (i < s.size() && i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  return std::min(i, s.size());
}

// The ids count a chunk had at match end p (p is one of its ends).
size_t ids_at(const ChunkScan& c, size_t p) {
  const auto it = std::lower_bound(c.ends.begin(), c.ends.end(), std::make_pair(p, size_t(0)));
  return it->second;
}

// The first match end >= from that both scans have, or npos.
size_t meeting_point(const ChunkScan& a, const ChunkScan& b, size_t from) {
  auto i = std::lower_bound(a.ends.begin(), a.ends.end(), std::make_pair(from, size_t(0)));
  auto j = std::lower_bound(b.ends.begin(), b.ends.end(), std::make_pair(from, size_t(0)));
  while (i != a.ends.end() && j != b.ends.end()) {
    if (i->first == j->first) return i->first;
    if (i->first < j->first) ++i;
    else ++j;
  }
  return std::string_view::npos;
}

// A segment (text between added tokens) through the pre-tokenizer and the model. Split in parallel: each chunk is
// scanned from its own start as if a match had just ended there; the scan of the chunk before runs on into it until
// both have a match that ends at the same byte, from where the two scans are the same (the search starts there in
// both); before that point the earlier chunk's pieces are used, after it the later one's. So the pieces are exactly
// a whole-segment scan's. Where two chunks do not meet within kSyncWindow, that stretch is scanned again by one
// thread.
// report(pos): how far it has come, after each parallel batch.
void BpeEngine::encode_segment(std::string_view seg, std::vector<PieceCache>& caches, std::vector<int32_t>& out,
                               const std::function<void(size_t)>& report) const {
  if (regexes_.empty()) return encode_piece(seg, caches[0], out);  // ByteLevel without a regex: one piece
  const int threads = int(caches.size());
  size_t pos = 0;
  bool after = false;
  for (;; report(pos)) {
    const size_t rest = seg.size() - pos;
    if (threads == 1 || rest < kParallelLeast) {
      const ChunkScan c = scan(seg, pos, after, seg.size() + 1, 0, 0, caches[0]);
      out.insert(out.end(), c.ids.begin(), c.ids.end());
      return;
    }
    const size_t chunk = std::clamp(rest / (2 * threads), size_t(1) << 18, size_t(1) << 22);
    const int n = int(std::min<size_t>(2 * threads, rest / chunk));
    std::vector<size_t> start(n + 1);
    for (int i = 0; i <= n; ++i) start[i] = utf8_floor(seg, pos + i * chunk);
    std::vector<ChunkScan> scans(n);
    std::vector<std::exception_ptr> failed(n);  // an exception must not leave the parallel region (terminate)
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; ++i) {
      const bool last = i + 1 == n;
      try {
        scans[i] = scan(seg, start[i], i == 0 ? after : false, last ? start[n] : start[i + 1] + kOverlapBytes,
                        last ? 0 : kOverlapMatches, start[i] + kSyncWindow, caches[omp_get_thread_num()]);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
    // Meet each chunk with the next; `from` is where the current chunk's pieces start.
    size_t from = pos, from_ids = 0;
    int cur = 0;
    bool met = true;
    for (int i = 1; i < n && !scans[cur].complete; ++i) {
      const size_t p = meeting_point(scans[cur], scans[i], from);
      if (p == std::string_view::npos) {
        met = false;
        break;
      }
      const size_t upto = ids_at(scans[cur], p);
      out.insert(out.end(), scans[cur].ids.begin() + from_ids, scans[cur].ids.begin() + upto);
      from = p, from_ids = ids_at(scans[i], p), cur = i;
    }
    if (!met) {  // no meeting point: rescan this stretch from the last true state with one thread
      const ChunkScan c = scan(seg, from, from != pos || after, start[n], 0, 0, caches[0]);
      out.insert(out.end(), c.ids.begin(), c.ids.end());
      if (c.complete) return;
      pos = c.scan_end, after = true;
      continue;
    }
    out.insert(out.end(), scans[cur].ids.begin() + from_ids, scans[cur].ids.end());
    if (scans[cur].complete) return;
    pos = scans[cur].scan_end, after = true;
  }
}

std::vector<int32_t> BpeEngine::encode(std::string_view text, bool progress, bool* round_trips) const {
  const bool valid = utf8_valid(text);
  const std::string fixed = valid ? std::string() : utf8_replace_invalid(text);
  const std::string_view t = valid ? text : std::string_view(fixed);
  std::vector<PieceCache> caches(t.size() >= kParallelLeast ? omp_get_max_threads() : 1);
  // Normalized parts and segments with ByteLevel's prefix space, alive while the caches point into them.
  std::deque<std::string> made;
  std::vector<int32_t> ids;
  ids.reserve(t.size() / 4);
  int reported = 0;  // tenths
  const auto report = [&](size_t at) {
    if (!progress || int(10 * at / t.size()) <= reported) return;
    reported = int(10 * at / t.size());
    std::fprintf(stderr, "encoding: %d%% of %.1f MB\n", 10 * reported, double(t.size()) / 1e6);
  };
  // tokenizers' extract_and_normalize: the parts between the tokens that are not `normalized`, each normalized,
  // then split at the tokens that are; its segments through the pre-tokenizer and the model.
  for (const TextPart& r : added_.split_raw(t)) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    std::string_view part = t.substr(r.begin, r.end - r.begin);
    if (!normalizer_.empty()) part = made.emplace_back(normalizer_.apply(part));
    // Progress in the text's bytes: a normalized part's offsets scaled to the part it came from.
    const auto in_text = [&](size_t at) { return r.begin + (part.empty() ? 0 : at * (r.end - r.begin) / part.size()); };
    for (const TextPart& p : added_.split_normalized(part)) {
      if (p.id >= 0) {
        ids.push_back(p.id);
        continue;
      }
      std::string_view seg = part.substr(p.begin, p.end - p.begin);
      if (spec_.add_prefix_space && seg[0] != ' ') {
        std::string& with_space = made.emplace_back(1, ' ');
        seg = with_space.append(seg);
      }
      encode_segment(seg, caches, ids, [&](size_t at) { report(in_text(p.begin + std::min(at, p.end - p.begin))); });
    }
    report(r.end);
  }
  if (round_trips) *round_trips = valid && decode(ids) == text;
  return ids;
}

// Every id's token, the merges, the split rules, the added tokens and their matching flags, the special ids and
// what encode_for_model adds; the normalizer and the normalized flags when there is one. Not the files' layout or
// the pad id.
uint64_t BpeEngine::identity_hash() const {
  uint64_t h = identity_mix(kHashFnv1a64Basis, "byte-level bpe");
  h = identity_mix_value(h, uint64_t(spec_.vocab.size()));
  for (const std::string& t : spec_.vocab) h = identity_mix(h, t);
  h = identity_mix_value(h, uint64_t(spec_.merges.size()));
  for (const auto& [a, b] : spec_.merges) h = identity_mix(identity_mix(h, a), b);
  for (const std::string& r : spec_.split_regexes) h = identity_mix(h, r);
  std::vector<BpeSpec::Added> added = spec_.added;
  std::sort(added.begin(), added.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  for (const auto& a : added) {
    const int32_t v[] = {a.id, a.special, a.lstrip, a.rstrip, a.single_word};
    h = identity_mix_value(identity_mix(h, a.content), v);
    if (!spec_.normalizer.empty()) h = identity_mix_value(h, int32_t(a.normalized));
  }
  // Mixed in only when there is one: a tokenizer without a normalizer (or an empty Sequence, the same tokenizer)
  // keeps the identity it had before normalizers were read.
  if (!spec_.normalizer.empty()) h = identity_mix(h, spec_.normalizer);
  const int32_t v[] = {spec_.add_prefix_space, spec_.ignore_merges, spec_.bos_id, spec_.eos_id,
                       spec_.unk_id,           spec_.add_bos,       spec_.add_eos};
  return identity_mix_value(h, v);
}

}  // namespace

std::unique_ptr<TokenizerEngine> bpe_engine(BpeSpec spec, TokenizerFiles files, const std::string& what) {
  return std::make_unique<BpeEngine>(std::move(spec), std::move(files), what);
}

}  // namespace agoq

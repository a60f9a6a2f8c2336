#include "data/tokenizer_json.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "core/json_read.h"
#include "data/tokenizer_normalizer.h"
#include "data/tokenizer_regex.h"

namespace agoq {

const char* const kGpt2SplitRegex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

constexpr int64_t kIdMost = 1 << 22;  // ids from here on are refused (the largest vocabularies have ~256k tokens)

struct Reader {
  const std::string& what;
  template <class... P>
  [[noreturn]] void refuse(const P&... parts) const {
    fail("tokenizer ", what, ": ", parts...);
  }
  // o[key] when o is an object that has it and it is not null.
  const json* get(const json& o, const char* key) const {
    if (!o.is_object()) return nullptr;
    const auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  bool flag(const json& o, const char* key, bool dflt, const std::string& where) const {
    const json* v = get(o, key);
    if (!v) return dflt;
    if (!v->is_boolean()) refuse(where, ".", key, " is not true or false");
    return v->get<bool>();
  }
  std::string text(const json& o, const char* key, const std::string& where) const {
    const json* v = get(o, key);
    if (!v || !v->is_string()) refuse(where, ".", key, " is missing or not a string");
    return v->get<std::string>();
  }
  std::string type(const json& o, const std::string& where) const {
    if (!o.is_object()) refuse(where, " is not an object");
    return text(o, "type", where);
  }
};

json parse(std::string_view bytes, const Reader& r, const char* file) {
  return json_parse(bytes, "tokenizer " + r.what + ": " + file);
}

// ---- pre-tokenizer ----

// Split(pattern, Isolated, invert false) as a regex.
std::string split_regex(const json& p, const Reader& r, const std::string& where) {
  const std::string behavior = r.text(p, "behavior", where);
  if (behavior != "Isolated") r.refuse(where, ".behavior '", behavior, "' is not supported (agoq implements Isolated)");
  if (r.flag(p, "invert", false, where)) r.refuse(where, ".invert true is not supported");
  const json* pat = r.get(p, "pattern");
  if (!pat || !pat->is_object()) r.refuse(where, ".pattern is missing or not an object");
  if (r.get(*pat, "Regex")) return r.text(*pat, "Regex", where + ".pattern");
  if (r.get(*pat, "String")) return regex_escape_rust(r.text(*pat, "String", where + ".pattern"));
  r.refuse(where, ".pattern has neither Regex nor String");
}

// ByteLevel alone, or a Sequence of Split/Digits ending in ByteLevel, into split regexes and the prefix space.
void read_pre_tokenizer(const json* pt, const Reader& r, BpeSpec& s) {
  if (!pt) r.refuse("pre_tokenizer is null: a byte-level BPE tokenizer needs ByteLevel");
  const std::string t = r.type(*pt, "pre_tokenizer");
  std::vector<const json*> steps;
  if (t == "Sequence") {
    const json* list = r.get(*pt, "pretokenizers");
    if (!list || !list->is_array() || list->empty()) r.refuse("pre_tokenizer.pretokenizers is missing or empty");
    for (const json& p : *list) steps.push_back(&p);
  } else {
    steps.push_back(pt);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string where =
        t == "Sequence" ? "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]" : "pre_tokenizer";
    const json& p = *steps[i];
    const std::string type = r.type(p, where);
    if (type == "Split") {
      s.split_regexes.push_back(split_regex(p, r, where));
    } else if (type == "Digits") {
      s.split_regexes.push_back(r.flag(p, "individual_digits", false, where) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "ByteLevel") {
      if (i + 1 != steps.size()) r.refuse(where, " ByteLevel before other pre-tokenizers is not supported");
      s.add_prefix_space = r.flag(p, "add_prefix_space", true, where);  // tokenizers' default
      if (s.add_prefix_space && i > 0)
        r.refuse(where, ".add_prefix_space true after other pre-tokenizers is not supported");
      if (r.flag(p, "use_regex", true, where)) s.split_regexes.push_back(kGpt2SplitRegex);
      return;
    } else {
      r.refuse(where, " type '", type, "' is not supported (agoq reads ByteLevel, Split, Digits)");
    }
  }
  r.refuse("pre_tokenizer has no ByteLevel step: agoq reads byte-level BPE tokenizers only");
}

void read_decoder(const json* d, const Reader& r) {
  if (!d) return;  // no decoder: only decode would differ; ByteLevel's is used
  const std::string t = r.type(*d, "decoder");
  if (t == "ByteLevel") return;
  if (t == "Sequence")
    if (const json* list = r.get(*d, "decoders"); list && list->is_array() && list->size() == 1)
      return read_decoder(&(*list)[0], r);
  r.refuse("decoder type '", t, "' is not supported (agoq reads ByteLevel)");
}

// ---- post-processor: the ids put before and after the text ----

struct Template {
  std::vector<int32_t> before, after;
};

void read_post_processor(const json* pp, const Reader& r, Template& tpl, const std::string& where = "post_processor") {
  if (!pp) return;
  const std::string t = r.type(*pp, where);
  if (t == "ByteLevel") return;  // offsets only
  if (t == "Sequence") {
    const json* list = r.get(*pp, "processors");
    if (!list || !list->is_array()) r.refuse(where, ".processors is missing");
    for (size_t i = 0; i < list->size(); ++i)
      read_post_processor(&(*list)[i], r, tpl, where + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (t != "TemplateProcessing")
    r.refuse(where, " type '", t, "' is not supported (agoq reads TemplateProcessing, ByteLevel, Sequence)");
  const json* single = r.get(*pp, "single");
  const json* specials = r.get(*pp, "special_tokens");
  if (!single || !single->is_array()) r.refuse(where, ".single is missing");
  bool seen_text = false;
  for (const json& item : *single) {
    if (const json* seq = r.get(item, "Sequence")) {
      if (r.text(*seq, "id", where + ".single") != "A") r.refuse(where, ".single uses a second sequence");
      seen_text = true;
    } else if (const json* sp = r.get(item, "SpecialToken")) {
      const std::string name = r.text(*sp, "id", where + ".single");
      const json* entry = specials ? r.get(*specials, name.c_str()) : nullptr;
      const json* ids = entry ? r.get(*entry, "ids") : nullptr;
      if (!ids || !ids->is_array()) r.refuse(where, ".special_tokens has no ids for '", name, "'");
      for (const json& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kIdMost)
          r.refuse(where, ".special_tokens '", name, "' has an id that is not a token id");
        (seen_text ? tpl.after : tpl.before).push_back(int32_t(id.get<int64_t>()));
      }
    } else {
      r.refuse(where, ".single has an item that is neither Sequence nor SpecialToken");
    }
  }
  if (tpl.before.size() > 1 || tpl.after.size() > 1)
    r.refuse(where, " adds ", tpl.before.size(), " tokens before the text and ", tpl.after.size(),
             " after; agoq supports at most one each (BOS, EOS)");
}

// ---- model and added tokens ----

struct Vocab {
  BpeSpec& s;
  std::unordered_map<std::string, int32_t> model;  // the BPE model's own vocabulary
  std::map<std::string, int32_t> added;            // content -> id, as tokenizers' added_tokens_map
  size_t model_size = 0;                           // entries of the model's vocabulary (tokenizers' vocab_size)
  int32_t id_of(const std::string& t) const {
    if (const auto it = added.find(t); it != added.end()) return it->second;
    const auto it = model.find(t);
    return it == model.end() ? -1 : it->second;
  }
  // tokenizers' AddedVocabulary::add_tokens for one token: an existing token keeps its id, a new one goes after
  // the model's vocabulary and the added tokens so far. Later flags replace earlier ones.
  void add(const BpeSpec::Added& a) {
    if (a.content.empty()) return;
    int32_t id = id_of(a.content);
    if (id < 0) {
      int32_t most = -1;
      for (const auto& [c, i] : added) most = std::max(most, i);
      id = most < 0                                           ? int32_t(model_size)
           : (most >= int32_t(model_size) || model_size == 0) ? most + 1
                                                              : int32_t(model_size);
    }
    added[a.content] = id;
    const auto same = std::find_if(s.added.begin(), s.added.end(), [&](const auto& x) { return x.id == id; });
    BpeSpec::Added b = a;
    b.id = id;
    if (same != s.added.end()) *same = b;
    else s.added.push_back(b);
  }
};

void read_model(const json* m, const Reader& r, Vocab& v) {
  if (!m) r.refuse("model is missing");
  const std::string t = r.type(*m, "model");
  if (t != "BPE") r.refuse("model type '", t, "' is not supported (agoq reads BPE)");
  if (const json* d = r.get(*m, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
    r.refuse("model.dropout ", json_excerpt(*d), " is not supported (no dropout)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* p = r.get(*m, key); p && !(p->is_string() && p->get<std::string>().empty()))
      r.refuse("model.", key, " ", json_excerpt(*p), " is not supported");
  if (r.flag(*m, "byte_fallback", false, "model")) r.refuse("model.byte_fallback true is not supported");
  v.s.ignore_merges = r.flag(*m, "ignore_merges", false, "model");
  const json* vocab = r.get(*m, "vocab");
  const json* merges = r.get(*m, "merges");
  if (!vocab || !vocab->is_object() || !merges || !merges->is_array())
    r.refuse("model.vocab or model.merges is missing");
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kIdMost)
      r.refuse("model.vocab '", token, "' has id ", json_excerpt(id), ", not a token id");
    v.model[token] = int32_t(id.get<int64_t>());
  }
  v.model_size = v.model.size();
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& e = (*merges)[i];
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      v.s.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      continue;
    }
    if (!e.is_string()) r.refuse("model.merges[", i, "] is neither \"a b\" nor [a, b]");
    const std::string line = e.get<std::string>();
    if (line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      r.refuse("model.merges[", i, "] '", line, "' is not two tokens separated by one space");
    v.s.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  if (const json* unk = r.get(*m, "unk_token"); unk && unk->is_string()) {
    const auto it = v.model.find(unk->get<std::string>());
    v.s.unk_id = it == v.model.end() ? -1 : it->second;
  }
}

BpeSpec::Added read_added(const json& a, const Reader& r, const std::string& where) {
  BpeSpec::Added t{-1, r.text(a, "content", where)};
  t.special = r.flag(a, "special", false, where);
  t.single_word = r.flag(a, "single_word", false, where);
  t.lstrip = r.flag(a, "lstrip", false, where);
  t.rstrip = r.flag(a, "rstrip", false, where);
  t.normalized = r.flag(a, "normalized", !t.special, where);
  return t;
}

// ---- tokenizer_config.json: what the tokenizer class changes ----

struct ClassRules {
  const char* name;
  const char *bos, *eos, *unk, *pad;  // the class's default special tokens (nullptr: none)
  bool sets_prefix_space;             // add_prefix_space from the config replaces ByteLevel's
  int add_bos, add_eos;               // -1: the post-processor stays; else the class's defaults
};
constexpr ClassRules kClasses[] = {
    {"PreTrainedTokenizer", nullptr, nullptr, nullptr, nullptr, false, -1, -1},
    {"GPT2Tokenizer", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", nullptr, true, -1, -1},
    {"CodeGenTokenizer", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", nullptr, true, -1, -1},
    {"GPTNeoXTokenizer", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", nullptr, true, 0, 0},
    {"BloomTokenizer", "<s>", "</s>", "<unk>", "<pad>", true, -1, -1},
    {"LlamaTokenizer", "<s>", "</s>", "<unk>", nullptr, false, 1, 0},
    {"CodeLlamaTokenizer", "<s>", "</s>", "<unk>", nullptr, false, 1, 0},
    {"Qwen2Tokenizer", nullptr, "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", false, -1, -1},
};

// A special token of the config (a string, or an object with "content"); `dflt` when the key is absent.
std::optional<std::string> config_token(const json& c, const char* key, const char* dflt, const Reader& r) {
  if (!c.is_object() || !c.contains(key)) return dflt ? std::optional<std::string>(dflt) : std::nullopt;
  const json& v = c[key];
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  return r.text(v, "content", std::string("tokenizer_config.json ") + key);
}

void apply_config(const json& c, const json* pre_tokenizer, const Reader& r, Vocab& v, Template& tpl) {
  std::string cls = c.is_object() && c.contains("tokenizer_class") && c["tokenizer_class"].is_string()
                        ? c["tokenizer_class"].get<std::string>()
                        : "PreTrainedTokenizerFast";
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  const ClassRules* rules = &kClasses[0];
  for (const ClassRules& k : kClasses)
    if (cls == k.name) rules = &k;
  if (rules->sets_prefix_space && pre_tokenizer && pre_tokenizer->is_object() &&
      pre_tokenizer->contains("add_prefix_space"))
    v.s.add_prefix_space = r.flag(c, "add_prefix_space", false, "tokenizer_config.json");
  if (std::string(rules->name) == "LlamaTokenizer" && r.get(c, "add_prefix_space"))
    r.refuse("tokenizer_config.json add_prefix_space with ", cls,
             " makes transformers rebuild it from the slow tokenizer");
  // transformers adds the config's added_tokens_decoder, then any special token it does not know yet.
  if (const json* dec = r.get(c, "added_tokens_decoder"); dec && dec->is_object()) {
    std::vector<std::pair<int64_t, const json*>> byid;
    for (const auto& [k, a] : dec->items()) byid.emplace_back(std::atoll(k.c_str()), &a);
    std::sort(byid.begin(), byid.end());
    for (const auto& [id, a] : byid) v.add(read_added(*a, r, "tokenizer_config.json added_tokens_decoder"));
  }
  const auto special = [&](const char* key, const char* dflt) {
    const std::optional<std::string> t = config_token(c, key, dflt, r);
    if (t && !v.added.count(*t)) v.add({-1, *t, /*special=*/true});
    return t ? v.id_of(*t) : -1;
  };
  const int32_t bos = special("bos_token", rules->bos), eos = special("eos_token", rules->eos);
  special("unk_token", rules->unk);
  const int32_t pad = special("pad_token", rules->pad);
  for (const char* key : {"sep_token", "cls_token", "mask_token"}) special(key, nullptr);
  if (const json* extra = r.get(c, "additional_special_tokens"); extra && extra->is_array())
    for (const json& t : *extra)
      if (const std::string s =
              t.is_string() ? t.get<std::string>() : r.text(t, "content", "additional_special_tokens");
          !v.added.count(s))
        v.add({-1, s, true});
  if (rules->add_bos >= 0) {  // update_post_processor: the template from add_bos_token / add_eos_token
    tpl = {};
    if (r.flag(c, "add_bos_token", rules->add_bos, "tokenizer_config.json")) tpl.before = {bos};
    if (r.flag(c, "add_eos_token", rules->add_eos, "tokenizer_config.json")) tpl.after = {eos};
    if ((!tpl.before.empty() && bos < 0) || (!tpl.after.empty() && eos < 0))
      r.refuse("tokenizer_config.json adds a BOS or EOS token but names none (", cls, ")");
  }
  v.s.bos_id = bos >= 0 ? bos : v.s.bos_id;
  v.s.eos_id = eos >= 0 ? eos : v.s.eos_id;
  v.s.pad_id = pad;  // (the model's own unk_token stays: it is what the model puts for an unknown byte)
}

}  // namespace

BpeSpec bpe_spec_from_json(std::string_view tokenizer_json, std::string_view config_json, const std::string& what) {
  const Reader r{what};
  const json j = parse(tokenizer_json, r, "tokenizer.json");
  if (!j.is_object()) r.refuse("tokenizer.json is not a JSON object");
  const json c = config_json.empty() ? json::object() : parse(config_json, r, "tokenizer_config.json");
  BpeSpec s;
  s.normalizer = normalizer_read(r.get(j, "normalizer"), what);
  Vocab v{s, {}, {}, 0};
  read_model(r.get(j, "model"), r, v);
  read_pre_tokenizer(r.get(j, "pre_tokenizer"), r, s);
  read_decoder(r.get(j, "decoder"), r);
  Template tpl;
  read_post_processor(r.get(j, "post_processor"), r, tpl);
  if (const json* added = r.get(j, "added_tokens")) {
    if (!added->is_array()) r.refuse("added_tokens is not an array");
    for (size_t i = 0; i < added->size(); ++i)
      v.add(read_added((*added)[i], r, "added_tokens[" + std::to_string(i) + "]"));
  }
  if (!tpl.before.empty()) s.bos_id = tpl.before[0];
  if (!tpl.after.empty()) s.eos_id = tpl.after[0];
  apply_config(c, r.get(j, "pre_tokenizer"), r, v, tpl);
  s.add_bos = !tpl.before.empty(), s.add_eos = !tpl.after.empty();
  if (s.add_bos) s.bos_id = tpl.before[0];
  if (s.add_eos) s.eos_id = tpl.after[0];
  // The vocabulary by id: the model's tokens, then the added ones (tokenizers looks an id up in those first).
  int64_t size = 0;
  for (const auto& [t, id] : v.model) size = std::max<int64_t>(size, id + 1);
  for (const auto& a : s.added) size = std::max<int64_t>(size, a.id + 1);
  if (size > kIdMost) r.refuse(size, " token ids are more than agoq reads (", kIdMost, ")");
  s.vocab.assign(size_t(size), "");
  for (const auto& [t, id] : v.model) {
    if (!s.vocab[id].empty() && s.vocab[id] != t)
      r.refuse("model.vocab gives id ", id, " to both '", s.vocab[id], "' and '", t, "'");
    s.vocab[id] = t;
  }
  for (const auto& a : s.added) s.vocab[a.id] = a.content;
  for (const int32_t id : {s.bos_id, s.eos_id})
    if (id >= size) r.refuse("post_processor adds token id ", id, ", outside the ", size, "-token vocabulary");
  return s;
}

bool tokenizer_json_is_sentencepiece(std::string_view tokenizer_json) {
  try {
    const json j = json_parse(tokenizer_json, "tokenizer.json");
    const json& m = j.at("model");
    return m.value("type", "") == "BPE" && m.value("byte_fallback", false);
  } catch (const std::exception&) {  // (not JSON, or not this shape: read as tokenizer.json, which names why)
    return false;
  }
}

namespace {

std::string quoted(const std::string& s) { return json(s).dump(); }

// ByteLevel alone when its own regex (or none) is the split; else Splits, then ByteLevel without a regex.
std::string pre_tokenizer_json(const BpeSpec& s) {
  const auto byte_level = [](bool aps, bool regex) {
    return std::string(R"({"type": "ByteLevel", "add_prefix_space": )") + (aps ? "true" : "false") +
           R"(, "trim_offsets": true, "use_regex": )" + (regex ? "true" : "false") + "}";
  };
  const std::vector<std::string>& r = s.split_regexes;
  if (r.empty() || (r.size() == 1 && r[0] == kGpt2SplitRegex)) return byte_level(s.add_prefix_space, !r.empty());
  std::string out = R"({"type": "Sequence", "pretokenizers": [)";
  const bool gpt2_last = r.back() == kGpt2SplitRegex;
  for (size_t i = 0; i + gpt2_last < r.size(); ++i)
    out += R"({"type": "Split", "pattern": {"Regex": )" + quoted(r[i]) +
           R"(}, "behavior": "Isolated", "invert": false}, )";
  return out + byte_level(false, gpt2_last) + "]}";
}

std::string normalizer_json(const BpeSpec& s) {
  return s.normalizer.empty() ? "null" : R"({"type": "Sequence", "normalizers": )" + s.normalizer + "}";
}

std::string template_json(const BpeSpec& s) {
  if (!s.add_bos && !s.add_eos) return "null";
  const std::string bos = s.add_bos ? s.vocab[s.bos_id] : "", eos = s.add_eos ? s.vocab[s.eos_id] : "";
  const auto items = [&](const char* seq, int type_id) {
    const std::string t = std::to_string(type_id);
    std::string out;
    if (s.add_bos) out += R"({"SpecialToken": {"id": )" + quoted(bos) + R"(, "type_id": )" + t + "}}, ";
    out += std::string(R"({"Sequence": {"id": ")") + seq + R"(", "type_id": )" + t + "}}";
    if (s.add_eos) out += R"(, {"SpecialToken": {"id": )" + quoted(eos) + R"(, "type_id": )" + t + "}}";
    return out;
  };
  std::string specials;
  const auto special = [&](const std::string& t, int id) {
    if (!specials.empty()) specials += ", ";
    specials += quoted(t) + R"(: {"id": )" + quoted(t) + R"(, "ids": [)" + std::to_string(id) + R"(], "tokens": [)" +
                quoted(t) + "]}";
  };
  if (s.add_bos) special(bos, s.bos_id);
  if (s.add_eos && (!s.add_bos || eos != bos)) special(eos, s.eos_id);
  return R"({"type": "TemplateProcessing", "single": [)" + items("A", 0) + R"(], "pair": [)" + items("A", 0) + ", " +
         items("B", 1) + R"(], "special_tokens": {)" + specials + "}}";
}

}  // namespace

TokenizerFiles bpe_spec_to_json(const BpeSpec& s) {
  const auto flag = [](bool b) { return b ? "true" : "false"; };
  std::string added = "[";
  for (const auto& a : s.added)
    added += std::string(added.size() > 1 ? ",\n    " : "\n    ") + R"({"id": )" + std::to_string(a.id) +
             R"(, "content": )" + quoted(a.content) + R"(, "single_word": )" + flag(a.single_word) + R"(, "lstrip": )" +
             flag(a.lstrip) + R"(, "rstrip": )" + flag(a.rstrip) + R"(, "normalized": )" + flag(a.normalized) +
             R"(, "special": )" + flag(a.special) + "}";
  added += "\n  ]";
  // Every token in the model's vocabulary (the added ones too), so that tokenizers gives each the same id.
  std::string vocab = "{";
  std::unordered_map<std::string_view, bool> seen;
  for (size_t id = 0; id < s.vocab.size(); ++id)
    if (!s.vocab[id].empty() && seen.emplace(s.vocab[id], true).second)
      vocab += std::string(vocab.size() > 1 ? ", " : "") + quoted(s.vocab[id]) + ": " + std::to_string(id);
  vocab += "}";
  std::string merges = "[";
  for (const auto& [a, b] : s.merges)
    merges += std::string(merges.size() > 1 ? ", " : "") + "[" + quoted(a) + ", " + quoted(b) + "]";
  merges += "]";
  const std::string unk = s.unk_id >= 0 ? quoted(s.vocab[s.unk_id]) : "null";
  std::string tj =
      "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": " + added +
      ",\n  \"normalizer\": " + normalizer_json(s) + ",\n  \"pre_tokenizer\": " + pre_tokenizer_json(s) +
      ",\n  \"post_processor\": " + template_json(s) +
      ",\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
      "\"use_regex\": true},\n  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": " +
      unk +
      ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
      "\"byte_fallback\": false, \"ignore_merges\": " +
      flag(s.ignore_merges) + ",\n    \"vocab\": " + vocab + ",\n    \"merges\": " + merges + "}\n}\n";
  // The class that keeps tokenizer.json as it is; BOS/EOS named only when they are added tokens (transformers would
  // add any other as a new special token, matched in text).
  json c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"add_bos_token", s.add_bos},
            {"add_eos_token", s.add_eos},
            {"clean_up_tokenization_spaces", false}};
  const auto is_added = [&](int id) {
    return std::any_of(s.added.begin(), s.added.end(), [&](const auto& a) { return a.id == id; });
  };
  if (s.bos_id >= 0 && is_added(s.bos_id)) c["bos_token"] = s.vocab[s.bos_id];
  if (s.eos_id >= 0 && is_added(s.eos_id)) c["eos_token"] = s.vocab[s.eos_id];
  if (s.pad_id >= 0 && is_added(s.pad_id)) c["pad_token"] = s.vocab[s.pad_id];
  return {{"tokenizer.json", std::move(tj)}, {"tokenizer_config.json", c.dump(2) + "\n"}};
}

// llama.cpp's tokenizer.ggml.pre names (llama-vocab.cpp) and the splits they stand for, written as the models'
// tokenizer.json writes them (llama.cpp spells some differently, e.g. (?i:'s) as '[sS]). Its "default" (and a
// missing name) is taken as GPT-2's split: llama.cpp's own default is an approximation of no HF tokenizer.
namespace {
constexpr const char* kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
bool name_in(const std::string& pre, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return pre == n; });
}
}  // namespace

std::vector<std::string> bpe_split_regexes_for_gguf_pre(const std::string& pre) {
  if (name_in(pre, {"", "default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", "roberta-bpe"}))
    return {kGpt2SplitRegex};
  if (name_in(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"}))
    return {kLlama3SplitRegex};
  if (name_in(pre, {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"})) return {kQwen2SplitRegex};
  // SmolLM and StarCoder: Digits(individual_digits), then ByteLevel's GPT-2 regex.
  if (name_in(pre, {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}))
    return {R"(\p{N})", kGpt2SplitRegex};
  fail("tokenizer.ggml.pre '", pre,
       "' is not supported (agoq knows gpt-2, llama-bpe/llama3, qwen2, smollm and their kin)");
}

bool bpe_ignore_merges_for_gguf_pre(const std::string& pre) {
  return name_in(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3"});
}

}  // namespace agoq

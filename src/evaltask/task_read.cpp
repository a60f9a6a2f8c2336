#include "evaltask/task_read.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json_read.h"
#include "data/utf8.h"
#include "evaltask/task_text.h"

namespace agoq {
namespace {

using json = nlohmann::json;

// Where a line is, for every message about it: "FILE:LINE: ".
struct Line {
  std::string at;
  size_t item = 0;                           // items read before this one
  const std::vector<int>* labels = nullptr;  // PIQA's valid-labels.lst, when its lines have no "label"
};

const json& field(const json& o, const char* key, const Line& l) {
  AGOQ_CHECK(o.contains(key), l.at, "needs \"", key, "\"");
  return o[key];
}

std::string text_field(const json& o, const char* key, const Line& l) {
  const json& v = field(o, key, l);
  AGOQ_CHECK(v.is_string(), l.at, "\"", key, "\" must be a string, not ", json_excerpt(v));
  return v.get<std::string>();
}

std::vector<std::string> text_list(const json& v, const char* key, const Line& l) {
  AGOQ_CHECK(v.is_array() && !v.empty(), l.at, "\"", key, "\" must be a list of strings, not ", json_excerpt(v));
  std::vector<std::string> out;
  for (const json& s : v) {
    AGOQ_CHECK(s.is_string(), l.at, "\"", key, "\" must be a list of strings, not ", json_excerpt(v));
    out.push_back(s.get<std::string>());
  }
  return out;
}

// An index given as a number or as digits in a string (HellaSwag's "label": "2"), whole: the caller checks its range
// (one beyond int64_t is refused here, never wrapped into range).
int64_t index_of(const json& v, const char* key, const Line& l) {
  if (v.is_number_unsigned())
    AGOQ_CHECK(v.get<uint64_t>() <= uint64_t(INT64_MAX), l.at, key, " ", json_excerpt(v), " is out of range");
  if (v.is_number_integer()) return v.get<int64_t>();
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  AGOQ_CHECK(!s.empty() && s.size() < 7 && s.find_first_not_of("0123456789") == std::string::npos, l.at, "\"", key,
             "\" must be a whole number, not ", json_excerpt(v));
  return std::stoi(s);
}

// The continuation of each choice is " " + choice after the context (lm-eval's target_delimiter).
TaskItem choice_item(const std::string& context, std::vector<std::string> choices, int64_t gold, const Line& l) {
  AGOQ_CHECK(gold >= 0 && size_t(gold) < choices.size(), l.at, "label ", gold, " is out of range for ", choices.size(),
             " choices");
  TaskItem it;
  for (size_t i = 0; i < choices.size(); ++i) {
    AGOQ_CHECK(!choices[i].empty(), l.at, "choice ", i, " is empty");
    it.requests.push_back({context, " " + choices[i]});
  }
  it.choices = std::move(choices);
  it.gold = int(gold);
  return it;
}

TaskItem read_hellaswag(const json& o, const Line& l) {
  const std::string ctx = text_field(o, "ctx_a", l) + " " + py_capitalize(text_field(o, "ctx_b", l));
  std::vector<std::string> endings = text_list(field(o, "endings", l), "endings", l);
  for (std::string& e : endings) e = hellaswag_clean(e);
  return choice_item(hellaswag_clean(text_field(o, "activity_label", l) + ": " + ctx), std::move(endings),
                     index_of(field(o, "label", l), "label", l), l);
}

TaskItem read_piqa(const json& o, const Line& l) {
  int64_t gold = 0;
  if (l.labels) {
    AGOQ_CHECK(l.item < l.labels->size(), l.at, "no label for this line in the labels file (it has ", l.labels->size(),
               ")");
    gold = (*l.labels)[l.item];
  } else {
    gold = index_of(field(o, "label", l), "label", l);
  }
  return choice_item("Question: " + text_field(o, "goal", l) + "\nAnswer:",
                     {text_field(o, "sol1", l), text_field(o, "sol2", l)}, gold, l);
}

TaskItem read_arc(const json& o, const Line& l) {
  const json& c = field(o, "choices", l);
  AGOQ_CHECK(c.is_object(), l.at, "\"choices\" must be {\"text\": [...], \"label\": [...]}");
  std::vector<std::string> text = text_list(field(c, "text", l), "choices.text", l);
  const std::vector<std::string> labels = text_list(field(c, "label", l), "choices.label", l);
  AGOQ_CHECK(labels.size() == text.size(), l.at, "\"choices\" has ", text.size(), " texts but ", labels.size(),
             " labels");
  const std::string key = text_field(o, "answerKey", l);
  const auto hit = std::find(labels.begin(), labels.end(), key);
  AGOQ_CHECK(hit != labels.end(), l.at, "answerKey \"", key, "\" is not one of the choices' labels");
  return choice_item("Question: " + text_field(o, "question", l) + "\nAnswer:", std::move(text),
                     int(hit - labels.begin()), l);
}

TaskItem read_mmlu(const json& o, const Line& l) {
  const std::vector<std::string> c = text_list(field(o, "choices", l), "choices", l);
  AGOQ_CHECK(c.size() == 4, l.at, "\"choices\" must have 4 entries (A-D), not ", c.size());
  const std::string subject = text_field(o, "subject", l);
  const std::string context = "The following are multiple choice questions (with answers) about " +
                              py_replace(subject, "_", " ") + ".\n\n" + py_strip(text_field(o, "question", l)) +
                              "\nA. " + c[0] + "\nB. " + c[1] + "\nC. " + c[2] + "\nD. " + c[3] + "\nAnswer:";
  TaskItem it = choice_item(context, {"A", "B", "C", "D"}, index_of(field(o, "answer", l), "answer", l), l);
  it.subtask = subject;
  return it;
}

TaskItem read_lambada(const json& o, const Line& l) {
  const std::vector<std::string> words = py_split(text_field(o, "text", l), ' ');
  AGOQ_CHECK(!words.back().empty(), l.at, "\"text\" ends in a space: it has no last word to predict");
  std::string context;
  for (size_t i = 0; i + 1 < words.size(); ++i) context += (i ? " " : "") + words[i];
  TaskItem it;
  it.requests.push_back({context, " " + words.back()});
  return it;
}

// Partial scoring: the sentence up to "_" with each option is a context, the rest of it the one continuation.
TaskItem read_winogrande(const json& o, const Line& l) {
  const std::string s = text_field(o, "sentence", l);
  const size_t blank = s.find('_');
  AGOQ_CHECK(blank != std::string::npos, l.at, "\"sentence\" has no \"_\" for the options to fill");
  const int64_t answer = index_of(field(o, "answer", l), "answer", l);
  AGOQ_CHECK(answer == 1 || answer == 2, l.at, "\"answer\" must be 1 or 2, not ", answer);
  std::string rest = " ";  // (not " " + ...: GCC 12 warns falsely of an overlapping memcpy there)
  rest += py_strip(s.substr(blank + 1));
  TaskItem it;
  for (const char* key : {"option1", "option2"}) {
    const std::string option = text_field(o, key, l);
    AGOQ_CHECK(!option.empty(), l.at, "\"", key, "\" is empty");
    it.choices.push_back(s.substr(0, blank) + option);
    it.requests.push_back({it.choices.back(), rest});
  }
  it.gold = int(answer - 1);
  return it;
}

TaskItem read_mc(const json& o, const Line& l) {
  return choice_item(text_field(o, "context", l), text_list(field(o, "choices", l), "choices", l),
                     index_of(field(o, "label", l), "label", l), l);
}

TaskItem read_ppl(const json& o, const Line& l) {
  TaskItem it;
  it.target = text_field(o, "text", l);
  AGOQ_CHECK(!it.target.empty(), l.at, "\"text\" is empty");
  it.requests.push_back({"", it.target});
  return it;
}

struct TaskForm {
  const char* name;
  TaskOutput output;
  bool acc_norm;
  TaskItem (*read)(const json&, const Line&);
};

constexpr TaskForm kForms[] = {
    {"hellaswag", TaskOutput::multiple_choice, true, read_hellaswag},
    {"piqa", TaskOutput::multiple_choice, true, read_piqa},
    {"arc_easy", TaskOutput::multiple_choice, true, read_arc},
    {"arc_challenge", TaskOutput::multiple_choice, true, read_arc},
    {"mmlu", TaskOutput::multiple_choice, false, read_mmlu},
    {"lambada", TaskOutput::loglikelihood, false, read_lambada},
    {"winogrande", TaskOutput::multiple_choice, false, read_winogrande},
    {"mc", TaskOutput::multiple_choice, true, read_mc},
    {"ppl", TaskOutput::rolling, false, read_ppl},
};

// PIQA's original labels beside its valid.jsonl: valid-labels.lst, one 0 or 1 a line.
std::vector<int> piqa_labels_read(const std::string& file) {
  const std::string path = (file.ends_with(".jsonl") ? file.substr(0, file.size() - 6) : file) + "-labels.lst";
  const std::string text = input_file_read(path, "PIQA labels file (its lines have no \"label\")");
  std::vector<int> labels;
  size_t n = 0;
  for (std::string line : py_split(text.ends_with('\n') ? text.substr(0, text.size() - 1) : text, '\n')) {
    ++n;
    if (line.ends_with('\r')) line.pop_back();
    AGOQ_CHECK(line == "0" || line == "1", path, ":", n, ": a label must be 0 or 1, not \"", line.substr(0, 20), "\"");
    labels.push_back(line[0] - '0');
  }
  return labels;
}

}  // namespace

std::string task_names() {
  std::string s;
  for (const TaskForm& f : kForms) s += (s.empty() ? "" : ", ") + std::string(f.name) + ":FILE";
  return s;
}

Task task_read(const std::string& spec, int64_t limit) {
  const size_t colon = spec.find(':');
  Task t;
  t.name = spec.substr(0, colon);
  const TaskForm* form = nullptr;
  for (const TaskForm& f : kForms)
    if (t.name == f.name) form = &f;
  AGOQ_CHECK(form, "--task ", spec, ": unknown task \"", t.name, "\" (known: ", task_names(), ")");
  AGOQ_CHECK(colon != std::string::npos && colon + 1 < spec.size(), "--task ", spec, ": needs its file, as --task ",
             t.name, ":FILE (agoq downloads nothing)");
  t.file = spec.substr(colon + 1), t.output = form->output, t.acc_norm = form->acc_norm;
  const std::string text = input_file_read(t.file, "--task " + t.name + " file");
  if (form->read == read_ppl && !t.file.ends_with(".jsonl")) {  // a plain text: one document
    AGOQ_CHECK(utf8_valid(text), t.file, ": not valid UTF-8 (byte ", utf8_invalid_at(text) + 1, ")");
    t.items.push_back(read_ppl(json{{"text", text}}, Line{t.file + ": "}));
    t.items.back().line = 1;
    return t;
  }
  std::optional<std::vector<int>> labels;
  size_t n = 0;
  for (const std::string& raw : py_split(text, '\n')) {
    ++n;
    if (limit > 0 && t.items.size() >= size_t(limit)) break;
    const std::string line = raw.ends_with('\r') ? raw.substr(0, raw.size() - 1) : raw;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    Line l{t.file + ":" + std::to_string(n) + ": ", t.items.size()};
    AGOQ_CHECK(utf8_valid(line), l.at, "not valid UTF-8 (byte ", utf8_invalid_at(line) + 1, " of the line)");
    const json o = json_parse(line, l.at + "not a JSON object (one item per line): the line");
    AGOQ_CHECK(o.is_object(), l.at, "not a JSON object (one item per line)");
    if (form->read == read_piqa && !o.contains("label") && !labels) labels = piqa_labels_read(t.file);
    l.labels = labels ? &*labels : nullptr;
    t.items.push_back(form->read(o, l));
    t.items.back().line = n;
  }
  AGOQ_CHECK(!t.items.empty(), t.file, ": no items (one JSON object per line)");
  AGOQ_CHECK(!labels || limit > 0 || labels->size() == t.items.size(), t.file, " has ", t.items.size(),
             " items but its labels file has ", labels->size(), " labels");
  return t;
}

}  // namespace agoq

#include "cli/commands.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdlib>

namespace agoq {

namespace {
struct Entry {
  std::string parent;
  int order;
  CliCommand::AddFn add;
};
std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}
}  // namespace

CliCommand::CliCommand(const char* parent, int order, AddFn add) { registry().push_back({parent, order, add}); }

void cli_add_registered(const std::string& parent, CLI::App& app) {
  std::vector<Entry> mine;
  for (const Entry& e : registry())
    if (e.parent == parent) mine.push_back(e);
  std::sort(mine.begin(), mine.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  for (const Entry& e : mine) e.add(app);
}

CLI::Validator cli_in_range(long long least, long long most) {
  const bool bounded = most < LLONG_MAX;
  const std::string range =
      bounded ? "from " + std::to_string(least) + " to " + std::to_string(most) : ">= " + std::to_string(least);
  return CLI::Validator(
      [least, most, range](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0') return "must be a whole number (got '" + text + "')";
        if (errno == ERANGE || v < least || v > most) return "must be " + range + " (got " + text + ")";
        return {};
      },
      bounded ? "[" + std::to_string(least) + ", " + std::to_string(most) + "]" : ">=" + std::to_string(least));
}

CLI::Validator cli_at_least(long long least) { return cli_in_range(least, LLONG_MAX); }

CLI::Validator cli_unsigned() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return "must be a whole number from 0 to " + std::to_string(UINT64_MAX) + " (got '" + text + "')";
        return {};
      },
      ">=0");
}

std::string cli_unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path;  // the commands before the unknown word ("agoq: error: " names the binary)
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return {};  // flags: CLI11 says what is wrong with them
    const std::vector<CLI::App*> subs = at->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return {};
    CLI::App* next = nullptr;
    for (CLI::App* s : subs)
      if (s->check_name(word)) next = s;
    if (!next) {
      std::string choices;
      for (CLI::App* s : subs) choices += (choices.empty() ? "" : ", ") + s->get_name();
      return (path.empty() ? "" : path.substr(1) + ": ") + "unknown command '" + word + "' (one of: " + choices + ")";
    }
    at = next, path += " " + word;
  }
  return {};
}

CLI::Option* cli_add_compute(CLI::App* cmd, ComputeMode& into) {
  auto parse = [&into](const std::string& v) { into = enum_parse(kComputeNames, v, "--compute"); };
  return cmd->add_option_function<std::string>("--compute", parse, kComputeHelp)
      ->default_str(enum_name(kComputeNames, into));
}

CLI::Option* cli_add_bf16_weights(CLI::App* cmd, Bf16Weights& into) {
  auto parse = [&into](const std::string& v) { into = enum_parse(kBf16WeightsNames, v, "--bf16-weights"); };
  return cmd->add_option_function<std::string>("--bf16-weights", parse, kBf16WeightsHelp)
      ->default_str(enum_name(kBf16WeightsNames, into));
}

}  // namespace agoq

#include "cli/commands.h"

#include <algorithm>
#include <cerrno>
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

CLI::Validator cli_at_least(long long least) {
  return CLI::Validator(
      [least](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE) return "must be a whole number (got '" + text + "')";
        if (v < least) return "must be >= " + std::to_string(least) + " (got " + text + ")";
        return {};
      },
      ">=" + std::to_string(least));
}

std::string cli_unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = "agoq";
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
      return path + ": unknown command '" + word + "' (one of: " + choices + ")";
    }
    at = next, path += " " + word;
  }
  return {};
}

}  // namespace agoq

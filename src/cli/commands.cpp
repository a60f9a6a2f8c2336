#include "cli/commands.h"

#include <algorithm>

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

}  // namespace agoq

#include "comm/comm_check.h"

#include "core/hash.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <vector>

namespace agoq {

void comm_check_consistent(Communicator& comm, std::string_view description, std::string_view what) {
  const int n = comm.size();
  const uint64_t mine = hash_fnv1a64(description.data(), description.size());
  std::vector<uint64_t> all(static_cast<size_t>(n));
  comm.allgather(&mine, all.data(), sizeof mine);
  std::vector<int> differ;
  for (int r = 1; r < n; ++r)
    if (all[r] != all[0]) differ.push_back(r);
  if (differ.empty()) return;
  auto hex = [](uint64_t h) {
    char b[24];
    std::snprintf(b, sizeof b, "%016" PRIx64, h);
    return std::string(b);
  };
  std::ostringstream os;
  os << (differ.size() == 1 ? "rank " : "ranks ");
  const size_t shown = std::min<size_t>(differ.size(), 8);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << differ[i];
  if (shown < differ.size()) os << " and " << differ.size() - shown << " more";
  os << (differ.size() == 1 ? " runs" : " run") << " a different " << what << " than rank 0 (hash "
     << hex(all[differ[0]]) << " vs " << hex(all[0])
     << " on rank 0): start every rank with the same arguments, files and build";
  throw CommAgreedError(os.str());
}

}  // namespace agoq

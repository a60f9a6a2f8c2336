// Start-up consistency check: every rank hashes a text that describes what it is about to run (config, model, data)
// and the ranks compare hashes, so a job whose ranks disagree stops before the first step instead of training
// garbage or deadlocking in mismatched collectives.
#pragma once
#include <cstdint>
#include <string_view>

#include "comm/communicator.h"

namespace agoq {

// Collective. All ranks all-gather the hash of `description`; if any differs from rank 0's, every rank throws the
// same CommAgreedError: "rank 1 runs a different <what> than rank 0 (hash ... vs ...)" (naming each differing rank,
// up to a few). A command hands that failure to comm_fail, so that only rank 0 prints it.
void comm_check_consistent(Communicator& comm, std::string_view description, std::string_view what = "config");

}  // namespace agoq

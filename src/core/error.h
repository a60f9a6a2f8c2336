// Errors: every bad input ends as one agoq::Error whose message names the problem; the CLI prints it on one line
// and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace agoq {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// fail("token file ", path, ": bad magic") throws Error with the parts concatenated.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

}  // namespace agoq

#define AGOQ_CHECK(cond, ...)               \
  do {                                      \
    if (!(cond)) ::agoq::fail(__VA_ARGS__); \
  } while (0)

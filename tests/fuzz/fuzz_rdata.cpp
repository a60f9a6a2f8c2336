// Fuzz target of the R reader (src/data/rdata.cpp), the corpus importer that decodes bytes from outside
// (fuzz_target.h). Under ctest it also runs on seeds built the way R writes them (test_fuzz_rdata.cpp).
//
// Input: one mode byte, then the payload.
//   even mode: the payload is one object as R stores it (gzip .rds/.rdx, a .rdb entry, or a bare "X\n" stream),
//              decoded with r_unserialize(r_decompress(payload)).
//   odd mode:  the payload is a 4-byte big-endian .rdx size, the .rdx bytes, then the .rdb bytes; every object
//              the index names is loaded.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/rdata.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// Touches what a caller would: the names and the named elements, so accessors run on decoded garbage too.
void walk(const agoq::RObject& o) {
  for (const std::string& n : o.names()) (void)o.get(n);
  (void)o.attr("class");
}

void decode_one(std::string_view payload) { walk(*agoq::r_unserialize(agoq::r_decompress(payload, "fuzz"))); }

void decode_db(std::string_view payload) {
  if (payload.size() < 4) return;
  const uint32_t n = uint32_t(uint8_t(payload[0])) << 24 | uint32_t(uint8_t(payload[1])) << 16 |
                     uint32_t(uint8_t(payload[2])) << 8 | uint32_t(uint8_t(payload[3]));
  payload.remove_prefix(4);
  if (n > payload.size()) return;
  const agoq::RLazyLoadDb db(payload.substr(0, n), std::string(payload.substr(n)), "fuzz");
  for (const std::string& name : db.names()) {
    try {  // one bad object must not hide the others from the fuzzer
      walk(*db.load(name));
      (void)db.load_strings(name);
    } catch (const agoq::Error&) {}
  }
}

}  // namespace

namespace agoq::fuzz {

int rdata(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] & 1) decode_db(payload);
    else decode_one(payload);
  } catch (const agoq::Error& e) {
    refused(e);
  }
  return 0;
}

}  // namespace agoq::fuzz

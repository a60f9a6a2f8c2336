#include "tboard/tfrecord.h"

#include <isa-l/crc.h>

#include <algorithm>

namespace agoq {

namespace {

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  // ISA-L's crc32_iscsi takes an int length and leaves the initial and final inversions to the caller.
  uint32_t crc = 0xFFFFFFFFu;
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), size_t(1) << 30);
    crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())), int(n), crc);
    data.remove_prefix(n);
  }
  return ~crc;
}

uint32_t crc32c_masked(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, crc32c_masked(out), 4);  // of the 8 length bytes
  out.append(data);
  append_le(out, crc32c_masked(data), 4);
  return out;
}

}  // namespace agoq

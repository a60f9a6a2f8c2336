// TFRecord framing, the container of TensorBoard's event files: each record is its length (u64, little-endian), the
// masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data (both u32, little-endian). Readers
// (TensorBoard, TensorFlow) check both checksums and stop at the first record that fails.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace agoq {

// CRC-32C (Castagnoli, as iSCSI and ext4): crc32c("123456789") = 0xE3069283. Computed by ISA-L.
uint32_t crc32c(std::string_view data);

// TFRecord's masked form of a CRC32C: rotated right by 15 bits plus a constant, so that a CRC over data that holds
// CRCs does not degenerate.
uint32_t crc32c_masked(std::string_view data);

// `data` as one framed record, ready to append to a file.
std::string tfrecord_frame(std::string_view data);

}  // namespace agoq

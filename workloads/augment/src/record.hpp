// The output records: a 24-byte header (magic, header version, padding, image id, payload length,
// CRC32 of the payload; little-endian as this x86-64 host writes it), the PNG payload, and zeros
// up to the method's record alignment (1 but for direct I/O, whose requests must be aligned). Records sit back
// to back in one file per method and run, in the order their offsets were taken (thread timing).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace augment {

constexpr std::uint32_t kRecordMagic = 0x41494154;  // "TAIA" in the file
constexpr std::uint32_t kRecordVersion = 1;

struct RecordHeader {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t align_log2;  // the record is zero-padded to a multiple of 2^align_log2 bytes
  std::uint64_t id;
  std::uint32_t length;  // payload bytes after the header
  std::uint32_t crc32;   // zlib's CRC-32 of the payload
};
static_assert(sizeof(RecordHeader) == 24, "the header is 24 bytes on disk");

std::uint32_t crc32_of(const void* data, std::size_t n);

// Builds header + payload (+ zeros up to a multiple of `alignment`, a power of two) into `out`.
void make_record(std::uint64_t id, const std::vector<unsigned char>& payload, std::vector<unsigned char>& out,
                 std::size_t alignment = 1);

struct RecordInfo {
  std::uint32_t length;
  std::uint32_t crc32;
};

struct VerifyResult {
  bool ok = false;
  std::string error;                         // the first problem found
  std::map<std::uint64_t, RecordInfo> records;  // by image id
  std::uint64_t bytes = 0;
};

// Reads `path` back: every record's magic, length and CRC, zero padding, no id twice, no bytes
// after the last record; when expected_images > 0, ids 0..expected_images-1 must all be present.
// With decode_payloads, every payload must also decode as a PNG.
VerifyResult verify_file(const std::string& path, std::uint64_t expected_images, bool decode_payloads = false);

}  // namespace augment

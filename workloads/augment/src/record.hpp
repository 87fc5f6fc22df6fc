// The output records: a 24-byte header (magic, header version, image id, payload length, CRC32 of
// the payload; little-endian as this x86-64 host writes it) and the PNG payload. Records sit back
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
  std::uint32_t version;
  std::uint64_t id;
  std::uint32_t length;  // payload bytes after the header
  std::uint32_t crc32;   // zlib's CRC-32 of the payload
};
static_assert(sizeof(RecordHeader) == 24, "the header is 24 bytes on disk");

std::uint32_t crc32_of(const void* data, std::size_t n);

// Builds header + payload into `out` (cleared first).
void make_record(std::uint64_t id, const std::vector<unsigned char>& payload, std::vector<unsigned char>& out);

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

// Reads `path` back: every record's magic, length and CRC, no id twice, no bytes after the last
// record; when expected_images > 0, ids 0..expected_images-1 must all be present.
VerifyResult verify_file(const std::string& path, std::uint64_t expected_images);

}  // namespace augment

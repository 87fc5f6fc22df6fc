// The output artifact of a run, as a next stage reads it:
// - record files: back-to-back records, each a 24-byte header (magic, header version, padding,
//   image id, payload length, CRC-32 of the payload; little-endian as this x86-64 host writes it),
//   the PNG payload, and zeros up to the method's record alignment (1 but for direct I/O, whose
//   requests must be aligned), in the order their offsets were taken (thread timing);
// - one index per record file, `<file>.idx`: a line per record (image id, copy number, offset,
//   length of the record as written, CRC32C of those bytes), sorted by offset;
// - one manifest per run, `<run>.run`: what produced the files and how to compare them.
// The MPI mode writes one manifest per job (rank 0, after stage 2) over every rank's files; a
// shared file (--shared-file) has one index per rank, `<file>.rank<p>.idx`, and zeros between
// records (the unused tails of chunks) and after the last one (direct-I/O padding kept at the
// end of a file other processes write).
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

// zlib's CRC-32 (the header's) and CRC32C (Castagnoli, the index's; Boost.CRC).
std::uint32_t crc32_of(const void* data, std::size_t n);
std::uint32_t crc32c_of(const void* data, std::size_t n);

// Builds header + payload (+ zeros up to a multiple of `alignment`, a power of two) into `out`.
void make_record(std::uint64_t id, const std::vector<unsigned char>& payload, std::vector<unsigned char>& out,
                 std::size_t alignment = 1);

// One record found in a file.
struct ScannedRecord {
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;   // payload bytes
  std::uint32_t crc32 = 0;    // the header's (checked against the payload)
  std::uint64_t size = 0;     // header + payload + padding: the bytes of the record as written
  std::uint32_t crc32c = 0;   // of those `size` bytes
};

struct FileScan {
  bool ok = false;
  std::string error;  // the first problem found
  std::vector<ScannedRecord> records;  // in file order
  std::uint64_t bytes = 0;
};

// Reads a record file back: every record's magic, length and CRC, zero padding, no bytes after
// the last record. With decode_payloads, every payload must also decode as a PNG. With
// zero_gaps (a shared file), runs of zero bytes between records and after the last one are
// skipped (a header starts with its magic, whose first byte is not zero); any other byte there
// is a bad header.
FileScan scan_file(const std::string& path, bool decode_payloads, bool zero_gaps = false);

// The index of one record file.
struct IndexEntry {
  std::uint64_t id = 0;
  std::uint32_t copy = 0;  // 0..amplify-1: the same record written again (the paper's amplification)
  std::uint64_t offset = 0;
  std::uint64_t size = 0;  // the record's bytes as written (header, payload, padding)
  std::uint32_t crc32c = 0;
};

// Checks one record read back from where its index entry says (the MPI mode's next stage, which
// reads records at their offsets rather than scanning a file): `n` must be the entry's size, the
// bytes' CRC32C the entry's, the header's magic, id, length and payload CRC-32 right, the padding
// zero, and (decode_payload) the payload a PNG. False and *err (naming the offset) otherwise.
bool check_record(const unsigned char* bytes, std::size_t n, const IndexEntry& entry, bool decode_payload,
                  std::string* err);
std::string index_path(const std::string& record_file);
// Writes / reads `<record_file>.idx` (text: a header line, then "id copy offset size crc32c"
// per record, sorted by offset). False and *err on failure.
bool write_index(const std::string& record_file, std::vector<IndexEntry> entries, std::string* err);
bool read_index(const std::string& record_file, std::vector<IndexEntry>& entries, std::string* err);

// What produced a run's files. `content` names everything the records' bytes depend on (seed,
// input set, PNG level, grey); runs with equal content must hold the same records.
struct RunManifest {
  std::string method;      // as asked, e.g. "tai-def:uring"
  std::string note;        // what really ran
  std::string content;
  std::uint64_t inputs = 0;   // images in the input set: every id is below this
  std::uint64_t images = 0;   // distinct images written (inputs that did not decode excluded)
  unsigned amplify = 1;
  std::vector<std::string> files;  // record files, relative to the manifest's directory
  // 0: each file has one index `<file>.idx` and its records back to back. N > 0 (the MPI mode's
  // shared files): N processes wrote each file, each file's index is `<file>.rank<p>.idx` for
  // p < N together, and zeros may lie between and after the records.
  unsigned shared_writers = 0;
};
bool write_manifest(const std::string& path, const RunManifest& m, std::string* err);
bool read_manifest(const std::string& path, RunManifest& m, std::string* err);

struct RecordInfo {
  std::uint32_t length;
  std::uint32_t crc32;
};

struct RunCheck {
  bool ok = false;
  std::string error;
  std::map<std::uint64_t, RecordInfo> records;  // by image id
  std::uint64_t records_read = 0;               // copies included
  std::uint64_t bytes = 0;
};

// Verifies one run from its manifest: every file scans (CRCs, padding, PNG decode when asked;
// zero gaps in shared files), its index (or its writers' indexes together) lists exactly its records (offset, size, CRC32C of the bytes), every image id is
// there `amplify` times over the run's files, all copies alike, `images` distinct ids, each below
// `inputs`.
RunCheck verify_run(const std::string& manifest_path, bool decode_payloads);

// Verifies every run and checks that runs with the same content hold the same records, by image
// id. Prints one line per problem and a summary; true when everything holds.
bool verify_runs(const std::vector<std::string>& manifest_paths, bool decode_payloads);

}  // namespace augment

// Where the serial loop gets its records from: the augmentation pipeline's decode, transform and
// encode (shared with tai-augment), either computed inside the loop or prepared before the clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "image.hpp"
#include "method.hpp"
#include "run.hpp"

namespace serial {

// One record ready to be written: its bytes (aligned to the record alignment when direct I/O
// needs it) and what the index of the output file says about it.
struct PreparedRecord {
  const void* data = nullptr;
  std::size_t size = 0;
  std::uint64_t id = 0;
  std::uint32_t crc32c = 0;  // of the `size` bytes, for the index a later stage checks
};

// A source of records by image position. make() returns false when the image does not decode
// (the loop counts it as skipped). The bytes stay valid until the next make().
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual bool make(std::size_t position, PreparedRecord& out) = 0;
};

// Decodes, transforms and encodes each image when asked: the compute of the naive program.
class ComputedRecords final : public RecordSource {
 public:
  ComputedRecords(const std::vector<augment::EncodedImage>& input, const augment::RunConfig& config, std::size_t alignment)
      : input_(input), config_(config), alignment_(alignment) {}
  bool make(std::size_t position, PreparedRecord& out) override;

 private:
  const std::vector<augment::EncodedImage>& input_;
  const augment::RunConfig& config_;
  const std::size_t alignment_;
  augment::Bytes record_;
  augment::AlignedBuffer aligned_;
};

// Every record made before the clock starts (the io-only mode): make() only hands them out.
class PrecomputedRecords final : public RecordSource {
 public:
  // False (and *err) when the aligned copies cannot be allocated.
  bool prepare(const std::vector<augment::EncodedImage>& input, const augment::RunConfig& config, std::size_t alignment,
               std::string* err);
  bool make(std::size_t position, PreparedRecord& out) override;
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    bool made = false;
    PreparedRecord record;
  };
  std::vector<Entry> entries_;
  std::vector<augment::AlignedBuffer> storage_;
  std::uint64_t bytes_ = 0;
};

}  // namespace serial

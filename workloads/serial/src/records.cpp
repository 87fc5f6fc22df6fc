#include "records.hpp"

#include "record.hpp"

namespace serial {

bool ComputedRecords::make(std::size_t position, PreparedRecord& out) {
  const augment::EncodedImage& in = input_[position];
  if (!augment::make_output_record(in, config_, record_, nullptr, alignment_)) return false;
  out.id = in.id;
  out.size = record_.size();
  out.crc32c = augment::crc32c_of(record_.data(), record_.size());
  out.data = record_.data();
  if (alignment_ > 1) {
    // O_DIRECT needs the memory aligned too, which a std::vector does not promise.
    if (!aligned_.assign(record_.data(), record_.size())) return false;
    out.data = aligned_.data();
  }
  return true;
}

bool PrecomputedRecords::prepare(const std::vector<augment::EncodedImage>& input, const augment::RunConfig& config,
                                 std::size_t alignment, std::string* err) {
  entries_.assign(input.size(), {});
  storage_.clear();
  storage_.resize(input.size());
  bytes_ = 0;
  augment::Bytes record;
  for (std::size_t i = 0; i < input.size(); ++i) {
    // An image that does not decode is skipped here as the computing modes skip it.
    if (!augment::make_output_record(input[i], config, record, nullptr, alignment)) continue;
    if (!storage_[i].assign(record.data(), record.size())) {
      if (err) *err = "cannot allocate " + std::to_string(record.size()) + " bytes for a prepared record";
      return false;
    }
    entries_[i].made = true;
    entries_[i].record = {storage_[i].data(), record.size(), input[i].id,
                          augment::crc32c_of(record.data(), record.size())};
    bytes_ += record.size();
  }
  return true;
}

bool PrecomputedRecords::make(std::size_t position, PreparedRecord& out) {
  if (position >= entries_.size() || !entries_[position].made) return false;
  out = entries_[position].record;
  return true;
}

}  // namespace serial

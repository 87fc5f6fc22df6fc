// The engine writes of one file as the recording engine logged them, indexed for the question
// the durability and barrier tests ask: by when had every byte of a range reached the engine?
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engines/recording/recording_engine.hpp"

namespace tai::test {

/// "Never": no such engine event.
inline constexpr std::uint64_t kNever = UINT64_MAX;

/// The engine writes of one file, indexed by 4 KiB bucket, answering: by when had every byte of
/// [offset, offset + length) been written by engine writes submitted at or after `after`?
class WriteCoverage {
 public:
  static constexpr unsigned kBucketShift = 12;

  WriteCoverage(const std::vector<engines::RecordEntry>& log, std::uint64_t file_id) {
    for (const engines::RecordEntry& e : log) {  // in submit_seq order
      if (e.kind != engines::RecordEntry::Kind::request || e.file_id != file_id || e.op != Op::write) continue;
      if (!e.reaped() || e.result <= 0) continue;  // only bytes that were written count
      const std::uint64_t done = static_cast<std::uint64_t>(e.result);
      const std::size_t index = writes_.size();
      writes_.push_back({e.offset, done, e.submit_seq, e.complete_seq});
      for (std::uint64_t b = e.offset >> kBucketShift; b <= (e.offset + done - 1) >> kBucketShift; ++b)
        buckets_[b].push_back(index);
    }
  }

  /// The latest, over the bytes of the range, of the earliest completion of an engine write
  /// submitted at or after `after` that wrote that byte; kNever when some byte has none
  /// (`uncovered` then receives the first such byte).
  /// The earliest completion of an engine write submitted at or after `after` that wrote byte
  /// `at`; kNever when none did.
  std::uint64_t byte_written(std::uint64_t at, std::uint64_t after) const {
    auto it = buckets_.find(at >> kBucketShift);
    if (it == buckets_.end()) return kNever;
    const std::vector<std::size_t>& list = it->second;  // in submit order
    auto first = std::lower_bound(list.begin(), list.end(), after, [&](std::size_t i, std::uint64_t seq) {
      return writes_[i].submit_seq < seq;
    });
    std::uint64_t best = kNever;
    for (; first != list.end(); ++first) {
      const Piece& w = writes_[*first];
      if (w.submit_seq >= best) break;  // submitted after the best completion: cannot beat it
      if (w.offset <= at && at < w.offset + w.length) best = std::min(best, w.complete_seq);
    }
    return best;
  }

  std::uint64_t covered_by(std::uint64_t offset, std::uint64_t length, std::uint64_t after,
                           std::uint64_t* uncovered = nullptr) const {
    std::vector<std::uint64_t> earliest(length, kNever);
    const std::uint64_t end = offset + length;
    for (std::uint64_t b = offset >> kBucketShift; b <= (end - 1) >> kBucketShift; ++b) {
      auto it = buckets_.find(b);
      if (it == buckets_.end()) continue;
      const std::uint64_t lo = std::max(offset, b << kBucketShift);
      const std::uint64_t hi = std::min(end, (b + 1) << kBucketShift);
      const std::vector<std::size_t>& list = it->second;  // in submit order
      auto first = std::lower_bound(list.begin(), list.end(), after, [&](std::size_t i, std::uint64_t seq) {
        return writes_[i].submit_seq < seq;
      });
      // Candidates come in submit order and each completes after it was submitted: once every
      // byte of [lo, hi) has a completion and a candidate was submitted after the latest of
      // them, no later candidate can improve any byte. This keeps the check linear in practice.
      std::uint64_t uncovered = hi - lo, latest_here = kNever;
      for (; first != list.end(); ++first) {
        const Piece& w = writes_[*first];
        if (uncovered == 0 && w.submit_seq >= latest_here) break;
        const std::uint64_t from = std::max(lo, w.offset), to = std::min(hi, w.offset + w.length);
        for (std::uint64_t x = from; x < to; ++x) {
          std::uint64_t& e = earliest[x - offset];
          if (e == kNever) --uncovered;
          e = std::min(e, w.complete_seq);
        }
        if (uncovered == 0) latest_here = *std::max_element(earliest.begin() + (lo - offset), earliest.begin() + (hi - offset));
      }
    }
    std::uint64_t latest = 0;
    for (std::uint64_t i = 0; i < length; ++i) {
      if (earliest[i] == kNever) {
        if (uncovered) *uncovered = offset + i;
        return kNever;
      }
      latest = std::max(latest, earliest[i]);
    }
    return latest;
  }

 private:
  struct Piece {
    std::uint64_t offset, length, submit_seq, complete_seq;
  };
  std::vector<Piece> writes_;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> buckets_;
};

}  // namespace tai::test

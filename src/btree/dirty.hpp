// src/btree/dirty.hpp - the dirty byte ranges of one cache block.
//
// A block keeps up to kMax disjoint, sorted, non-touching ranges [begin, end) of bytes that are
// newer than the file (block-relative offsets). Adding a range coalesces it with every range it
// overlaps or touches ("merge"). When that would leave more than kMax ranges, the caller decides
// (the tiny-write rule, see tai/btree.hpp): either bridge the smallest gap (add() does that: the
// gap's clean bytes are then written back too) or send the write to the engine directly.
//
// Thread-safety: none; a DirtyRanges belongs to one tree node and only that node's steps touch it.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>

namespace tai::detail {

class DirtyRanges {
 public:
  static constexpr int kMax = 4;
  struct Range {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;  // exclusive
  };
  struct AddResult {
    int joined = 0;              ///< existing ranges the new one coalesced with
    std::uint64_t bridged = 0;   ///< clean bytes turned dirty by bridging a gap (0: no bridge)
  };

  bool empty() const noexcept { return n_ == 0; }
  int count() const noexcept { return n_; }
  const Range& operator[](int i) const noexcept { return r_[i]; }

  std::uint64_t bytes() const noexcept {
    std::uint64_t s = 0;
    for (int i = 0; i < n_; ++i) s += r_[i].end - r_[i].begin;
    return s;
  }

  /// [b, e) lies inside one dirty range.
  bool covers(std::uint64_t b, std::uint64_t e) const noexcept {
    for (int i = 0; i < n_; ++i)
      if (r_[i].begin <= b && e <= r_[i].end) return true;
    return false;
  }

  /// Bytes of [b, e) that are already dirty.
  std::uint64_t overlap(std::uint64_t b, std::uint64_t e) const noexcept {
    std::uint64_t s = 0;
    for (int i = 0; i < n_; ++i) {
      const std::uint64_t lo = std::max(b, r_[i].begin), hi = std::min(e, r_[i].end);
      if (lo < hi) s += hi - lo;
    }
    return s;
  }

  /// How many ranges there would be after adding [b, e) with coalescing only (no bridging).
  int count_after(std::uint64_t b, std::uint64_t e) const noexcept {
    Range out[kMax + 1];
    int joined = 0;
    return merged(b, e, out, joined);
  }

  /// The smallest gap between the ranges there would be after adding [b, e) (max() if < 2).
  std::uint64_t smallest_gap_after(std::uint64_t b, std::uint64_t e) const noexcept {
    Range out[kMax + 1];
    int joined = 0;
    const int k = merged(b, e, out, joined);
    std::uint64_t g = std::numeric_limits<std::uint64_t>::max();
    for (int i = 0; i + 1 < k; ++i) g = std::min(g, out[i + 1].begin - out[i].end);
    return g;
  }

  /// Adds [b, e) (b < e), coalescing; if more than kMax ranges would remain, bridges the
  /// smallest gap (the caller has checked that the block's clean bytes are valid).
  AddResult add(std::uint64_t b, std::uint64_t e) noexcept {
    assert(b < e);
    Range out[kMax + 1];
    AddResult res;
    int k = merged(b, e, out, res.joined);
    if (k > kMax) {
      int at = 0;
      for (int i = 1; i + 1 < k; ++i)
        if (out[i + 1].begin - out[i].end < out[at + 1].begin - out[at].end) at = i;
      res.bridged = out[at + 1].begin - out[at].end;
      out[at].end = out[at + 1].end;
      for (int i = at + 1; i + 1 < k; ++i) out[i] = out[i + 1];
      --k;
    }
    std::copy(out, out + k, r_);
    n_ = static_cast<std::uint8_t>(k);
    return res;
  }

  /// The whole block [0, size) is dirty.
  void assign_all(std::uint64_t size) noexcept {
    r_[0] = {0, size};
    n_ = 1;
  }
  void clear() noexcept { n_ = 0; }

  /// Forgets the first k ranges (after their write-back succeeded).
  void erase_front(int k) noexcept {
    assert(k >= 0 && k <= n_);
    std::copy(r_ + k, r_ + n_, r_);
    n_ = static_cast<std::uint8_t>(n_ - k);
  }

  /// The first clean byte range inside [from, limit) (gaps between dirty ranges), or false.
  bool next_clean(std::uint64_t from, std::uint64_t limit, std::uint64_t& b, std::uint64_t& e) const noexcept {
    std::uint64_t pos = from;
    for (int i = 0; i < n_ && pos < limit; ++i) {
      if (r_[i].end <= pos) continue;
      if (r_[i].begin > pos) {
        b = pos;
        e = std::min(r_[i].begin, limit);
        return true;
      }
      pos = r_[i].end;
    }
    if (pos < limit) {
      b = pos;
      e = limit;
      return true;
    }
    return false;
  }

  /// Internal consistency (sorted, disjoint, non-touching, non-empty, within `size`).
  bool well_formed(std::uint64_t size) const noexcept {
    for (int i = 0; i < n_; ++i) {
      if (r_[i].begin >= r_[i].end || r_[i].end > size) return false;
      if (i > 0 && r_[i - 1].end >= r_[i].begin) return false;
    }
    return n_ <= kMax;
  }

 private:
  // The ranges plus [b, e), sorted, with overlapping or touching ranges coalesced.
  int merged(std::uint64_t b, std::uint64_t e, Range* out, int& joined) const noexcept {
    int k = 0;
    Range cur{b, e};
    bool placed = false;
    for (int i = 0; i < n_; ++i) {
      const Range& r = r_[i];
      if (placed) {
        out[k++] = r;
      } else if (r.end < cur.begin) {
        out[k++] = r;
      } else if (r.begin > cur.end) {
        out[k++] = cur;
        placed = true;
        out[k++] = r;
      } else {
        cur.begin = std::min(cur.begin, r.begin);
        cur.end = std::max(cur.end, r.end);
        ++joined;
      }
    }
    if (!placed) out[k++] = cur;
    return k;
  }

  Range r_[kMax];
  std::uint8_t n_ = 0;
};

}  // namespace tai::detail

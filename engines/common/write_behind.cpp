// engines/common/write_behind.cpp: see write_behind.hpp.
#include "engines/common/write_behind.hpp"

#include <fcntl.h>

namespace tai::detail {

void WriteBehind::written(int fd, std::uint64_t offset, std::uint64_t n, std::uint64_t every) noexcept {
  if (fd < 0 || n == 0 || every == 0) return;
  const std::uint64_t end = offset + n;
  std::uint64_t high = high_.load(std::memory_order_relaxed);
  while (high < end && !high_.compare_exchange_weak(high, end, std::memory_order_relaxed)) {
  }
  if (high < end) high = end;
  std::uint64_t cur = unstarted_.load(std::memory_order_relaxed);
  bool crossed = false;
  for (;;) {
    crossed = cur + n >= every;
    if (unstarted_.compare_exchange_weak(cur, crossed ? 0 : cur + n, std::memory_order_relaxed)) break;
  }
  if (!crossed || high <= every) return;
  // Only what no earlier call started: of two callers at once, each takes its own range.
  const std::uint64_t to = high - every;
  std::uint64_t from = started_.load(std::memory_order_relaxed);
  while (from < to && !started_.compare_exchange_weak(from, to, std::memory_order_relaxed)) {
  }
  if (from >= to) return;
  // Scattered writes: the range is left to the kernel's timer or the next fsync (see the header).
  if (to - from > kScatterFactor * (cur + n)) return;
  // Pages already under write-back are skipped (no WAIT flags).
  (void)::sync_file_range(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), SYNC_FILE_RANGE_WRITE);
}

}  // namespace tai::detail

// The kernel's page states of a range of one file, from cachestat(2) (Linux 6.5): how many pages
// are cached, dirty and under write-back. The tests of write-behind read them to tell whether a
// write-back was started, has ended, or was left to the fsync. Any descriptor of the file will
// do (the states are the file's, not the descriptor's).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

namespace tai::test {

/// struct cachestat of linux/mman.h (not installed by every linux-libc-dev).
struct PageStates {
  std::uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/// The states of [off, off + len) of fd (len 0: to the end of the file); false with errno when
/// the kernel has no cachestat(2) (ENOSYS) or refuses the descriptor. Thread-safe.
inline bool page_states(int fd, std::uint64_t off, std::uint64_t len, PageStates& out) {
  constexpr long kCachestat = 451;  // the same number on every architecture (the common table)
  struct {
    std::uint64_t off, len;
  } range{off, len};
  std::memset(&out, 0, sizeof out);
  return ::syscall(kCachestat, fd, &range, &out, 0u) == 0;
}

/// Dirty plus under-write-back pages of [0, len) of fd, or -1 without cachestat(2). Thread-safe.
inline long pages_not_yet_written(int fd, std::uint64_t len) {
  PageStates st{};
  if (!page_states(fd, 0, len, st)) return -1;
  return static_cast<long>(st.nr_dirty + st.nr_writeback);
}

/// Polls [0, len) of fd until no page is dirty or under write-back (the device has answered
/// for every started page, written or failed) or `limit` passes; returns pages_not_yet_written
/// as last seen (0: done; -1: no cachestat(2), nothing to poll). Thread-safe.
inline long wait_until_written(int fd, std::uint64_t len, std::chrono::seconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  long left = pages_not_yet_written(fd, len);
  while (left > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    left = pages_not_yet_written(fd, len);
  }
  return left;
}

}  // namespace tai::test

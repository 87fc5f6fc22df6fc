// engines/common/write_behind.hpp - EngineOptions::start_writeback_bytes for engines whose
// buffered writes go to the page cache through a descriptor (posix, uring, libaio, and the
// descriptors under the cstdio and fstream streams).
#pragma once

#include <atomic>
#include <cstdint>

#include "tai/engine.hpp"

namespace tai::detail {

/// One file's write-behind count: after every `every` bytes written, the kernel is asked to start
/// writing the file's dirty pages from where the last start ended up to the highest written end
/// less one interval (sync_file_range with SYNC_FILE_RANGE_WRITE: no wait, nothing made
/// durable). The last interval stays in the page cache, where a prompt overwrite (a record
/// written twice, a header rewritten) meets it instead of sending both versions to the device.
/// Each range is started once: a page overwritten below what was started stays for the kernel
/// (its dirty timeout) or the next fsync, as without write-behind. Starting from 0 each time
/// would send a page that random overwrites keep dirtying to the device again after every
/// interval: 512 B overwrites at random offsets of a cached 64 MiB file (tai-bench overhead)
/// ran at 0.23x a plain pwrite loop that way, and at 0.86-0.87x with each range started once.
/// A range more than kScatterFactor times as long as the bytes written since the last start is
/// passed over (marked started, not started): the writes are scattered over a span far larger
/// than themselves, and the call would queue every dirty page of that span while the calling
/// thread, the one that executes the writes, waited for the device. In that benchmark the first
/// start of the 63 MiB below its random writes held the worker for 41 ms of a 300 ms run. A
/// first write far into a file (an append to a large one) is passed over the same way, once;
/// the writes after it start as a sequential writer's do. Up to 32 ranks writing strided chunks
/// of one shared file still start the pages below them.
/// Thread-safety: written() may be called from any number of threads at once (compare-and-swap
/// loops: exactly one caller sees each crossing and makes the call).
class WriteBehind {
 public:
  static constexpr std::uint64_t kScatterFactor = 32;

  /// Whether a file opened with these capabilities has page-cache writes to start (not O_DIRECT,
  /// not O_DSYNC, not Open::dontneed: those leave nothing dirty behind).
  static bool applies(const FileCapabilities& caps, const OpenMode& mode, std::uint64_t every) noexcept {
    return every != 0 && !caps.direct && !caps.dsync && !has(mode.flags, Open::dontneed);
  }

  /// After a completed write of n bytes at `offset` to descriptor fd. Errors of the call are
  /// left for the next fsync to report (the kernel keeps a write-back error for it); it may block
  /// while the device's queue is full, as the write itself may under the kernel's dirty
  /// throttling.
  void written(int fd, std::uint64_t offset, std::uint64_t n, std::uint64_t every) noexcept;

 private:
  // Relaxed, all three: counts and bounds changed only by compare-and-swap or by the one caller
  // that saw a crossing; they order nothing (sync_file_range acts on whatever the kernel holds
  // when it is called, and the writes it follows completed on the calling thread or were reaped
  // by it).
  std::atomic<std::uint64_t> unstarted_{0};  // bytes written since the last start
  std::atomic<std::uint64_t> high_{0};       // the highest end of a write so far
  std::atomic<std::uint64_t> started_{0};    // the end of the ranges started so far (only grows)
};

}  // namespace tai::detail

// src/detail/small_copy_pool.hpp - the process-wide home of File::write's small copies.
//
// A write of at most Task::kKeepDataBytes is copied into a buffer its task keeps for the next
// write (4 KiB or 16 KiB). Taken from the program's allocator, those buffers shared its extents
// with the program's own short-lived allocations: the serial workload's zlib state (64 KiB
// pieces made and freed for every image) then found its freed extents carved into write copies
// and faulted in fresh ones: about 2,400 page faults more in zlib in a run writing 1.08 GiB than
// the same program without TAI, besides the copies' own first touches. Here the copies come from 2 MiB chunks
// advised for transparent huge pages, apart from the program's heap, and are reused from free
// lists; nothing is returned to the kernel while the process lives (the copies a process has at
// once are bounded by the controllers' write-copy budgets and the tasks the pool keeps, and the
// chunks by kMaxMappedBytes, past which copies come from the allocator as before).
// Built with AddressSanitizer, every copy comes from the allocator, so that a use after free of
// one is still caught.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tai/detail/aligned_buffer.hpp"

namespace tai::detail {

/// Thread-safety: every member may be called from any thread (a mutex per size class; taken
/// only when a task has no copy of the size it needs, and when one is freed).
class SmallCopyPool final : public BufferHome {
 public:
  static constexpr std::size_t kSmallBytes = 4096;        ///< the class of writes up to 4 KiB
  static constexpr std::size_t kLargeBytes = 16 * 1024;   ///< Task::kKeepDataBytes
  static constexpr std::size_t kChunkBytes = std::size_t{2} << 20;
  static constexpr std::uint64_t kMaxMappedBytes = std::uint64_t{256} << 20;

  /// The process's pool: made at first use, never destroyed (tasks freed by exit handlers
  /// and by other static destructors still give their copies back).
  static SmallCopyPool& instance() noexcept;

  /// A buffer for a copy of n bytes (0 < n <= kLargeBytes): kSmallBytes or kLargeBytes long,
  /// aligned to 64 bytes or more; from the pool, else from the allocator; empty when memory is
  /// out.
  AlignedBuffer take(std::size_t n) noexcept;

  /// Whether b's memory is this pool's (a task keeps such a copy; memory another home lent
  /// goes back to it).
  static bool owns(const AlignedBuffer& b) noexcept { return b.home() == &instance(); }

  void take_back(std::byte* data, std::size_t size) noexcept override;

  /// Bytes of chunks mapped so far (snapshot).
  std::uint64_t mapped_bytes() const noexcept;
  /// Bytes on the free lists (snapshot).
  std::uint64_t free_bytes() const noexcept;

 private:
  SmallCopyPool() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace tai::detail

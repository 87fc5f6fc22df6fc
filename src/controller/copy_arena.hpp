// CopyArena: the pages large write copies live in, mapped by the controller and kept.
//
// Why not the allocator: a large copy lives from File::write until its write is in the cache or
// at the engine, then it is freed on a worker thread. Through malloc, that churn (sizes that vary
// with every record, frees on another thread) made the allocator give pages back to the kernel
// and fault them in again: in the image workload at two threads, the copies' own faults plus the
// workload's refaults of pages the allocator had returned were most of TAI's faults above posix
// (perf record -e page-faults, docs/results/cache-cost.md). The arena reserves its cap (the
// write-copy budget) as one mapping, opens it 4 MiB chunk by chunk as copies need room, carves
// page runs out of the open part best-fit, merges freed neighbours, and never returns a page to
// the kernel while the controller lives, so its memory is bounded like the copies it replaces. A copy the arena cannot hold (above the cap, or
// no run fits) comes from the allocator as before.
//
// Lifetime: the controller owns one reference and every lent buffer one more; the arena unmaps
// its reservation and deletes itself when the last is dropped, so a buffer that outlives its
// controller (a receipt kept by the program) stays valid.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "tai/detail/aligned_buffer.hpp"

namespace tai::detail {

/// Thread-safety: every member may be called from any thread (one mutex, held for the free-run
/// bookkeeping, never across a copy); statistics are snapshots.
class CopyArena final : public BufferHome {
 public:
  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kChunk = std::size_t{4} << 20;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  /// A new arena that lends at most `cap` bytes; the caller owns one reference (drop()). With
  /// `huge_pages` its reservation is advised MADV_HUGEPAGE (ControllerOptions::huge_pages): the
  /// pages of a copy are touched first by the memcpy in File::write, on the program's thread,
  /// and huge pages make that 2 faults per 4 MiB chunk instead of 1,024 where the kernel's
  /// transparent huge pages allow it. The reservation's first 2 MiB are not advised (a short
  /// process's first copies then clear 4 KiB pages, not a 2 MiB one).
  static CopyArena* create(std::uint64_t cap, bool huge_pages = false);

  /// n bytes (n > 0) rounded up to whole pages, page-aligned, from the arena; an empty buffer
  /// when the arena cannot hold it (the caller allocates elsewhere). `mapped_new` is set when a
  /// new chunk of the reservation had to be opened for it.
  AlignedBuffer take(std::size_t n, bool& mapped_new) noexcept;

  /// Drops the owner's reference (the controller's, at its destruction).
  void drop() noexcept;

  void take_back(std::byte* data, std::size_t size) noexcept override;

  /// Bytes of the reservation opened so far (chunks the arena has lent from).
  std::uint64_t mapped_bytes() const noexcept { return mapped_.load(std::memory_order_relaxed); }
  std::uint64_t free_bytes() const noexcept { return free_.load(std::memory_order_relaxed); }

 private:
  CopyArena(std::uint64_t cap, bool huge_pages) noexcept;
  ~CopyArena();
  void unref() noexcept;
  // Under mu_: adds [p, p + n) to the free runs, merged with the runs it touches.
  void insert_free_locked(std::byte* p, std::size_t n);

  const std::uint64_t cap_;
  std::byte* base_ = nullptr;  // the reservation (nullptr: mmap refused; every take is refused)
  std::size_t reserved_ = 0;   // cap_ rounded up to the huge page
  std::mutex mu_;
  std::map<std::byte*, std::size_t> free_runs_;  // by address; under mu_
  // acq_rel on the decrement: the last dropper's delete happens after every other holder's use
  // of the arena (their decrements release, its acquires).
  std::atomic<std::uint64_t> refs_{1};
  // Statistics, written under mu_, read without it: relaxed snapshots, nothing is published
  // through them.
  std::atomic<std::uint64_t> mapped_{0};
  std::atomic<std::uint64_t> free_{0};
};

}  // namespace tai::detail

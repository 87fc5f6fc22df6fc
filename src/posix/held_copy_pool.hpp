// src/posix/held_copy_pool.hpp - memory for the bytes the `order` fsync mode holds back, reused.
//
// Why a pool: under TAI_FSYNC=order every write made while an earlier epoch is on its way to the
// device is copied aside, and with the log of epochs each batch is encoded into one buffer that
// the controller frees once it is written. From the C allocator that churn (a copy per write,
// freed on the order thread; a batch buffer of up to a few hundred KiB, freed on a worker) cost
// new pages again and again (SQLite in WAL mode, 1,000 transactions under the log: 2,194 page
// faults against 1,401 without syncs), and the held copy was copied once more into the cache's
// own write copy. The pool lends blocks of a few sizes (four per power of two) as AlignedBuffers
// whose BufferHome it is: a block comes back here when its last holder drops it (the order
// thread, or the controller after the write), and a held write moves into the cache without a
// second copy (File::write(offset, Buffer&&)).
//
// Blocks below 64 KiB (the held copies) are carved from one slab of kSlabBytes, mapped at the
// first such block and kept for the process's life, whose part past its first 256 KiB is advised
// for transparent huge pages (set_huge_pages): in a short burst of writes every held copy is new
// memory until the first ones come back, and a page fault per 4 KiB copy was the largest cost of
// a loop of 4 KiB writes each followed by fdatasync under the log (on a 2-vCPU AMD EPYC VM, where
// a first touch of a page costs microseconds). The first 256 KiB keep small pages: a process
// that holds a few writes does not clear 2 MiB for them. Once the slab is used up,
// blocks come from the allocator.
//
// Bound: an allocator block coming back is kept while the spare allocator blocks stay within
// kKeepBytes; past it, spare allocator blocks of other sizes go back to the allocator first (the
// sizes in use win), then the block itself. Slab blocks always stay. So the pool holds at most
// kKeepBytes + kSlabBytes. Blocks larger than kLargest are not pooled (taken from and given
// back to the allocator). Blocks below 64 KiB are aligned to 64 bytes (packed), larger ones to
// pages.
//
// Thread-safety: every member may be called from any thread (one mutex, held for the free-list
// bookkeeping only, never across a copy or a C allocation; the slab's one mmap is made under it).
// The pool is never destroyed: a block may come back from a controller's worker after the exit
// handlers ran.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "tai/buffer.hpp"
#include "tai/detail/aligned_buffer.hpp"

namespace tai::posix::detail {

class HeldCopyPool final : public tai::detail::BufferHome {
 public:
  static constexpr std::size_t kSmallestShift = 9;  // 512 B
  static constexpr std::size_t kLargestShift = 22;  // 4 MiB
  static constexpr std::size_t kLargest = std::size_t{1} << kLargestShift;
  static constexpr std::size_t kKeepBytes = std::size_t{16} << 20;
  static constexpr std::size_t kSlabBytes = kKeepBytes;
  static constexpr std::size_t kSlabSmallPagesBytes = std::size_t{256} << 10;

  /// The process's pool.
  static HeldCopyPool& instance() noexcept;

  /// A block of at least n bytes (n > 0): its size() is the block's capacity. Empty when the
  /// allocator has no memory.
  tai::detail::AlignedBuffer take(std::size_t n) noexcept;
  /// A tai::Buffer of n bytes in use in a block of take(n): empty when take(n) is.
  Buffer buffer(std::size_t n) noexcept;

  /// Called by an AlignedBuffer this pool lent, when it is dropped.
  void take_back(std::byte* data, std::size_t size) noexcept override;

  /// Blocks taken from the allocator, and blocks lent again from the free lists, since the
  /// process started (relaxed counters: statistics).
  std::uint64_t allocations() const noexcept { return allocations_.load(std::memory_order_relaxed); }
  std::uint64_t reuses() const noexcept { return reuses_.load(std::memory_order_relaxed); }
  /// Bytes of spare blocks now on the free lists.
  std::uint64_t kept_bytes() const noexcept;
  /// The slab's among them (which stay whatever the budget).
  std::uint64_t slab_kept_bytes() const noexcept;
  /// Bytes of the slab carved into blocks so far (at most kSlabBytes).
  std::uint64_t slab_bytes() const noexcept;
  /// Whether the slab, when it is mapped, is advised for huge pages past its first 256 KiB
  /// (default true; the layer sets it from TAI_HUGE_PAGES). No effect on a slab already mapped.
  void set_huge_pages(bool on) noexcept { huge_pages_.store(on, std::memory_order_relaxed); }

 private:
  HeldCopyPool() = default;
  ~HeldCopyPool() = default;
  static constexpr std::size_t kClasses = (kLargestShift - kSmallestShift) * 4 + 1;  // see class_of
  // A spare block holds the link to the next one of its class in its first bytes.
  struct FreeBlock {
    FreeBlock* next;
  };

  // Under mu_: a block of `block` bytes carved from the slab (mapped at the first call), or
  // nullptr when the slab is used up or cannot be mapped.
  std::byte* carve_locked(std::size_t block) noexcept;
  bool from_slab(const std::byte* p) const noexcept {
    return slab_ != nullptr && p >= slab_ && p < slab_ + kSlabBytes;
  }

  mutable std::mutex mu_;
  FreeBlock* free_[kClasses] = {};       // under mu_: spare blocks of the slab
  FreeBlock* heap_free_[kClasses] = {};  // under mu_: spare blocks of the allocator
  std::size_t heap_count_[kClasses] = {};  // under mu_: the length of each heap_free_ list
  std::size_t kept_ = 0;            // under mu_: bytes on the free lists
  std::size_t heap_kept_ = 0;       // under mu_: the allocator's blocks among them
  std::byte* slab_ = nullptr;       // under mu_ (set once; read by from_slab under mu_)
  std::size_t slab_used_ = 0;       // under mu_: bytes carved
  bool slab_failed_ = false;        // under mu_: mmap refused: the allocator's blocks only
  std::atomic<bool> huge_pages_{true};  // relaxed: read once, when the slab is mapped
  std::atomic<std::uint64_t> allocations_{0}, reuses_{0};
};

}  // namespace tai::posix::detail

// tai/quota.hpp - the two-stage cache quota of a controller, shared by all its files' trees.
//
// The TAI paper section 2.5.3 and DESIGN section 3 ("Quota"):
//  * strict (short-term) limit: never exceeded. allocate() charges the bytes with a CAS before it
//    allocates, so concurrent steps on different nodes (and different files) can never push the
//    total over the limit; a request that would need more cache is refused (nullptr) and the
//    tree sends that request to the engine directly ("reroute"), where it still succeeds.
//  * weak (long-term) limit: may be exceeded for a while. Every cache block the trees allocate is
//    recorded here, oldest first (BlockRecord); when used() > weak(), the controller's recycle
//    rounds pop the oldest records and evict those blocks (writing back the dirty ones first)
//    until it is back under the weak limit: FIFO flushing, so the data cached longest goes first
//    and dirty data does not pile up before a mandatory fsync.
//
// Record queue. A bounded lock-free multi-producer multi-consumer ring (src/quota.cpp says why
// not Boost.Lockfree), rounded up to a power of two; no allocation after construction. A record
// can go stale (the block was freed or replaced since); an eviction of a
// stale record finds no block with that sequence number and does nothing. When the queue is full
// the record is not kept (records_dropped() counts them): the block is then reached only by the
// controller's flush rounds, never lost.
//
// Block pool. Blocks of 4 KiB and more are charged and allocated in power-of-two sizes (cache
// blocks are powers of two already; a gathered write-back's staging copy is rounded up), and a
// released one is kept for the next allocate() of its size instead of going back to the
// allocator: a steady stream of writes through the cache then reuses the same resident pages
// instead of having the allocator return them to the kernel (madvise/munmap) and the next
// blocks fault them in again, page by page. The pool is bounded: at most pool_limit bytes (the
// constructor's argument, lowered to the weak limit), and used() plus the kept bytes never pass
// the strict limit (an allocate() that finds no block of its size frees kept ones first), so
// the strict limit still bounds every byte of cache memory the quota holds. trim() frees what
// is kept; the destructor does.
//
// Huge-page chunks (the constructor's huge_pages, on in the controller by default). Blocks of
// 4 KiB to 1 MiB are then carved from 2 MiB-aligned chunks of anonymous memory advised with
// MADV_HUGEPAGE (all but the first the quota maps, which keeps 4 KiB pages so that a short
// process does not clear a 2 MiB page for its first block), each chunk serving one size: where
// the kernel's transparent huge pages are enabled for madvise'd memory, one page fault maps
// 2 MiB (512 blocks of 4 KiB) instead of one block. A chunk's blocks are never freed one by one: a released one goes back to its chunk's
// free list (it counts as kept, in pooled()), and a chunk is unmapped only when none of its
// blocks is in use and the kept bytes pass pool_limit (or trim()). The strict limit still bounds
// every byte: a chunk is mapped only when used() + pooled() + 2 MiB fits under it, the
// unhanded part of every chunk counts in pooled(), and an allocate() that cannot make room
// (kept bytes held by chunks that still have blocks in use) is refused like any other over the
// limit. When madvise is refused the chunk is used as it is (4 KiB pages); when mmap is refused
// the block comes from the allocator as without chunks. Chunks are used only when pool_limit
// (after lowering) is at least 2 MiB, so a tiny quota behaves as without them.
//
// Clean budget. The trees report their dirty bytes here (note_dirty), so the quota knows the
// clean bytes it holds: used() - dirty(). over_clean_budget() says when they pass the budget (the
// constructor's clean_budget): a tree then releases its clean blocks whose bytes are synced
// (tai/btree.hpp, "Clean budget": at the next successful fsync), so a stream of writes reuses
// the blocks of data already written instead of filling the weak limit with clean copies (every
// one a first touch of fresh memory).
//
// Thread-safety: every member function is thread-safe. The counters are exact (atomic
// read-modify-write), and their memory order is relaxed: no other data is published through them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tai {

/// One cache block, as the quota remembers it for age-ordered eviction (trivially copyable).
struct BlockRecord {
  std::uint64_t tree_id = 0;  ///< detail::TreeCore::id() of the tree that allocated the block
  std::uint64_t base = 0;     ///< first byte of the block's node in the file
  std::uint64_t seq = 0;      ///< Quota::next_seq() at allocation: identifies this allocation
  std::uint32_t depth = 0;    ///< depth of the block's node (0 = root)
};

class Quota {
 public:
  static constexpr std::uint64_t kUnlimited = ~std::uint64_t{0};

  /// weak <= strict is expected; a weak limit above the strict one is lowered to it.
  /// Released blocks kept for reuse by default, at most (see "Block pool" above).
  static constexpr std::uint64_t kDefaultPoolLimit = std::uint64_t{64} << 20;

  /// Chunks of the huge-page carve (see "Huge-page chunks" above).
  static constexpr std::uint64_t kChunkBytes = std::uint64_t{2} << 20;

  explicit Quota(std::uint64_t weak_bytes = kUnlimited, std::uint64_t strict_bytes = kUnlimited,
                 std::size_t record_capacity = 1u << 14, std::uint64_t pool_limit = kDefaultPoolLimit,
                 std::uint64_t clean_budget = kUnlimited, bool huge_pages = false);
  ~Quota();
  Quota(const Quota&) = delete;
  Quota& operator=(const Quota&) = delete;

  std::uint64_t weak() const noexcept { return weak_; }
  std::uint64_t strict() const noexcept { return strict_; }

  /// Bytes of cache blocks currently allocated (exact once the allocating steps are done).
  std::uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  /// The highest used() ever reached; never above strict().
  std::uint64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Bytes that may still be allocated before the strict limit.
  std::uint64_t available() const noexcept {
    const std::uint64_t u = used();
    return u >= strict_ ? 0 : strict_ - u;
  }
  bool over_weak() const noexcept { return used() > weak_; }
  std::uint64_t over_weak_bytes() const noexcept {
    const std::uint64_t u = used();
    return u > weak_ ? u - weak_ : 0;
  }
  /// allocate() calls refused because of the strict limit (or because memory ran out).
  std::uint64_t denials() const noexcept { return denials_.load(std::memory_order_relaxed); }

  /// What allocate(bytes, ...) charges: `bytes` rounded up to a power of two from 4 KiB on
  /// (the pool's sizes), `bytes` itself below.
  static std::uint64_t charge_for(std::uint64_t bytes) noexcept {
    if (bytes < kPoolMin || bytes > kPoolMax) return bytes;
    return std::uint64_t{1} << (64 - __builtin_clzll(bytes - 1));
  }

  /// Charges charge_for(bytes) and returns at least `bytes` bytes aligned to `alignment` (a
  /// power of two), or nullptr when the charge would pass the strict limit or the system has no
  /// memory left (then nothing stays charged). The memory is uninitialised (a reused block
  /// holds old data).
  std::byte* allocate(std::uint64_t bytes, std::size_t alignment) noexcept;
  /// Returns a block from allocate(bytes, ...) (the same `bytes`): kept for reuse when the
  /// pool has room, freed otherwise; its charge goes back to the quota either way.
  void release(std::byte* block, std::uint64_t bytes) noexcept;

  /// Bytes of released blocks kept for reuse (not part of used()).
  std::uint64_t pooled() const noexcept { return pooled_.load(std::memory_order_relaxed); }
  /// allocate() calls served from the pool.
  std::uint64_t pool_hits() const noexcept { return pool_hits_.load(std::memory_order_relaxed); }
  /// Frees every kept block (and unmaps every chunk none of whose blocks is in use).
  void trim() noexcept;
  /// Bytes of huge-page chunks mapped now (in use or kept).
  std::uint64_t chunk_bytes() const noexcept { return chunk_bytes_.load(std::memory_order_relaxed); }
  /// Chunks mapped so far, and of those the ones madvise(MADV_HUGEPAGE) refused.
  std::uint64_t chunks_mapped() const noexcept { return chunks_mapped_.load(std::memory_order_relaxed); }
  std::uint64_t chunks_not_advised() const noexcept { return chunks_not_advised_.load(std::memory_order_relaxed); }

  /// The clean budget (see above) and the trees' report of their dirty bytes (+ added, - cleaned).
  std::uint64_t clean_budget() const noexcept { return clean_budget_; }
  void note_dirty(std::int64_t delta) noexcept {
    dirty_.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
  }
  std::uint64_t dirty() const noexcept { return dirty_.load(std::memory_order_relaxed); }
  /// used() - dirty() is above the clean budget.
  bool over_clean_budget() const noexcept {
    if (clean_budget_ == kUnlimited) return false;
    const std::uint64_t u = used(), d = dirty();
    return u > d && u - d > clean_budget_;
  }

  /// A fresh sequence number (1, 2, ...): allocation order across every tree of this quota.
  std::uint64_t next_seq() noexcept { return seq_.fetch_add(1, std::memory_order_relaxed) + 1; }

  /// Appends a record (oldest first). False when the queue is full (the record is dropped).
  bool record(const BlockRecord& record) noexcept;
  /// Removes the oldest record; false when there is none.
  bool pop_oldest(BlockRecord& out) noexcept;
  std::uint64_t records_dropped() const noexcept { return records_dropped_.load(std::memory_order_relaxed); }

 private:
  struct Records;  // the lock-free ring, private to src/quota.cpp
  struct Pool;     // the kept blocks, private to src/quota.cpp
  static constexpr std::uint64_t kPoolMin = 4096;                 // smallest pooled size
  static constexpr std::uint64_t kPoolMax = std::uint64_t{1} << 30;  // largest pooled size

  const std::uint64_t strict_;
  const std::uint64_t weak_;
  // All relaxed: each is a counter whose exactness comes from the atomic read-modify-write
  // itself; none of them publishes other memory (the blocks are handed over by the steps'
  // own synchronisation).
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> denials_{0};
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> records_dropped_{0};
  std::atomic<std::uint64_t> pooled_{0};  // written under the pool's mutex, read anywhere
  std::atomic<std::uint64_t> pool_hits_{0};
  std::atomic<std::uint64_t> dirty_{0};
  std::atomic<std::uint64_t> chunk_bytes_{0};  // written under the pool's mutex, read anywhere
  std::atomic<std::uint64_t> chunks_mapped_{0};
  std::atomic<std::uint64_t> chunks_not_advised_{0};
  const std::uint64_t pool_limit_;
  const std::uint64_t clean_budget_;
  const bool huge_pages_;
  std::unique_ptr<Records> records_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace tai

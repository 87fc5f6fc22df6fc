// The two-stage quota: see include/tai/quota.hpp.
#include "tai/quota.hpp"
#include "src/detail/aligned_mapping.hpp"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <type_traits>
#include <new>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

namespace tai {

static_assert(std::is_trivially_copyable_v<BlockRecord> && std::is_trivially_destructible_v<BlockRecord>,
              "records are copied into and out of the queue's cells");

// The record queue: a bounded multi-producer multi-consumer ring (D. Vyukov's design): each cell
// carries a sequence number that says whose turn it is, so a cell's record is only touched by
// the one thread that claimed the cell, between an acquire load and a release store of its
// sequence. No allocation after construction, no locks.
//
// Why not boost::lockfree::queue (libtai's usual lock-free queue, src/detail/lockfree_queue.hpp,
// which also settles its ThreadSanitizer reports): the capacity is the caller's record_capacity,
// and a fixed_sized<true> Boost queue indexes its nodes with 16 bits (at most 65535 of them).
// This ring allocates once, takes any capacity, and its cells are touched by one claimer at a
// time.
struct Quota::Records {
  // The cells come from fresh anonymous memory, whose zero bytes already are every cell's first
  // state (see Cell::seq): nothing is touched until the ring reaches a cell. Built with a loop,
  // the 16,384 cells of a controller's quota were 640 KiB written at construction, 160 of the
  // 560 page faults a short process under the preload library took.
  explicit Records(std::size_t capacity) {
    std::size_t n = 2;
    while (n < capacity) n *= 2;
    bytes = n * sizeof(Cell);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    cells = static_cast<Cell*>(p);
    mask = n - 1;
  }
  ~Records() { ::munmap(cells, bytes); }
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;

  bool push(const BlockRecord& r) noexcept {
    std::size_t pos = tail.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t i = pos & mask;
      Cell& c = cells[i];
      // Acquire: pairs with the release store of the consumer that freed this cell.
      const std::size_t seq = c.seq.load(std::memory_order_acquire) + i;
      const auto dif = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
      if (dif == 0) {
        // Relaxed: the claim only orders producers among themselves; the data is published by
        // the release store below.
        if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.record = r;
          c.seq.store(pos + 1 - i, std::memory_order_release);  // pairs with pop()'s acquire
          return true;
        }
      } else if (dif < 0) {
        return false;  // full
      } else {
        pos = tail.load(std::memory_order_relaxed);
      }
    }
  }

  bool pop(BlockRecord& out) noexcept {
    std::size_t pos = head.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t i = pos & mask;
      Cell& c = cells[i];
      // Acquire: pairs with the release store of the producer that filled this cell.
      const std::size_t seq = c.seq.load(std::memory_order_acquire) + i;
      const auto dif = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos + 1);
      if (dif == 0) {
        if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          out = c.record;
          c.seq.store(pos + mask + 1 - i, std::memory_order_release);  // pairs with push()'s acquire
          return true;
        }
      } else if (dif < 0) {
        return false;  // empty
      } else {
        pos = head.load(std::memory_order_relaxed);
      }
    }
  }

  // A cell's sequence number as in Vyukov's bounded queue, stored less the cell's index: cell i
  // starts at sequence i, which is then a stored 0, and a zero record is BlockRecord{}.
  struct Cell {
    std::atomic<std::size_t> seq;
    BlockRecord record;
  };
  static_assert(std::is_trivially_destructible_v<Cell>, "cells are unmapped, never destroyed one by one");
  Cell* cells = nullptr;
  std::size_t bytes = 0;
  std::size_t mask = 0;
  alignas(64) std::atomic<std::size_t> tail{0};  // next cell to fill
  alignas(64) std::atomic<std::size_t> head{0};  // next cell to empty
};

// The block pool: one free list per power-of-two size from kPoolMin to kPoolMax, linked through
// the first bytes of the kept blocks themselves (so keeping a block costs no allocation), under
// one mutex, plus the huge-page chunks (tai/quota.hpp). The critical sections are a few loads
// and stores; the allocator's own calls (posix_memalign, free) stay outside it except when kept
// blocks are freed to make room, and a chunk is mapped under it (once per 2 MiB).
// Invariant, at every unlock: used() + pooled() <= strict (release() keeps a block only within
// it; allocate() frees kept blocks, largest first, then unmaps unused chunks, until it holds
// again after its charge, and refuses the charge when it cannot).
struct Quota::Pool {
  static constexpr int kMinLog = 12;
  static constexpr int kClasses = 30 - kMinLog + 1;
  static constexpr int kChunkLog = 21;
  static constexpr int kMaxChunkClass = kChunkLog - 1 - kMinLog;  // 1 MiB: two blocks a chunk at least
  struct Kept {
    Kept* next;
  };
  // One 2 MiB chunk, carved into blocks of one class: first from its start (carved), then
  // from the blocks released back into it (free).
  struct Chunk {
    std::byte* base = nullptr;
    int cls = 0;
    std::uint32_t capacity = 0, carved = 0, in_use = 0;
    Kept* free = nullptr;
    Chunk* prev = nullptr;  // in avail[cls] while it has a block to hand out
    Chunk* next = nullptr;
    bool listed = false;
  };
  static int class_of(std::uint64_t charge) noexcept { return 63 - __builtin_clzll(charge) - kMinLog; }
  static std::uint64_t class_bytes(int c) noexcept { return std::uint64_t{1} << (c + kMinLog); }

  std::mutex mu;
  Kept* heads[kClasses] = {};
  std::uint64_t bytes = 0;        // under mu; mirrored in Quota::pooled_ (chunks' unhanded bytes included)
  std::uint64_t chunk_total = 0;  // under mu; mirrored in Quota::chunk_bytes_
  bool mapped_once = false;       // under mu: a chunk was mapped before (see map_chunk)
  std::unordered_map<std::uintptr_t, Chunk*> chunks;  // by base address
  Chunk* avail[kClasses] = {};

  /// Pops a kept block of class `c` aligned to `alignment`; nullptr when there is none.
  std::byte* take(int c, std::size_t alignment) noexcept {
    Kept* k = heads[c];
    // Blocks are allocated at least page-aligned; a request for more than the head offers
    // (a direct-I/O file with a large alignment) takes a fresh block instead.
    if (k == nullptr || reinterpret_cast<std::uintptr_t>(k) % alignment != 0) return nullptr;
    heads[c] = k->next;
    bytes -= class_bytes(c);
    return reinterpret_cast<std::byte*>(k);
  }
  void put(int c, std::byte* block) noexcept {
    auto* k = reinterpret_cast<Kept*>(block);
    k->next = heads[c];
    heads[c] = k;
    bytes += class_bytes(c);
  }

  void list(Chunk* k) noexcept {
    k->prev = nullptr;
    k->next = avail[k->cls];
    if (k->next != nullptr) k->next->prev = k;
    avail[k->cls] = k;
    k->listed = true;
  }
  void unlist(Chunk* k) noexcept {
    if (k->prev != nullptr) k->prev->next = k->next;
    else avail[k->cls] = k->next;
    if (k->next != nullptr) k->next->prev = k->prev;
    k->prev = k->next = nullptr;
    k->listed = false;
  }
  /// A block of class `c` from a chunk that has one; nullptr when none has.
  std::byte* take_chunk(int c, std::size_t alignment) noexcept {
    Chunk* k = avail[c];
    // Blocks sit at multiples of their size in a 2 MiB-aligned chunk.
    if (k == nullptr || class_bytes(c) % alignment != 0) return nullptr;
    std::byte* p;
    if (k->free != nullptr) {
      p = reinterpret_cast<std::byte*>(k->free);
      k->free = k->free->next;
    } else {
      p = k->base + (static_cast<std::uint64_t>(k->carved) << (c + kMinLog));
      ++k->carved;
    }
    ++k->in_use;
    if (k->free == nullptr && k->carved == k->capacity) unlist(k);
    bytes -= class_bytes(c);
    return p;
  }
  /// The chunk that holds `p`, or nullptr.
  Chunk* chunk_of(const std::byte* p) const noexcept {
    if (chunks.empty()) return nullptr;
    const auto it = chunks.find(reinterpret_cast<std::uintptr_t>(p) & ~((std::uintptr_t{1} << kChunkLog) - 1));
    return it == chunks.end() ? nullptr : it->second;
  }
  void give_back(Chunk* k, std::byte* p) noexcept {
    auto* kept = reinterpret_cast<Kept*>(p);
    kept->next = k->free;
    k->free = kept;
    --k->in_use;
    if (!k->listed) list(k);
    bytes += class_bytes(k->cls);
  }
  /// Maps a chunk for class `c`; false when mmap refuses. `not_advised` is set when madvise did.
  /// The first chunk a quota maps keeps 4 KiB pages: a short process (a shell command under the
  /// preload library writing a few KiB) would otherwise have the kernel clear a whole 2 MiB page
  /// for its first block, about a tenth of such a process's CPU; a long one pays 511 more page
  /// faults once.
  bool map_chunk(int c, bool& not_advised) noexcept {
    const std::size_t size = std::size_t{1} << kChunkLog;
    void* mapped = detail::map_aligned(size, size, /*huge=*/mapped_once, not_advised);
    if (mapped == nullptr) return false;
    mapped_once = true;
    auto* base = static_cast<std::byte*>(mapped);
    const auto a = reinterpret_cast<std::uintptr_t>(base);
    Chunk* k = new (std::nothrow) Chunk;
    if (k == nullptr) {
      ::munmap(base, size);
      return false;
    }
    k->base = base;
    k->cls = c;
    k->capacity = static_cast<std::uint32_t>(size >> (c + kMinLog));
    chunks.emplace(a, k);
    list(k);
    bytes += size;
    chunk_total += size;
    return true;
  }
  void unmap_chunk(Chunk* k) noexcept {
    if (k->listed) unlist(k);
    chunks.erase(reinterpret_cast<std::uintptr_t>(k->base));
    ::munmap(k->base, std::size_t{1} << kChunkLog);
    bytes -= std::uint64_t{1} << kChunkLog;
    chunk_total -= std::uint64_t{1} << kChunkLog;
    delete k;
  }
  /// Frees kept blocks, largest first, then unmaps chunks without a block in use, until at
  /// most `keep` bytes are kept.
  void shrink_to(std::uint64_t keep) noexcept {
    for (int c = kClasses - 1; c >= 0 && bytes > keep; --c) {
      while (heads[c] != nullptr && bytes > keep) {
        Kept* k = heads[c];
        heads[c] = k->next;
        bytes -= class_bytes(c);
        std::free(k);
      }
    }
    if (bytes <= keep || chunks.empty()) return;
    std::vector<Chunk*> unused;
    for (const auto& [base, k] : chunks)
      if (k->in_use == 0) unused.push_back(k);
    for (Chunk* k : unused) {
      if (bytes <= keep) break;
      unmap_chunk(k);
    }
  }
};

Quota::Quota(std::uint64_t weak_bytes, std::uint64_t strict_bytes, std::size_t record_capacity,
             std::uint64_t pool_limit, std::uint64_t clean_budget, bool huge_pages)
    : strict_(strict_bytes),
      weak_(std::min(weak_bytes, strict_bytes)),
      pool_limit_(std::min(pool_limit, std::min(weak_bytes, strict_bytes))),
      clean_budget_(clean_budget),
      huge_pages_(huge_pages && std::min(pool_limit, std::min(weak_bytes, strict_bytes)) >= kChunkBytes),
      records_(std::make_unique<Records>(std::max<std::size_t>(record_capacity, 1))),
      pool_(std::make_unique<Pool>()) {}

Quota::~Quota() {
  // Every tree returns its blocks when it is destroyed; a quota destroyed first would leave them
  // pointing at freed bookkeeping.
  assert(used() == 0 && "tai::Quota destroyed while cache blocks are still allocated");
  trim();
}

void Quota::trim() noexcept {
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->shrink_to(0);
  pooled_.store(pool_->bytes, std::memory_order_relaxed);
  chunk_bytes_.store(pool_->chunk_total, std::memory_order_relaxed);
}

std::byte* Quota::allocate(std::uint64_t bytes, std::size_t alignment) noexcept {
  const std::uint64_t charge = charge_for(bytes);
  const bool pooled_size = bytes >= kPoolMin && bytes <= kPoolMax;
  std::uint64_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (charge > strict_ || cur > strict_ - charge) {
      denials_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  } while (!used_.compare_exchange_weak(cur, cur + charge, std::memory_order_relaxed, std::memory_order_relaxed));
  // The charge is in: the total can no longer pass strict_ because of this block.
  std::uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (cur + charge > peak &&
         !peak_.compare_exchange_weak(peak, cur + charge, std::memory_order_relaxed, std::memory_order_relaxed)) {
  }
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  {
    // Every charge passes here before memory is allocated for it, so a block kept by a release
    // that did not see this charge yet is freed below when it would not fit next to it.
    std::lock_guard<std::mutex> lock(pool_->mu);
    if (pooled_size) {
      const int c = Pool::class_of(charge);
      if (std::byte* p = pool_->take_chunk(c, alignment)) {
        pooled_.store(pool_->bytes, std::memory_order_relaxed);
        return p;
      }
      if (std::byte* p = pool_->take(c, alignment)) {
        pooled_.store(pool_->bytes, std::memory_order_relaxed);
        pool_hits_.fetch_add(1, std::memory_order_relaxed);
        return p;
      }
      if (huge_pages_ && c <= Pool::kMaxChunkClass && Pool::class_bytes(c) % alignment == 0) {
        // A new chunk holds this block and kept bytes for the rest: it must fit next to the
        // charges and what is kept already (the invariant above).
        const std::uint64_t u = used_.load(std::memory_order_relaxed) - charge;
        if (u <= strict_ && pool_->bytes <= strict_ - u && kChunkBytes <= strict_ - u - pool_->bytes) {
          bool not_advised = false;
          if (pool_->map_chunk(c, not_advised)) {
            chunks_mapped_.fetch_add(1, std::memory_order_relaxed);
            if (not_advised) chunks_not_advised_.fetch_add(1, std::memory_order_relaxed);
            chunk_bytes_.store(pool_->chunk_total, std::memory_order_relaxed);
            std::byte* p = pool_->take_chunk(c, alignment);
            pooled_.store(pool_->bytes, std::memory_order_relaxed);
            return p;
          }
        }
      }
    }
    // A fresh block: first make room for it next to the kept ones (the invariant above).
    if (pool_->bytes != 0) {
      const std::uint64_t u = used_.load(std::memory_order_relaxed);
      pool_->shrink_to(u >= strict_ ? 0 : strict_ - u);
      pooled_.store(pool_->bytes, std::memory_order_relaxed);
      chunk_bytes_.store(pool_->chunk_total, std::memory_order_relaxed);
      if (u > strict_ || pool_->bytes > strict_ - u) {
        // Kept bytes in chunks that still have blocks in use: no room for a fresh block.
        used_.fetch_sub(charge, std::memory_order_relaxed);
        denials_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
    }
  }
  void* p = nullptr;
  const std::size_t align = pooled_size ? std::max<std::size_t>(alignment, 4096) : alignment;
  if (charge > static_cast<std::uint64_t>(SIZE_MAX) || ::posix_memalign(&p, align, static_cast<std::size_t>(charge)) != 0) {
    used_.fetch_sub(charge, std::memory_order_relaxed);
    denials_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

void Quota::release(std::byte* block, std::uint64_t bytes) noexcept {
  if (block == nullptr) return;
  const std::uint64_t charge = charge_for(bytes);
  if (bytes >= kPoolMin && bytes <= kPoolMax && pool_limit_ >= charge) {
    std::lock_guard<std::mutex> lock(pool_->mu);
    [[maybe_unused]] const std::uint64_t before = used_.fetch_sub(charge, std::memory_order_relaxed);
    assert(before >= charge && "tai::Quota::release of more bytes than allocated");
    if (Pool::Chunk* k = pool_->chunk_of(block)) {
      // Back into its chunk (used() fell by what pooled() grows: the invariant holds); a chunk
      // with nothing in use goes back to the kernel only when more than pool_limit is kept.
      pool_->give_back(k, block);
      if (k->in_use == 0 && pool_->bytes > pool_limit_) {
        pool_->unmap_chunk(k);
        chunk_bytes_.store(pool_->chunk_total, std::memory_order_relaxed);
      }
      pooled_.store(pool_->bytes, std::memory_order_relaxed);
      return;
    }
    const std::uint64_t u = before - charge;
    const std::uint64_t kept = pool_->bytes;
    if (kept + charge <= pool_limit_ && u <= strict_ && kept + charge <= strict_ - u) {
      pool_->put(Pool::class_of(charge), block);
      pooled_.store(pool_->bytes, std::memory_order_relaxed);
      return;
    }
  } else {
    [[maybe_unused]] const std::uint64_t before = used_.fetch_sub(charge, std::memory_order_relaxed);
    assert(before >= charge && "tai::Quota::release of more bytes than allocated");
  }
  std::free(block);
}

bool Quota::record(const BlockRecord& r) noexcept {
  if (records_->push(r)) return true;
  records_dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool Quota::pop_oldest(BlockRecord& out) noexcept { return records_->pop(out); }

}  // namespace tai

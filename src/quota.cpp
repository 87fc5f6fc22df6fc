// The two-stage quota: see include/tai/quota.hpp.
#include "tai/quota.hpp"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <type_traits>

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
  explicit Records(std::size_t capacity) {
    std::size_t n = 2;
    while (n < capacity) n *= 2;
    cells = std::make_unique<Cell[]>(n);
    mask = n - 1;
    for (std::size_t i = 0; i < n; ++i) cells[i].seq.store(i, std::memory_order_relaxed);
  }

  bool push(const BlockRecord& r) noexcept {
    std::size_t pos = tail.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells[pos & mask];
      // Acquire: pairs with the release store of the consumer that freed this cell.
      const std::size_t seq = c.seq.load(std::memory_order_acquire);
      const auto dif = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
      if (dif == 0) {
        // Relaxed: the claim only orders producers among themselves; the data is published by
        // the release store below.
        if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.record = r;
          c.seq.store(pos + 1, std::memory_order_release);  // pairs with pop()'s acquire
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
      Cell& c = cells[pos & mask];
      // Acquire: pairs with the release store of the producer that filled this cell.
      const std::size_t seq = c.seq.load(std::memory_order_acquire);
      const auto dif = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos + 1);
      if (dif == 0) {
        if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          out = c.record;
          c.seq.store(pos + mask + 1, std::memory_order_release);  // pairs with push()'s acquire
          return true;
        }
      } else if (dif < 0) {
        return false;  // empty
      } else {
        pos = head.load(std::memory_order_relaxed);
      }
    }
  }

  struct Cell {
    std::atomic<std::size_t> seq{0};
    BlockRecord record;
  };
  std::unique_ptr<Cell[]> cells;
  std::size_t mask = 0;
  alignas(64) std::atomic<std::size_t> tail{0};  // next cell to fill
  alignas(64) std::atomic<std::size_t> head{0};  // next cell to empty
};

Quota::Quota(std::uint64_t weak_bytes, std::uint64_t strict_bytes, std::size_t record_capacity)
    : strict_(strict_bytes),
      weak_(std::min(weak_bytes, strict_bytes)),
      records_(std::make_unique<Records>(std::max<std::size_t>(record_capacity, 1))) {}

Quota::~Quota() {
  // Every tree returns its blocks when it is destroyed; a quota destroyed first would leave them
  // pointing at freed bookkeeping.
  assert(used() == 0 && "tai::Quota destroyed while cache blocks are still allocated");
}

std::byte* Quota::allocate(std::uint64_t bytes, std::size_t alignment) noexcept {
  std::uint64_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > strict_ || cur > strict_ - bytes) {
      denials_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  } while (!used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed, std::memory_order_relaxed));
  // The charge is in: the total can no longer pass strict_ because of this block.
  std::uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (cur + bytes > peak &&
         !peak_.compare_exchange_weak(peak, cur + bytes, std::memory_order_relaxed, std::memory_order_relaxed)) {
  }
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (bytes > static_cast<std::uint64_t>(SIZE_MAX) || ::posix_memalign(&p, alignment, static_cast<std::size_t>(bytes)) != 0) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    denials_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

void Quota::release(std::byte* block, std::uint64_t bytes) noexcept {
  if (block == nullptr) return;
  std::free(block);
  [[maybe_unused]] const std::uint64_t before = used_.fetch_sub(bytes, std::memory_order_relaxed);
  assert(before >= bytes && "tai::Quota::release of more bytes than allocated");
}

bool Quota::record(const BlockRecord& r) noexcept {
  if (records_->push(r)) return true;
  records_dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool Quota::pop_oldest(BlockRecord& out) noexcept { return records_->pop(out); }

}  // namespace tai

// The two-stage quota: see include/tai/quota.hpp.
#include "tai/quota.hpp"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <type_traits>

#include <boost/lockfree/queue.hpp>

namespace tai {

static_assert(std::is_trivially_copyable_v<BlockRecord> && std::is_trivially_destructible_v<BlockRecord>,
              "boost::lockfree::queue needs trivially copyable records");

struct Quota::Records {
  explicit Records(std::size_t capacity) : queue(capacity) {}
  boost::lockfree::queue<BlockRecord> queue;  // node pool preallocated: bounded_push never allocates
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
  if (records_->queue.bounded_push(r)) return true;
  records_dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool Quota::pop_oldest(BlockRecord& out) noexcept { return records_->queue.pop(out); }

}  // namespace tai

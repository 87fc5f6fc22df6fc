// The process-wide home of File::write's small copies (src/detail/small_copy_pool.hpp).
#include "src/detail/small_copy_pool.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>

#include "src/detail/aligned_mapping.hpp"
#include "tai/detail/task.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define TAI_SMALL_COPIES_FROM_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TAI_SMALL_COPIES_FROM_ALLOCATOR 1
#endif
#endif

namespace tai::detail {

static_assert(SmallCopyPool::kLargeBytes == Task::kKeepDataBytes, "the pool's large class is what a task keeps");

struct SmallCopyPool::Impl {
  /// A free copy holds the link to the next one of its class in its first bytes (as the
  /// drop-in layer's HeldCopyPool does; that pool takes its blocks from the allocator, which is
  /// what this one must not).
  struct FreeCopy {
    FreeCopy* next;
  };
  /// One size class: its free list, and the unused rest of the class's newest chunk.
  struct Class {
    std::mutex mu;
    FreeCopy* free_head = nullptr;   // guarded by mu
    std::byte* next = nullptr;       // guarded by mu: the newest chunk's first unused byte
    std::byte* end = nullptr;        // guarded by mu
    std::atomic<std::uint64_t> free_count{0};  // relaxed: statistics only
  };
  Class small, large;
  std::atomic<std::uint64_t> mapped{0};  // relaxed: a bound and a statistic, publishes nothing

  Class& of(std::size_t size) noexcept { return size == kSmallBytes ? small : large; }

  // Under c.mu. Maps a new chunk for the class unless the pool has mapped its limit.
  bool grow(Class& c) noexcept {
    std::uint64_t m = mapped.load(std::memory_order_relaxed);
    do {
      if (m + kChunkBytes > kMaxMappedBytes) return false;
    } while (!mapped.compare_exchange_weak(m, m + kChunkBytes, std::memory_order_relaxed));
    // The process's first chunk keeps 4 KiB pages (as the quota's first chunk, for the same
    // reason: a short process writing a few KiB would have a whole 2 MiB page cleared).
    bool not_advised = false;
    void* p = map_aligned(kChunkBytes, kChunkBytes, /*huge=*/m != 0, not_advised);
    if (p == nullptr) {
      mapped.fetch_sub(kChunkBytes, std::memory_order_relaxed);
      return false;
    }
    c.next = static_cast<std::byte*>(p);
    c.end = c.next + kChunkBytes;
    return true;
  }
};

SmallCopyPool& SmallCopyPool::instance() noexcept {
  // Never destroyed: see the header.
  static SmallCopyPool* const pool = [] {
    auto* p = new (std::nothrow) SmallCopyPool();
    if (p == nullptr) std::abort();  // no memory for a few hundred bytes at the first write
#ifndef TAI_SMALL_COPIES_FROM_ALLOCATOR
    p->impl_ = new (std::nothrow) Impl();  // null: every copy from the allocator
#endif
    return p;
  }();
  return *pool;
}

AlignedBuffer SmallCopyPool::take(std::size_t n) noexcept {
  const std::size_t size = n <= kSmallBytes ? kSmallBytes : kLargeBytes;
  if (impl_ != nullptr && n <= kLargeBytes) {
    Impl::Class& c = impl_->of(size);
    std::byte* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      if (Impl::FreeCopy* f = c.free_head) {
        c.free_head = f->next;
        p = reinterpret_cast<std::byte*>(f);
        c.free_count.fetch_sub(1, std::memory_order_relaxed);
      } else if (c.next != c.end || impl_->grow(c)) {
        p = c.next;
        c.next += size;
      }
    }
    if (p != nullptr) return AlignedBuffer::adopt(p, size, size, this);
  }
  return AlignedBuffer::try_allocate(size, 64);
}

void SmallCopyPool::take_back(std::byte* data, std::size_t size) noexcept {
  Impl::Class& c = impl_->of(size);  // only the pool's own buffers come here: impl_ is set
  std::lock_guard<std::mutex> lock(c.mu);
  c.free_head = new (data) Impl::FreeCopy{c.free_head};
  c.free_count.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t SmallCopyPool::mapped_bytes() const noexcept {
  return impl_ != nullptr ? impl_->mapped.load(std::memory_order_relaxed) : 0;
}

std::uint64_t SmallCopyPool::free_bytes() const noexcept {
  if (impl_ == nullptr) return 0;
  return impl_->small.free_count.load(std::memory_order_relaxed) * kSmallBytes +
         impl_->large.free_count.load(std::memory_order_relaxed) * kLargeBytes;
}

}  // namespace tai::detail

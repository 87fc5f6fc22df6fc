#include "src/posix/held_copy_pool.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "src/detail/aligned_mapping.hpp"

namespace tai::posix::detail {
namespace {

// Classes: 512 B, then four per power of two (a quarter apart: 4096, 5120, 6144, 7168, 8192...)
// up to kLargest, so that a block wastes less than a quarter of itself: an SQLite WAL frame
// (a 4,096-byte page and its 24-byte header) takes 5,120 bytes, not 8,192.
constexpr std::size_t kQuarters = 4;

std::size_t class_of(std::size_t n) noexcept {
  if (n <= (std::size_t{1} << HeldCopyPool::kSmallestShift)) return 0;
  std::size_t k = HeldCopyPool::kSmallestShift;
  while ((std::size_t{2} << k) < n) ++k;  // 2^k < n <= 2^(k+1)
  const std::size_t step = (std::size_t{1} << k) / kQuarters;
  const std::size_t q = (n - (std::size_t{1} << k) + step - 1) / step;  // 1..4
  return (k - HeldCopyPool::kSmallestShift) * kQuarters + q;
}

std::size_t size_of_class(std::size_t c) noexcept {
  if (c == 0) return std::size_t{1} << HeldCopyPool::kSmallestShift;
  const std::size_t k = HeldCopyPool::kSmallestShift + (c - 1) / kQuarters;
  const std::size_t q = (c - 1) % kQuarters + 1;
  return (std::size_t{1} << k) + q * ((std::size_t{1} << k) / kQuarters);
}

// Small blocks are packed by the allocator (64-byte alignment: a cache line), so that a run of
// them touches about as many pages as it has bytes; from 64 KiB (the log's batches) page-aligned.
std::size_t alignment_of(std::size_t block) noexcept { return block < (std::size_t{64} << 10) ? 64 : 4096; }

}  // namespace

HeldCopyPool& HeldCopyPool::instance() noexcept {
  static auto* pool = new HeldCopyPool;  // never destroyed (see the header)
  return *pool;
}

tai::detail::AlignedBuffer HeldCopyPool::take(std::size_t n) noexcept {
  using tai::detail::AlignedBuffer;
  if (n == 0) n = 1;
  if (n > kLargest) {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    return AlignedBuffer::try_allocate(n, 4096);  // the allocator's: freed by std::free
  }
  const std::size_t c = class_of(n);
  const std::size_t block = size_of_class(c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    FreeBlock*& list = free_[c] != nullptr ? free_[c] : heap_free_[c];  // the slab's first
    if (FreeBlock* b = list) {
      list = b->next;
      kept_ -= block;
      if (&list == &heap_free_[c]) {
        heap_kept_ -= block;
        --heap_count_[c];
      }
      reuses_.fetch_add(1, std::memory_order_relaxed);
      return AlignedBuffer::adopt(reinterpret_cast<std::byte*>(b), block, alignment_of(block), this);
    }
    if (alignment_of(block) < 4096) {
      if (std::byte* p = carve_locked(block)) {
        allocations_.fetch_add(1, std::memory_order_relaxed);
        return AlignedBuffer::adopt(p, block, alignment_of(block), this);
      }
    }
  }
  void* p = nullptr;
  if (::posix_memalign(&p, alignment_of(block), block) != 0) return AlignedBuffer();
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return AlignedBuffer::adopt(static_cast<std::byte*>(p), block, alignment_of(block), this);
}

Buffer HeldCopyPool::buffer(std::size_t n) noexcept {
  tai::detail::AlignedBuffer mem = take(n);
  if (mem.empty()) return Buffer();
  return Buffer(std::move(mem), n);
}

// The mapping is never unmapped (the pool is never destroyed); without MAP_NORESERVE it counts
// against overcommit like the allocator's memory would, and only its touched pages are resident.
std::byte* HeldCopyPool::carve_locked(std::size_t block) noexcept {
  if (slab_ == nullptr) {
    if (slab_failed_) return nullptr;
    // The slab starts kSlabSmallPagesBytes before a huge-page boundary and its mapping ends on
    // one, so that the advised part is whole huge pages; the mapping's head before the slab goes
    // back, so the small-page part lies in no whole huge page even where the kernel's setting is
    // "always". The mapping's tail past the slab (kSlabSmallPagesBytes) is never touched.
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    bool not_advised = false;
    auto* base = static_cast<std::byte*>(tai::detail::map_aligned(kSlabBytes + kHuge, kHuge, false, not_advised));
    if (base == nullptr) {
      slab_failed_ = true;
      return nullptr;
    }
    slab_ = base + kHuge - kSlabSmallPagesBytes;
    (void)::munmap(base, kHuge - kSlabSmallPagesBytes);
    std::byte* const huge_from = base + kHuge;
    const std::size_t huge_bytes = kSlabBytes;  // to the mapping's end
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    // Best effort: refused (huge pages "never", or an old kernel), the pages stay small.
    if (huge_pages_.load(std::memory_order_relaxed)) {
      (void)::madvise(huge_from, huge_bytes, MADV_HUGEPAGE);
    } else {
      (void)::madvise(huge_from, huge_bytes, MADV_NOHUGEPAGE);  // off even under "always"
    }
#endif
  }
  const std::size_t at = (slab_used_ + alignment_of(block) - 1) & ~(alignment_of(block) - 1);
  if (at + block > kSlabBytes) return nullptr;
  slab_used_ = at + block;
  return slab_ + at;
}

void HeldCopyPool::take_back(std::byte* data, std::size_t size) noexcept {
  if (data == nullptr) return;
  const std::size_t c = class_of(size);
  FreeBlock* evicted = nullptr;  // freed after the mutex is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (from_slab(data)) {  // the slab's blocks always stay: the slab is its own bound
      free_[c] = new (data) FreeBlock{free_[c]};
      kept_ += size;
      return;
    }
    // The allocator's stay within kKeepBytes (the log's batch block among them: reused batch
    // after batch). A block of the sizes in use now wins over spares of other sizes: those go,
    // the class with the most spare bytes first, so that a program whose write sizes changed
    // (or a phase of large writes before small ones) does not leave the budget full of blocks
    // nobody takes while every block of the new size is freed and allocated again.
    while (heap_kept_ + size > kKeepBytes) {
      std::size_t fullest = kClasses;
      std::size_t most = 0;
      for (std::size_t k = 0; k < kClasses; ++k) {
        if (k == c || heap_free_[k] == nullptr) continue;
        const std::size_t bytes = heap_count_[k] * size_of_class(k);
        if (bytes > most) {
          most = bytes;
          fullest = k;
        }
      }
      if (fullest == kClasses) break;  // only blocks of this size are spare: enough of them
      const std::size_t bytes = size_of_class(fullest);
      while (heap_free_[fullest] != nullptr && heap_kept_ + size > kKeepBytes) {
        FreeBlock* b = heap_free_[fullest];
        heap_free_[fullest] = b->next;
        --heap_count_[fullest];
        heap_kept_ -= bytes;
        kept_ -= bytes;
        b->next = evicted;
        evicted = b;
      }
    }
    if (heap_kept_ + size <= kKeepBytes) {
      heap_free_[c] = new (data) FreeBlock{heap_free_[c]};
      ++heap_count_[c];
      kept_ += size;
      heap_kept_ += size;
      data = nullptr;
    }
  }
  while (evicted != nullptr) {
    FreeBlock* next = evicted->next;
    std::free(evicted);
    evicted = next;
  }
  std::free(data);
}

std::uint64_t HeldCopyPool::slab_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return slab_used_;
}

std::uint64_t HeldCopyPool::kept_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

std::uint64_t HeldCopyPool::slab_kept_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_ - heap_kept_;
}

}  // namespace tai::posix::detail

#include "src/controller/copy_arena.hpp"
#include "src/detail/aligned_mapping.hpp"

#include <sys/mman.h>

#include <iterator>
#include <new>

namespace tai::detail {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }
}  // namespace

CopyArena* CopyArena::create(std::uint64_t cap, bool huge_pages) { return new CopyArena(cap, huge_pages); }

CopyArena::CopyArena(std::uint64_t cap, bool huge_pages) noexcept : cap_(cap) {
  // The whole cap is reserved at once: untouched pages cost no memory, and chunks opened one
  // after another are neighbours, so free runs merge across their boundaries. Rounded to the
  // huge page, at a huge-page boundary, so that every opened chunk's halves can be huge pages.
  const std::size_t size = round_up(static_cast<std::size_t>(cap), kHugePage);
  if (size == 0) return;
  // The first 2 MiB keep 4 KiB pages (as the quota's first chunk: a short process's first copies
  // should not cost a cleared 2 MiB page); the rest is advised as a whole.
  bool not_advised = false;
  if (void* p = map_aligned(size, kHugePage, /*huge=*/false, not_advised)) {
    base_ = static_cast<std::byte*>(p);
    reserved_ = size;
#ifdef MADV_HUGEPAGE
    if (huge_pages && size > kHugePage) (void)::madvise(base_ + kHugePage, size - kHugePage, MADV_HUGEPAGE);
#endif
  }
}

CopyArena::~CopyArena() {
  if (base_ != nullptr) ::munmap(base_, reserved_);
}

void CopyArena::drop() noexcept { unref(); }

void CopyArena::unref() noexcept {
  // acq_rel: see refs_.
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void CopyArena::insert_free_locked(std::byte* p, std::size_t n) {
  auto next = free_runs_.lower_bound(p);
  if (next != free_runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == p) {  // joins the run before it
      prev->second += n;
      if (next != free_runs_.end() && prev->first + prev->second == next->first) {
        prev->second += next->second;
        free_runs_.erase(next);
      }
      return;
    }
  }
  if (next != free_runs_.end() && p + n == next->first) {  // joins the run after it: rekeyed
    const std::size_t len = n + next->second;
    auto hint = free_runs_.erase(next);
    free_runs_.emplace_hint(hint, p, len);
    return;
  }
  free_runs_.emplace_hint(next, p, n);
}

AlignedBuffer CopyArena::take(std::size_t n, bool& mapped_new) noexcept {
  mapped_new = false;
  const std::size_t need = round_up(n, kPage);
  if (n == 0 || need > cap_) return {};
  std::byte* got = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit; the piece is cut from the run's end, so the run keeps its key (no allocation).
    auto best = free_runs_.end();
    for (auto it = free_runs_.begin(); it != free_runs_.end(); ++it)
      if (it->second >= need && (best == free_runs_.end() || it->second < best->second)) {
        best = it;
        if (it->second == need) break;
      }
    if (best != free_runs_.end()) {
      best->second -= need;
      got = best->first + best->second;
      if (best->second == 0) free_runs_.erase(best);
      free_.store(free_.load(std::memory_order_relaxed) - need, std::memory_order_relaxed);
    } else {
      // The next pages of the reservation: a chunk, with what the copy does not use left free
      // (adjacent to the run before it, so the two merge), or exactly the copy near the cap.
      const std::uint64_t opened = mapped_.load(std::memory_order_relaxed);
      std::size_t size = need > kChunk ? need : kChunk;
      if (opened + size > reserved_) size = need;
      if (base_ == nullptr || opened + size > reserved_) return {};
      std::byte* p = base_ + opened;
      if (size > need) {
        try {
          insert_free_locked(p, size - need);
        } catch (const std::bad_alloc&) {
          size = need;  // no memory for the run's entry: open only what the copy needs
        }
        if (size > need) free_.store(free_.load(std::memory_order_relaxed) + (size - need), std::memory_order_relaxed);
      }
      got = p + (size - need);
      mapped_.store(opened + size, std::memory_order_relaxed);
      mapped_new = true;
    }
  }
  refs_.fetch_add(1, std::memory_order_relaxed);  // relaxed: the caller's own reference keeps it alive
  return AlignedBuffer::adopt(got, need, kPage, this);
}

void CopyArena::take_back(std::byte* data, std::size_t size) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      insert_free_locked(data, size);
      free_.store(free_.load(std::memory_order_relaxed) + size, std::memory_order_relaxed);
    } catch (const std::bad_alloc&) {
      // No memory for the run's entry: these pages stay unused until the arena goes.
    }
  }
  unref();
}

}  // namespace tai::detail

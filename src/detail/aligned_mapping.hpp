// Anonymous mappings aligned to a huge page, for the memory TAI maps once and keeps (the quota's
// block chunks, the write-copy arena).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace tai::detail {

/// Maps `size` bytes of anonymous read-write memory at
/// an address that is a multiple of `align`; nullptr when mmap refuses. Twice the size is mapped
/// and the unaligned ends go back: the only portable way to an aligned mapping (once per chunk,
/// not per block). With `huge`, the range is given MADV_HUGEPAGE: where the kernel's transparent
/// huge pages are "madvise" or "always", its first touch then faults in 2 MiB at once instead of
/// 512 pages one by one; `not_advised` tells when madvise refused (the pages stay small).
/// Unmap it with munmap(p, size). Thread-safe.
inline void* map_aligned(std::size_t size, std::size_t align, bool huge, bool& not_advised) noexcept {
  not_advised = huge;
  void* raw = ::mmap(nullptr, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto r = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t a = (r + align - 1) & ~(static_cast<std::uintptr_t>(align) - 1);
  if (a > r) ::munmap(raw, a - r);
  if (a + size < r + size + align) ::munmap(reinterpret_cast<void*>(a + size), r + size + align - (a + size));
  auto* base = reinterpret_cast<void*>(a);
#ifdef MADV_HUGEPAGE
  if (huge) not_advised = ::madvise(base, size, MADV_HUGEPAGE) != 0;
#endif
  return base;
}

}  // namespace tai::detail

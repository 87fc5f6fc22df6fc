// The heap's own count of allocated bytes, for tests that bound a program's memory: the RSS
// (VmRSS, VmHWM) also counts memory the allocator keeps after a free and pages it has not yet
// returned, so a bound on it would test the allocator as much as TAI.
//
// Sources, first found wins:
//  * jemalloc (the release preset links the tests with it when found): mallctl("epoch") to
//    refresh its statistics, then mallctl("stats.allocated").
//  * AddressSanitizer / ThreadSanitizer, whose allocator replaces malloc:
//    __sanitizer_get_current_allocated_bytes().
//  * glibc malloc: mallinfo2(), uordblks (bytes in use in the arenas) + hblkhd (bytes in
//    mmap()ed chunks).
// All three are declared weak, so the helper links in every build and asks only what is there.
//
// Thread-safety: heap_allocated_bytes() may be called from any thread; the figure is a
// snapshot (other threads keep allocating while it is taken).
#pragma once

#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

extern "C" {
// jemalloc's control interface (unprefixed, as Debian's libjemalloc exports it). Weak, except in
// a build that links the tests with jemalloc (TAI_TEST_WITH_JEMALLOC, test/CMakeLists.txt): a
// weak reference alone does not keep a library the linker drops as not needed (--as-needed),
// and without a strong one nothing in the test binary resolves to jemalloc, so it was dropped.
#ifdef TAI_TEST_WITH_JEMALLOC
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen);
#else
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen) __attribute__((weak));
#endif
// The sanitizers' allocator statistics (compiler-rt's allocator interface).
std::size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));
}

namespace tai::test {

/// Whether the program runs on jemalloc.
inline bool heap_has_jemalloc() {
#ifdef TAI_TEST_WITH_JEMALLOC
  return true;
#else
  return &mallctl != nullptr;
#endif
}

/// Which statistics heap_allocated_bytes() uses: "jemalloc", "sanitizer", "glibc".
inline std::string heap_stats_source() {
  if (heap_has_jemalloc()) return "jemalloc";
  if (&__sanitizer_get_current_allocated_bytes != nullptr) return "sanitizer";
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  return "glibc";
#else
  return "";
#endif
}

/// Bytes the program holds allocated on the heap now, by the allocator's own statistics;
/// nullopt when no source is available (the caller skips, with heap_stats_source() empty).
inline std::optional<std::uint64_t> heap_allocated_bytes() {
  if (heap_has_jemalloc()) {
    // jemalloc's statistics are refreshed per "epoch": write to it first, or stats.allocated
    // stays at the value of the last refresh.
    std::uint64_t epoch = 1;
    std::size_t len = sizeof epoch;
    if (mallctl("epoch", &epoch, &len, &epoch, sizeof epoch) != 0) return std::nullopt;
    std::size_t allocated = 0;
    len = sizeof allocated;
    if (mallctl("stats.allocated", &allocated, &len, nullptr, 0) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(allocated);
  }
  if (&__sanitizer_get_current_allocated_bytes != nullptr)
    return static_cast<std::uint64_t>(__sanitizer_get_current_allocated_bytes());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<std::uint64_t>(mi.uordblks) + static_cast<std::uint64_t>(mi.hblkhd);
#else
  return std::nullopt;
#endif
}

}  // namespace tai::test

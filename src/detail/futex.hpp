// src/detail/futex.hpp - the Linux futex, for sleeping on a 32-bit atomic word.
//
// Used where a thread waits for a word to change (receipts, the round barrier, the worker
// doorbell) after spinning for a bounded budget. A std::condition_variable would need a mutex on
// the waker's path; the futex costs the waker one load of a "someone sleeps" flag when nobody
// sleeps, and one system call when somebody does.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include "engines/common/timespec.hpp"

namespace tai::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex needs a plain 32-bit word");

/// Sleeps while `word` holds `expected` (returns at once if it does not), at most `timeout_ns`
/// (negative: no limit). Spurious returns happen: callers re-check their condition.
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::int64_t timeout_ns = -1) noexcept {
  timespec ts = ns_to_timespec(timeout_ns);
  timespec* tsp = timeout_ns >= 0 ? &ts : nullptr;
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, tsp, nullptr, 0);
}

/// Wakes up to `n` threads sleeping on `word` (INT_MAX: all).
inline void futex_wake(std::atomic<std::uint32_t>& word, int n = INT_MAX) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

/// A pause for spin loops.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

inline std::int64_t monotonic_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Spins until done() holds or the monotonic clock reaches `until`; true when done() held. The
/// spin half of every spin-then-sleep wait (receipts, the round barrier, the copy budget). Up to
/// `yield_from` each turn pauses (cpu_relax) and the clock is read once per 64 turns (a clock
/// read costs more than a turn); from then on each turn yields the CPU (sched_yield returns at
/// once when nothing else wants it), so that waiters that outnumber the CPUs do not keep the
/// thread they wait for off one (docs/controller_options.md, "spin_ns").
template <class Done>
bool spin_until_time(std::int64_t until, std::int64_t yield_from, Done&& done) {
  for (unsigned i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) != 63) continue;
    const std::int64_t now = monotonic_ns();
    if (now >= until) return false;
    if (now >= yield_from) break;
  }
  for (;;) {
    if (done()) return true;
    if (monotonic_ns() >= until) return false;
    ::sched_yield();
  }
}

}  // namespace tai::detail

// engines/common/own_descriptors.hpp - TAI's own descriptors (engine files, eventfds, io_uring rings)
// kept out of the program's way, and TAI's own threads marked.
//
// Why: the drop-in layer and the preload library run inside programs that assume they own every
// descriptor number: they compute with them (fd arithmetic, select's FD_SETSIZE), close ranges of
// them (close_range, closefrom, a loop over 3..N after fork) and pass them to children. So every
// descriptor TAI makes for itself is moved to a high number (at least half the RLIMIT_NOFILE soft
// limit, never below 256), made close-on-exec, and recorded, so that the preload library can tell
// a program's close_range from TAI's own descriptors. Library users gain the same: TAI's
// descriptors never take the low numbers a program expects its next open to get.
#pragma once

#include <signal.h>

namespace tai::detail {

/// Moves `fd` (just made by TAI) to the lowest free number >= own_descriptor_base() with
/// FD_CLOEXEC set, closes the original and records the new number. When it cannot move (the
/// limit is too low, or the table is full) it keeps `fd` (FD_CLOEXEC set all the same) and
/// records that. Returns the number to use; a negative `fd` is returned unchanged. errno is kept.
/// Thread-safe (lock-free).
int adopt_own_descriptor(int fd) noexcept;

/// A duplicate of `fd` (a descriptor of the program's) as one of TAI's own: at the lowest free
/// number >= own_descriptor_base() with FD_CLOEXEC set, in one fcntl, else wherever the kernel
/// puts it, as adopt_own_descriptor would. -1 with errno on failure (errno kept otherwise).
/// Thread-safe (lock-free).
int dup_own_descriptor(int fd) noexcept;

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), adopted. -1 with errno on failure. Thread-safe.
int make_own_eventfd() noexcept;

/// Forgets `fd` and closes it; returns close's result (errno as close leaves it). Thread-safe.
int close_own_descriptor(int fd) noexcept;

/// Forgets `fd` without closing it (the caller closes it some other way, e.g.
/// io_uring_queue_exit). Thread-safe.
void forget_own_descriptor(int fd) noexcept;

/// Whether `fd` is one of TAI's own (made by TAI and not closed since). Thread-safe
/// (one relaxed-enough acquire load: see the definition).
bool is_own_descriptor(int fd) noexcept;

/// The lowest number TAI moves its descriptors to. Computed once. Thread-safe.
int own_descriptor_base() noexcept;

/// True on threads TAI starts (controller workers, the I/O queue's pool): the preload library
/// passes every call such a thread makes straight to libc (a worker must never be routed back
/// into the controller that runs it). Set by the thread itself at its start; thread-local.
/// mark_this_thread_as_tai also blocks every blockable signal on the calling thread, so that the
/// program's handlers run on the program's threads, and names the thread (`name`, at most 15
/// characters, "tai-" first: what `top -H`, `ps -L`, perf and gdb show for it).
bool this_thread_is_tai() noexcept;
void mark_this_thread_as_tai(const char* name) noexcept;

/// Blocks every blockable signal on the calling thread while it lives and restores the mask
/// after. Held around the start of each of TAI's threads, so that a thread starts with every
/// signal blocked instead of with its creator's mask: the preload library does not block
/// signals on a program thread inside the layer (it defers a handler that would run there), so
/// without it a signal sent to the process could run a program handler, or the library's own
/// end-of-process handler, on a new thread before mark_this_thread_as_tai. Not thread-safe to
/// share; one per scope.
class SignalsBlockedScope {
 public:
  SignalsBlockedScope() noexcept;
  ~SignalsBlockedScope();
  SignalsBlockedScope(const SignalsBlockedScope&) = delete;
  SignalsBlockedScope& operator=(const SignalsBlockedScope&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace tai::detail

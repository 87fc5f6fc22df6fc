// tai/posix.hpp's layer: the process-wide state: the controller, the modes, and the keeper's
// futex words.
#include "src/posix/layer_internal.hpp"

namespace tai::posix::detail {

// ---------------------------------------------------------------------------------------------
// The controller's lifecycle

std::mutex g_init_mu;                       // configuring, restarting and shutting down
// Making the controller (make_controller), and g_down's store against it: a leaf lock, taken
// under an inode's mutex (a file leaving write-through opens its first engine file).
std::mutex g_make_mu;
// The settings are applied (configure): files may be routed. A process whose routed files all
// stay write-through (git, a shell appending a line) never makes a controller: its engines,
// workers and keeper are made at the first engine file. release by configure, acquire by users.
std::atomic<bool> g_configured{false};
std::atomic<Controller*> g_ctl{nullptr};    // release by make_controller, acquire by users
std::atomic<bool> g_down{false};            // shutting down or down: no new routing, no new cache
// Set after g_down, once every description's offset is the kernel's (hand_back_offsets): from
// then on libc serves every call. In between (the exit handler running while other threads
// still call), calls go on through their descriptions (offsets are the layer's until handed
// back), and those on files whose cache is closed already go to the kernel (shut_down_locked).
// release by the shutdown, acquire by Ref.
std::atomic<bool> g_handed_back{false};
// restart_for_testing's settings (under g_init_mu): built at first use, never destroyed (a
// thread may configure the layer while exit() destroys the library's statics).
std::optional<Settings>& settings_override() {
  static auto* settings = new std::optional<Settings>;
  return *settings;
}
std::atomic<bool> g_trivial{false};        // the current controller's tree (set before g_configured)
std::atomic<std::uint64_t> g_start_writeback{0};  // Settings::start_writeback_bytes (set before g_configured)
std::atomic<std::uint64_t> g_sync_through{0};     // Settings::sync_through_bytes (set before g_configured)
std::atomic<bool> g_start_through{true};          // Settings::files_start_through (set before g_configured)
std::atomic<int> g_fsync_mode{0};                 // FsyncMode as int: Settings::fsync_mode or set_fsync_mode
std::atomic<bool> g_fsync_mode_set{false};        // set_fsync_mode was called: the settings do not override it
std::atomic<bool> g_fsync_none{false};            // Settings::fsync_none_for_benchmark
std::atomic<std::uint64_t> g_max_delay_ns{1'000'000'000u};  // Settings::fsync_max_delay_ms
std::atomic<std::uint64_t> g_order_limit{256u << 20};      // Settings::order_queue_bytes (or the weak quota)
std::atomic<int> g_fsync_inline{0};                         // Settings::fsync_inline as int
bool order_mode() noexcept { return g_fsync_mode.load(std::memory_order_acquire) == static_cast<int>(FsyncMode::order); }

// ---------------------------------------------------------------------------------------------
// The keeper: one thread (started with the controller) that hands cached writes to the
// kernel when nobody else would in time:
//  * write-behind: a write made while nothing was dirty (g_dirty_since was 0) stamps the time
//    and wakes the keeper; the keeper sleeps until that stamp plus the deadline, clears the
//    stamp and writes everything back (write_back_all). A write after the clear stamps again.
//    So a write reaches the kernel within about one deadline, and nothing wakes the keeper
//    while nothing is dirty (it waits on its futex without a timeout).
//  * the ends of a program that skip the exit handler (write_back_for_end): the caller, maybe
//    a signal handler that interrupted a thread holding the allocator's or a stdio lock, only
//    bumps a counter, wakes the keeper and waits on a futex with a deadline, so that it never
//    blocks for good on a lock its own thread holds.
// The futex words are 32-bit atomics (std::atomic<uint32_t> has the plain representation).
std::atomic<std::uint64_t> g_write_behind_ns{0};  // Settings::write_behind_ms (set before g_configured)
std::atomic<std::uint64_t> g_dirty_since{0};      // CLOCK_MONOTONIC ns of the oldest unstamped write; 0: clean
std::atomic<std::uint64_t> g_handing_since{0};    // the stamp the keeper's current write-back took over; 0: none
std::atomic<std::uint32_t> g_keeper_wake{0};      // futex: bumped when the keeper has new work
std::atomic<std::uint32_t> g_end_requested{0};    // write_back_for_end calls made
std::atomic<std::uint32_t> g_end_done{0};         // futex: requests served (the keeper's count)
std::atomic<bool> g_keeper_started{false};
std::atomic<bool> g_keeper_failed{false};         // the thread could not be made: callers write back themselves

std::uint64_t now_ns() noexcept {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}
uint32_t* futex_word(std::atomic<std::uint32_t>& a) noexcept { return reinterpret_cast<uint32_t*>(&a); }
// Waits while *word == seen, at most `ns` (0: no limit). Spurious returns are the caller's loop's.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::uint64_t ns) noexcept {
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  (void)::syscall(SYS_futex, futex_word(word), FUTEX_WAIT_PRIVATE, seen, ns ? &ts : nullptr, nullptr, 0);
}
void futex_wake(std::atomic<std::uint32_t>& word, int n) noexcept {
  (void)::syscall(SYS_futex, futex_word(word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

// After a write was submitted (under the inode's mutex, after ino.last was set): stamps the
// first dirty write for the keeper. Two loads when the stamp is set already.
void note_dirty() noexcept {
  if (g_write_behind_ns.load(std::memory_order_relaxed) == 0) return;
  if (g_dirty_since.load(std::memory_order_relaxed) != 0) return;
  std::uint64_t expected = 0;
  // acq_rel: pairs with the keeper's clearing exchange (a stamp made after the clear is seen by
  // the keeper's next look; a write made before the clear is in the keeper's write-back).
  if (g_dirty_since.compare_exchange_strong(expected, now_ns(), std::memory_order_acq_rel)) {
    g_keeper_wake.fetch_add(1, std::memory_order_release);
    futex_wake(g_keeper_wake, 1);
  }
}

}  // namespace tai::posix::detail

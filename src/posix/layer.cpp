// tai/posix.hpp: the POSIX-shaped layer over a process-wide controller. Structures and the
// cross-thread ordering rule: src/posix/layer.hpp. Internal functions return -errno (as the
// kernel does) and never read errno except right after a system call; the public functions turn
// that into -1 and errno, and restore the caller's errno on success.
#include "src/posix/layer.hpp"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "engines/common/own_descriptors.hpp"
#include "tai/posix.hpp"

namespace tai::posix::detail {
namespace {

constexpr std::uint64_t kOffMax = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
// The kernel's MAX_RW_COUNT (INT_MAX rounded down to a page): longer transfers are short.
constexpr std::size_t kMaxRw = static_cast<std::size_t>(INT_MAX) & ~static_cast<std::size_t>(4095);
constexpr int kExitStatusOnLoss = 75;  // EX_TEMPFAIL

// ---------------------------------------------------------------------------------------------
// Settings and logging

std::atomic<bool> g_log{false};

void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void logf(const char* fmt, ...) {
  if (!g_log.load(std::memory_order_relaxed)) return;
  const int saved = errno;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "tai::posix: %s\n", line);
  errno = saved;
}

bool parse_bytes(const std::string& s, std::uint64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || s[0] == '-') return false;
  std::uint64_t mul = 1;
  std::string rest(end);
  if (rest == "" || rest == "B") {
    mul = 1;
  } else if (rest == "K" || rest == "k" || rest == "KiB") {
    mul = 1ull << 10;
  } else if (rest == "M" || rest == "m" || rest == "MiB") {
    mul = 1ull << 20;
  } else if (rest == "G" || rest == "g" || rest == "GiB") {
    mul = 1ull << 30;
  } else {
    return false;
  }
  if (v > std::numeric_limits<std::uint64_t>::max() / mul) return false;
  out = v * mul;
  return true;
}

/// A number of milliseconds in 0..86400000 (at most a day: the deadline arithmetic of the keeper
/// and of the idle flush stays far from overflow).
bool parse_ms(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long ms = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || ms > 86'400'000ull) return false;
  out = ms;
  return true;
}

}  // namespace

Settings settings_from_env(std::vector<std::string>* warnings) {
  const int saved = errno;
  Settings s;
  s.options.workers = 2;
  s.options.engine = "auto";
  auto warn = [&](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  // A byte count (suffixes K, M, G) from `name`, into `target`; a malformed value keeps it.
  auto env_bytes = [&](const char* name, std::uint64_t& target) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return;
    std::uint64_t bytes = 0;
    if (parse_bytes(text, bytes))
      target = bytes;
    else
      warn(std::string(name) + "='" + text + "' is not a byte count (suffixes K, M, G); using " + std::to_string(target));
  };
  if (const char* e = std::getenv("TAI_ENGINE"); e && *e) s.options.engine = e;
  if (const char* t = std::getenv("TAI_TREE"); t && *t) {
    const std::string v = t;
    if (v == "default") {
      s.trivial_tree = false;
    } else if (v == "trivial") {
      s.trivial_tree = true;
    } else {
      warn("TAI_TREE='" + v + "' is neither 'default' nor 'trivial'; using 'default'");
    }
  }
  if (const char* w = std::getenv("TAI_WORKERS"); w && *w) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(w, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > 1024)
      warn(std::string("TAI_WORKERS='") + w + "' is not a number in 1..1024; using 2");
    else
      s.options.workers = static_cast<unsigned>(n);
  }
  if (const char* q = std::getenv("TAI_QUOTA"); q && *q) {
    const std::string v = q;
    const auto comma = v.find(',');
    std::uint64_t weak = 0, strict = 0;
    if (comma == std::string::npos || !parse_bytes(v.substr(0, comma), weak) ||
        !parse_bytes(v.substr(comma + 1), strict) || weak > strict || strict == 0) {
      warn("TAI_QUOTA='" + v + "' is not 'weak,strict' in bytes (suffixes K, M, G) with weak <= strict; using " +
           std::to_string(s.options.weak_quota) + "," + std::to_string(s.options.strict_quota));
    } else {
      s.options.weak_quota = weak;
      s.options.strict_quota = strict;
    }
  }
  env_bytes("TAI_START_WRITEBACK", s.start_writeback_bytes);
  if (const char* b = std::getenv("TAI_WRITE_BEHIND_MS"); b && *b) {
    std::uint64_t ms = 0;
    if (parse_ms(b, ms))
      s.write_behind_ms = ms;
    else
      warn(std::string("TAI_WRITE_BEHIND_MS='") + b + "' is not a number of milliseconds in 0..86400000; using " +
           std::to_string(s.write_behind_ms));
  }
  env_bytes("TAI_SYNC_THROUGH", s.sync_through_bytes);
  // The controller's idle flush (ControllerOptions::flush_idle_ns): "off" turns it off, so that
  // only fsync, close, the quota and the write-behind deadline hand cached writes to the kernel
  // (the preload's kill test checks the deadline that way).
  if (const char* f = std::getenv("TAI_FLUSH_IDLE_MS"); f && *f) {
    std::uint64_t ms = 0;
    if (std::string(f) == "off")
      s.options.flush_idle_ns = -1;
    else if (parse_ms(f, ms))
      s.options.flush_idle_ns = static_cast<std::int64_t>(ms) * 1'000'000;
    else
      warn(std::string("TAI_FLUSH_IDLE_MS='") + f + "' is not 'off' or a number of milliseconds in 0..86400000; using " +
           (s.options.flush_idle_ns < 0 ? std::string("off") : std::to_string(s.options.flush_idle_ns / 1'000'000)));
  }
  // Write-around (BTreeOptions::write_around_bytes) for writes of a page or more: behind the
  // POSIX calls the kernel's page cache already holds what was written, so copying such a write
  // into cache blocks over a range that holds none buys nothing (docs/results/cache-cost.md).
  s.options.tree_options.write_around_bytes = 4096;
  env_bytes("TAI_WRITE_AROUND", s.options.tree_options.write_around_bytes);
  // The cache's memory (ControllerOptions::clean_budget, huge_pages): for measuring them.
  env_bytes("TAI_CLEAN_BUDGET", s.options.clean_budget);
  if (const char* h = std::getenv("TAI_HUGE_PAGES"); h && *h) {
    const std::string v = h;
    if (v == "0" || v == "1")
      s.options.huge_pages = v == "1";
    else
      warn("TAI_HUGE_PAGES='" + v + "' is neither 0 nor 1; using " + (s.options.huge_pages ? "1" : "0"));
  }
  if (const char* f = std::getenv("TAI_FSYNC"); f && *f) {
    const std::string v = f;
    if (v == "full") {
      s.fsync_mode = FsyncMode::full;
    } else if (v == "order") {
      s.fsync_mode = FsyncMode::order;
    } else {
      warn("TAI_FSYNC='" + v + "' is neither 'full' nor 'order'; using 'full'");
    }
  }
  if (const char* m = std::getenv("TAI_FSYNC_MAX_DELAY"); m && *m) {
    std::string v = m;
    std::uint64_t scale = 1;
    if (v.size() > 2 && v.compare(v.size() - 2, 2, "ms") == 0) {
      v.resize(v.size() - 2);
    } else if (v.size() > 1 && v.back() == 's') {
      v.pop_back();
      scale = 1000;
    }
    std::uint64_t n = 0;
    if (!v.empty() && parse_ms(v.c_str(), n) && n * scale <= 86'400'000ull && n * scale > 0)
      s.fsync_max_delay_ms = n * scale;
    else
      warn(std::string("TAI_FSYNC_MAX_DELAY='") + m + "' is not a delay (1s, 250ms, or milliseconds) in 1ms..1 day; using " +
           std::to_string(s.fsync_max_delay_ms) + "ms");
  }
  // Benchmark only, deliberately not documented as an option: the unsafe upper bound.
  if (const char* n = std::getenv("TAI_FSYNC_BENCHMARK_ONLY_NONE"); n && std::string(n) == "1")
    s.fsync_none_for_benchmark = true;
  if (const char* l = std::getenv("TAI_LOG"); l && *l && std::string(l) != "0") s.log = true;
  errno = saved;
  return s;
}

namespace {

// ---------------------------------------------------------------------------------------------
// The controller's lifecycle

std::mutex g_init_mu;                       // making, restarting and shutting down
std::atomic<Controller*> g_ctl{nullptr};    // release by the maker, acquire by users
std::atomic<bool> g_down{false};            // shutting down or down: no new routing, no new cache
// Set after g_down, once every description's offset is the kernel's (hand_back_offsets): from
// then on libc serves every call. In between (the exit handler running while other threads
// still call), calls go on through their descriptions (offsets are the layer's until handed
// back), and those on files whose cache is closed already go to the kernel (shut_down_locked).
// release by the shutdown, acquire by Ref.
std::atomic<bool> g_handed_back{false};
std::optional<Settings> g_override;         // restart_for_testing's settings (under g_init_mu)
std::atomic<bool> g_trivial{false};        // the current controller's tree (set before g_ctl)
std::atomic<std::uint64_t> g_start_writeback{0};  // Settings::start_writeback_bytes (set before g_ctl)
std::atomic<std::uint64_t> g_sync_through{0};     // Settings::sync_through_bytes (set before g_ctl)
std::atomic<int> g_fsync_mode{0};                 // FsyncMode as int: Settings::fsync_mode or set_fsync_mode
std::atomic<bool> g_fsync_mode_set{false};        // set_fsync_mode was called: the settings do not override it
std::atomic<bool> g_fsync_none{false};            // Settings::fsync_none_for_benchmark
std::atomic<std::uint64_t> g_max_delay_ns{1'000'000'000u};  // Settings::fsync_max_delay_ms
std::atomic<std::uint64_t> g_order_limit{256u << 20};      // Settings::order_queue_bytes (or the weak quota)
bool order_mode() noexcept { return g_fsync_mode.load(std::memory_order_acquire) == static_cast<int>(FsyncMode::order); }

// ---------------------------------------------------------------------------------------------
// The keeper: one thread (started with the first routed file) that hands cached writes to the
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
std::atomic<std::uint64_t> g_write_behind_ns{0};  // Settings::write_behind_ms (set before g_ctl)
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

// ---------------------------------------------------------------------------------------------
// Inodes

// Registered inodes that are not write-through: the only ones whose bytes the cache may hold
// (a write-through file's bytes are all in the kernel, see Inode::through). While it is 0, in
// the full fsync mode, a write-back of every file has nothing to do and the kernel's size of
// every file is its logical size, so nothing_cached() lets the preload library skip the
// layer for record locks and stat calls (SQLite makes about a dozen of them per transaction,
// and each call into the layer costs two rt_sigprocmask calls). Incremented before a file can
// take a cached write (under its mutex, or before the inode is published), decremented after
// its cache was made durable (a sync before write-through) or written back and closed (the
// last close): a thread that reads 0 has every write it happened-after in the kernel, and a
// write of another thread racing with the read is one made after the call, as with libc.
std::atomic<long> g_cached_files{0};

struct Inode;
void count_cached_locked(Inode& ino, bool cached) noexcept;

struct Inode {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;          // for messages
  bool via_proc = true;      // TAI's engine reaches the file through /proc/self/fd/<fd> (else `name`)
  bool engine_readable = true;
  int opens = 0;             // descriptions referring to it (under g_reg_mu)
  std::atomic<long> refs{1}; // memory: 1 while registered, plus one per write continuation

  std::mutex mu;             // submissions (their order across threads), `file` swaps
  File file;                 // under mu
  std::thread::id last_tid;  // under mu: who submitted `last`
  Receipt last;              // under mu: the last asynchronous operation
  Receipt last_sync;         // under mu: the last fsync_async / barrier (for wait())
  std::atomic<std::uint64_t> size{0};  // logical size, cached writes included
  std::atomic<int> write_error{0};     // first failed write not yet reported (errno)
  std::atomic<std::uint64_t> writes_submitted{0};  // under mu (atomic for the settle wait)
  std::atomic<std::uint64_t> writes_settled{0};    // by the writes' continuations
  // writes_submitted as it was when a sync of the file, or a write-back of every file, that
  // succeeded was submitted: equal to writes_submitted, nothing of the file is cached dirty (a
  // write-back of everything has nothing to do for it; SQLite takes record locks, which ask for
  // one, several times per transaction). Written under mu.
  std::atomic<std::uint64_t> clean_upto{0};
  int writeback_fd = -1;             // TAI's own duplicate, for sync_file_range (-1: none)
  std::uint64_t unstarted_bytes = 0; // under mu: written since the last start of write-back
  // Under mu: something went through `file` (a cached write or a read, which may cache what it
  // read) since it was opened. An O_APPEND write goes to the kernel (see append_through_locked),
  // and the cache must then not hold bytes that the kernel's append would make stale.
  bool cache_used = false;
  // Under mu: write-through (Settings::sync_through_bytes): writes, reads and syncs go to the
  // kernel on the program's descriptor. Set only when the cache holds nothing dirty of the file
  // (right after a successful sync that covered every write submitted), and nothing is cached
  // while it is set, so the kernel's copy is the file; `file` may hold stale clean blocks (then
  // cache_used is set and they are dropped on the way back) or be closed (a file opened
  // write-through is given its engine file only when it goes back to the cache).
  bool through = false;
  // Under mu (or before the inode is published): counted in g_cached_files (see there).
  bool counted_cached = false;
  std::uint64_t bytes_since_sync = 0;  // under mu: written since the last sync (or the open)
  // TAI_FSYNC=order (see "The order mode" below): writes of this file held back in the layer
  // behind an epoch not yet durable (reads wait for them to reach the cache), and whether the
  // open epoch's list of files to sync has it (under the order state's mutex).
  std::atomic<std::uint64_t> deferred{0};
  bool in_open_dirty = false;

  Inode() = default;
  Inode(const Inode&) = delete;
  Inode& operator=(const Inode&) = delete;
  ~Inode() {
    if (writeback_fd >= 0) (void)tai::detail::close_own_descriptor(writeback_fd);
  }
};

void inode_unref(Inode* ino) noexcept {
  if (ino->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete ino;
}

void note_error(Inode& ino, int err) noexcept {
  int expected = 0;
  ino.write_error.compare_exchange_strong(expected, err, std::memory_order_acq_rel);
}

int error_of(const Receipt& r) noexcept {
  const std::error_code e = r.error();
  if (!e) return 0;
  return e.category() == std::generic_category() || e.category() == std::system_category() ? e.value() : EIO;
}

// Waits until every write submitted before `target` was counted by its continuation (the
// continuation runs just after the write's receipt finishes, so this is short).
void settle(Inode& ino, std::uint64_t target) noexcept {
  while (ino.writes_settled.load(std::memory_order_acquire) < target) std::this_thread::yield();
}

// Under ino.mu: makes this thread's next submission come after the last asynchronous one of
// another thread (see layer.hpp, "Ordering across threads").
void order(Inode& ino) noexcept {
  const std::thread::id me = std::this_thread::get_id();
  if (ino.last_tid != me) {
    if (ino.last.valid()) ino.last.wait();
    ino.last_tid = me;
  }
}

void count_cached_locked(Inode& ino, bool cached) noexcept {
  if (ino.counted_cached == cached) return;
  ino.counted_cached = cached;
  g_cached_files.fetch_add(cached ? 1 : -1, std::memory_order_seq_cst);
}

struct InodeKey {
  dev_t dev;
  ino_t ino;
  bool operator<(const InodeKey& o) const noexcept { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};
std::mutex g_reg_mu;
std::map<InodeKey, Inode*>& registry() {
  static auto* m = new std::map<InodeKey, Inode*>;  // never destroyed: used by the exit handler
  return *m;
}

// Never takes g_init_mu (callers hold g_reg_mu or an inode's mutex, which the exit handler takes
// after g_init_mu): the controller must exist already.
Result<File> open_engine_file(const std::string& path, bool readable) {
  Controller* c = g_ctl.load(std::memory_order_acquire);
  if (!c || g_down.load(std::memory_order_acquire))
    return Error{std::make_error_code(std::errc::operation_canceled), "the controller is not available"};
  const OpenMode mode(readable ? Open::read | Open::write : Open::write);
  const bool trivial = g_trivial.load(std::memory_order_acquire);
  return trivial ? c->open<BTreeTrivial>(path, mode) : c->open<BTreeDefault>(path, mode);
}

// Closes the inode's File, waiting for its write-back; the close's error (or an earlier write's
// not yet reported) is returned (errno, 0 if none). Under ino.mu.
int close_file_locked(Inode& ino) noexcept {
  order(ino);
  const std::uint64_t target = ino.writes_submitted.load(std::memory_order_relaxed);
  int err = 0;
  if (ino.file.is_open()) {
    const Receipt c = ino.file.close();
    err = error_of(c);
  }
  ino.file = File();
  ino.last = Receipt();
  ino.last_sync = Receipt();
  settle(ino, target);
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) {
    if (err == 0) err = w;
  }
  return err;
}

// Last description of the inode gone: unregister, close the File. Returns its error (errno).
int inode_release_open(Inode* ino) noexcept {
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    if (--ino->opens > 0) return 0;
    registry().erase(InodeKey{ino->dev, ino->ino});
  }
  int err;
  {
    std::lock_guard<std::mutex> lock(ino->mu);
    err = close_file_locked(*ino);
    count_cached_locked(*ino, false);  // written back (or its error kept in err), unregistered
  }
  if (err) logf("close of %s: write-back failed: %s", ino->name.c_str(), std::strerror(err));
  inode_unref(ino);
  return err;
}

// Opens the inode's File again after close_file_locked (an empty cache). Under ino.mu.
void reopen_locked(Inode& ino, int fd, const char* why) noexcept {
  // Through the descriptor at hand: the one the inode was first opened as may be closed by now
  // (and its number reused).
  const std::string how = ino.via_proc ? "/proc/self/fd/" + std::to_string(fd) : ino.name;
  auto f = open_engine_file(how, ino.engine_readable);
  if (!f && ino.engine_readable && f.error().code == std::errc::permission_denied) {
    // A file routed write-through was never opened by the engine: the first open learns here
    // what maybe_route learns for a cached one.
    ino.engine_readable = false;
    f = open_engine_file(how, false);
  }
  if (f) {
    ino.file = std::move(f.value());
  } else {
    // The descriptor is still the program's: the file cannot be reopened only if /proc or the
    // controller went away. Later operations fail with EIO (the Receipt of a closed File).
    logf("%s of %s: cannot reopen through TAI: %s", why, ino.name.c_str(), f.error().message.c_str());
    note_error(ino, EIO);
  }
  ino.cache_used = false;
}

// Truncation through the cache: write everything back and close the File (its cache goes with
// it), truncate with the program's descriptor, open the File again. Under ino.mu. Returns -errno
// of the truncation; a write-back error is kept for the next fsync/close.
int truncate_locked(Inode& ino, int fd, std::uint64_t length) noexcept {
  if (const int err = close_file_locked(ino)) note_error(ino, err);
  int rc;
  do {
    rc = ::ftruncate(fd, static_cast<off_t>(length));
  } while (rc < 0 && errno == EINTR);
  const int terr = rc < 0 ? errno : 0;
  struct stat st {};
  if (::fstat(fd, &st) == 0) ino.size.store(static_cast<std::uint64_t>(st.st_size), std::memory_order_release);
  reopen_locked(ino, fd, "truncate");
  return -terr;
}

// ---------------------------------------------------------------------------------------------
// Write-through (Settings::sync_through_bytes)

// Paths of files that went write-through, most recent last: a file opened again under one of
// them starts write-through (a journal made and deleted by every transaction would otherwise
// pay a sync through the workers before each of its lives learns it). Bounded; a leaf lock.
constexpr std::size_t kThroughPaths = 64;
std::mutex g_through_mu;
std::vector<std::string>& through_paths() {
  static auto* v = new std::vector<std::string>;  // never destroyed: used by the exit handler
  return *v;
}
bool through_path_known(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_through_mu);
  const auto& v = through_paths();
  return std::find(v.begin(), v.end(), path) != v.end();
}
void remember_through_path(const std::string& path, bool through) {
  try {
    std::lock_guard<std::mutex> lock(g_through_mu);
    auto& v = through_paths();
    v.erase(std::remove(v.begin(), v.end(), path), v.end());
    if (!through) return;
    if (v.size() >= kThroughPaths) v.erase(v.begin());
    v.push_back(path);
  } catch (...) {
    // Only a hint for the next open: without it that file starts cached.
  }
}

// Under ino.mu: whether the file's transfers and syncs go to the kernel on the program's
// descriptor: write-through, or the layer is shutting down and the file's cache is closed
// (shut_down_locked).
bool kernel_locked(const Inode& ino) noexcept;

// Under ino.mu, after order(): the file leaves write-through. Stale clean blocks (cached before
// it went write-through, overwritten in the kernel since) go with a close and reopen of the
// engine file; a file opened write-through gets its first engine file. false (and the file
// stays write-through, which is always correct) when the engine cannot open it.
bool leave_through_locked(Inode& ino, int fd) noexcept {
  if (!ino.through) return true;
  if (ino.file.is_open() && ino.cache_used) {
    if (const int err = close_file_locked(ino)) note_error(ino, err);
  }
  if (!ino.file.is_open()) {
    const int before = ino.write_error.load(std::memory_order_acquire);
    reopen_locked(ino, fd, "leaving write-through");
    if (!ino.file.is_open()) {
      // The reopen's EIO: nothing was lost, the kernel has the file.
      if (before == 0) ino.write_error.store(0, std::memory_order_release);
      return false;
    }
  }
  count_cached_locked(ino, true);  // before the write that made it leave reaches the cache
  ino.through = false;
  remember_through_path(ino.name, false);
  logf("%s: back to the cache (more than %" PRIu64 " bytes between syncs)", ino.name.c_str(),
       g_sync_through.load(std::memory_order_relaxed));
  return true;
}

// ---------------------------------------------------------------------------------------------
// Descriptions and the descriptor table

struct Description {
  std::atomic<long> refs{0};
  Inode* inode = nullptr;
  int accmode = O_RDONLY;
  bool append = false;
  std::mutex mu;            // offset users: read, write, readv, writev, lseek
  std::uint64_t offset = 0; // under mu
  bool handed = false;      // under mu: the offset went to the kernel (shutdown): libc serves it
};

std::mutex g_pool_mu;
std::vector<Description*>& pool() {
  static auto* p = new std::vector<Description*>;  // descriptions are never freed (type-stable)
  return *p;
}

Description* new_description() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!pool().empty()) {
      Description* d = pool().back();
      pool().pop_back();
      return d;
    }
  }
  return new Description;
}

// Drops a reference; the last one releases the inode. Returns the close's error (errno) when
// this was the inode's last description.
int release(Description* d) noexcept {
  if (d->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return 0;
  Inode* ino = std::exchange(d->inode, nullptr);
  const int err = ino ? inode_release_open(ino) : 0;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  try {
    pool().push_back(d);
  } catch (...) {
    // Leaked rather than freed: a stale lookup may still touch its counter.
  }
  return err;
}

constexpr int kChunkBits = 10;
constexpr int kTopBits = 16;
constexpr int kMaxFd = 1 << (kChunkBits + kTopBits);
struct Chunk {
  std::atomic<Description*> slot[1u << kChunkBits] = {};
};
std::atomic<Chunk*> g_top[1u << kTopBits] = {};  // zero-initialised: untouched pages cost nothing

std::atomic<Description*>* slot_of(int fd, bool make) {
  if (fd < 0 || fd >= kMaxFd) return nullptr;
  std::atomic<Chunk*>& top = g_top[fd >> kChunkBits];
  Chunk* c = top.load(std::memory_order_acquire);
  if (!c) {
    if (!make) return nullptr;
    auto* fresh = new (std::nothrow) Chunk;
    if (!fresh) return nullptr;
    if (top.compare_exchange_strong(c, fresh, std::memory_order_acq_rel, std::memory_order_acquire)) {
      c = fresh;
    } else {
      delete fresh;  // another thread made it; c holds theirs
    }
  }
  return &c->slot[fd & ((1 << kChunkBits) - 1)];
}

// A reference to fd's description, or nullptr when fd is not routed.
Description* acquire(int fd) noexcept {
  std::atomic<Description*>* s = slot_of(fd, false);
  if (!s) return nullptr;
  for (;;) {
    Description* d = s->load(std::memory_order_acquire);
    if (!d) return nullptr;
    long r = d->refs.load(std::memory_order_relaxed);
    bool got = false;
    while (r > 0) {
      if (d->refs.compare_exchange_weak(r, r + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
        got = true;
        break;
      }
    }
    if (got) {
      if (s->load(std::memory_order_acquire) == d) return d;
      release(d);
    }
    // Released or recycled meanwhile: look again.
  }
}

struct Ref {
  Description* d;
  explicit Ref(int fd) noexcept : d(g_handed_back.load(std::memory_order_acquire) ? nullptr : acquire(fd)) {}
  ~Ref() {
    if (d) release(d);
  }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  explicit operator bool() const noexcept { return d != nullptr; }
  Description* operator->() const noexcept { return d; }
};

// Puts `d` (one reference, the slot's) at fd. A description left there by a descriptor the
// program closed behind the layer's back (::close) is stale: it is released.
void install(int fd, Description* d) {
  std::atomic<Description*>* s = slot_of(fd, true);
  Description* old = s->exchange(d, std::memory_order_acq_rel);
  if (old) {
    logf("fd %d was closed behind the layer's back; its old state is dropped", fd);
    release(old);
  }
}

// ---------------------------------------------------------------------------------------------
// Transfers (routed descriptors). All return -errno or bytes.

bool readable(const Description& d) { return d.accmode == O_RDONLY || d.accmode == O_RDWR; }
bool writable(const Description& d) { return d.accmode == O_WRONLY || d.accmode == O_RDWR; }

std::uint64_t current_size(const Inode& ino, int fd) {
  std::uint64_t size = ino.size.load(std::memory_order_acquire);
  struct stat st {};
  if (::fstat(fd, &st) == 0) size = std::max<std::uint64_t>(size, static_cast<std::uint64_t>(st.st_size));
  return size;
}

void grow_size(Inode& ino, std::uint64_t end) noexcept {
  std::uint64_t cur = ino.size.load(std::memory_order_relaxed);
  while (cur < end && !ino.size.compare_exchange_weak(cur, end, std::memory_order_acq_rel)) {
  }
}

// Under ino.mu, after a write of n bytes: every start_writeback_bytes, the controller writes its
// dirty cache back to the kernel (Controller::flush: every file, not synced) and then a worker
// asks the kernel to start writing the file's dirty pages to the device. A program that computes
// between writes without pausing long enough for the controller's idle flush would otherwise
// leave everything in the cache until its fsync, and the kernel would start the device write only
// at that fsync (or after its 30 s dirty timeout): the fsync would wait for all of it. Started
// early, the device works while the program computes. Overwrites inside one interval still meet
// in the cache. The continuation holds a reference so that the descriptor outlives it.
void start_writeback_every(Inode& ino, std::size_t n) {
  const std::uint64_t every = g_start_writeback.load(std::memory_order_relaxed);
  if (every == 0 || ino.writeback_fd < 0) return;
  ino.unstarted_bytes += n;
  if (ino.unstarted_bytes < every) return;
  ino.unstarted_bytes = 0;
  Controller* c = g_ctl.load(std::memory_order_acquire);
  if (!c) return;
  ino.refs.fetch_add(1, std::memory_order_relaxed);
  Inode* ip = &ino;
  Receipt r = c->flush();
  r.then([ip, c](const Receipt&) {
    // A failed flush leaves its data dirty in the cache; the next fsync writes it again and
    // reports the error. The system call goes to a task of its own: a continuation runs inside a
    // round and must not block, and sync_file_range may (while the device's queue is full).
    Receipt start = c->submit([ip] {
      // No WAIT flags: start the device write and return.
      (void)::sync_file_range(ip->writeback_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    });
    start.then([ip](const Receipt&) { inode_unref(ip); });
  });
}

// Submits one write under ino.mu at `pos` (or at the end of file when `append`: pos is set).
// Returns -errno or the bytes (all of them: the cache takes everything).
ssize_t submit_write_locked(Inode& ino, const void* buf, std::size_t n, std::uint64_t& pos, bool append) {
  if (append) pos = ino.size.load(std::memory_order_acquire);
  if (pos > kOffMax || n > kOffMax - pos) return append ? -EFBIG : -EINVAL;
  Receipt r = ino.file.write(pos, buf, n);
  if (r.finished() && !r.ok()) return -error_of(r);
  grow_size(ino, pos + n);
  start_writeback_every(ino, n);
  ino.writes_submitted.fetch_add(1, std::memory_order_relaxed);
  ino.refs.fetch_add(1, std::memory_order_relaxed);
  Inode* ip = &ino;
  r.then([ip](const Receipt& done) {
    if (!done.ok()) note_error(*ip, error_of(done));
    ip->writes_settled.fetch_add(1, std::memory_order_release);
    inode_unref(ip);
  });
  ino.last = std::move(r);
  ino.last_tid = std::this_thread::get_id();
  ino.cache_used = true;
  note_dirty();
  return static_cast<ssize_t>(n);
}

// The kernel's order after the access-mode check: access_ok (a range whose end passes the top
// of the user address space is EFAULT: 2^56 - 4096 covers 5-level paging, and a count above
// SSIZE_MAX always passes it), then rw_verify_area (EINVAL), then the clamp to MAX_RW_COUNT.
ssize_t clamp_count(const void* buf, std::size_t& n) {
  constexpr std::uintptr_t kUserTop = (std::uintptr_t{1} << 56) - 4096;
  const auto at = reinterpret_cast<std::uintptr_t>(buf);
  if (n > kUserTop || at > kUserTop - n) return -EFAULT;
  if (static_cast<ssize_t>(n) < 0) return -EINVAL;
  if (n > kMaxRw) n = kMaxRw;
  return 0;
}

// O_APPEND: the write goes through to the kernel on the program's own descriptor (opened with
// O_APPEND), so that the kernel takes the end of file atomically against every other process
// appending to it (shell `>>` from two processes, loggers): an end taken from this process's
// cached size would write over what another process appended meanwhile. Order within the
// process holds because, under the inode's mutex and after order(), the cache is first written
// back and emptied (closed and reopened) whenever something went through it since the last
// append: the kernel then has every earlier write, so the append lands after them, and a later
// read through the cache finds no stale copy of the bytes the kernel appended. A file that is
// only appended to never touches the cache: each write is the kernel's write plus an lseek.
// `kernel_write` makes the system call (write, pwrite or writev on fd) and returns its result
// or -1 with errno. Sets `end` to the end of what was written when `end_from_offset` (the
// descriptor's offset moved there), else to the file's size. Returns bytes or -errno.
template <class KernelWrite>
ssize_t append_through_locked(Inode& ino, int fd, std::uint64_t& end, bool end_from_offset, KernelWrite kernel_write) {
  if (ino.cache_used) {
    if (const int err = close_file_locked(ino)) note_error(ino, err);  // reported by the next fsync/close
    reopen_locked(ino, fd, "O_APPEND write");
  }
  ssize_t r;
  do {
    r = kernel_write();
  } while (r < 0 && errno == EINTR);
  if (r < 0) return -errno;
  off_t at = -1;
  if (end_from_offset) {
    at = ::lseek(fd, 0, SEEK_CUR);
  } else {
    struct stat st {};
    if (::fstat(fd, &st) == 0) at = st.st_size;
  }
  if (at >= 0) {
    end = static_cast<std::uint64_t>(at);
    grow_size(ino, end);
  }
  return r;
}

// Under ino.mu: the layer is shutting down (exit in another thread, exec) and this inode's File
// is closed already (written back): the kernel has the file, and a call that still holds the
// description (g_handed_back not yet set, or set after it took its reference) goes there, at the
// description's offset (the kernel's calls succeed during exit too; failing them would be a
// change the program can see).
bool shut_down_locked(const Inode& ino) noexcept {
  return !ino.file.is_open() && g_down.load(std::memory_order_acquire);
}

bool kernel_locked(const Inode& ino) noexcept { return ino.through || shut_down_locked(ino); }

// Under ino.mu, before a write of n bytes: a write-through file that has had more than
// sync_through_bytes written since its last sync goes back to the cache (this write included).
void count_write_locked(Inode& ino, int fd, std::size_t n) noexcept {
  ino.bytes_since_sync += n;
  // Under order every cached write must pass the epoch gate: a write-through file leaves.
  if (ino.through && (order_mode() || ino.bytes_since_sync > g_sync_through.load(std::memory_order_relaxed)))
    (void)leave_through_locked(ino, fd);
}

// ---------------------------------------------------------------------------------------------
// The order mode (TAI_FSYNC=order)
//
// One process-wide state. While no epoch is waiting for the device the gate is open: writes go
// to the cache as in `full`, and each file written is put on the open epoch's list of files to
// sync. An fsync closes the epoch: it moves that list (and the writes held back, below) into an
// Epoch at the back of the `closed` queue, closes the gate, and returns. From then on writes are
// not given to the cache (whose idle flush, quota, write-around and write-behind would send them
// to the engine at any time) but copied into `open_writes`. The order thread takes the epochs
// from the front, one at a time: it gives the epoch's held writes to the cache, then syncs every
// file of the epoch through the engine (tai::File::fsync: write-back and the engine's durable
// sync) and waits for all of them; only then is the epoch popped and the next one started. When
// the queue is empty it gives the open epoch's held writes to the cache and opens the gate. So a
// write of epoch n+1 reaches the cache, hence the engine, only after every file of epochs <= n
// was synced: the rule of DESIGN section 3. Deliberately simple: one epoch in flight, one sync
// per file per epoch, no merging of epochs (which would break the rule).
//
// What goes to the kernel behind the cache (O_APPEND writes, ftruncate, and in the preload
// unlink/rename/link, open with O_TRUNC, an fsync of a descriptor that is not routed) first
// waits until the gate is open (order_drain) or the closed epochs are durable (order_point), and
// is done with the gate held open (the state's mutex), so that the next fsync covers it.
// Not covered: a file that cannot leave write-through (its engine cannot open it) keeps writing
// to the kernel directly; mkdir, symlink and the creation of a file are not ordered (an empty
// new file or directory may appear before the epoch that precedes it is durable).
//
// Lock order: a description's mutex, an inode's mutex, then the state's mutex. The order thread
// never holds the state's mutex while it takes an inode's.
//
// Unfinished: one device sync per epoch, one epoch at a time, is as many syncs as `full`; the
// mode wins only the overlap of the program's work with the sync, and loses a hand-off per epoch
// (docs/results/fsync-order.md). Fewer syncs than epochs needs a TAI-side log of epochs (not
// started). The rule is checked on the recording engine's log (test/posix_layer/fsync_order_test.cpp),
// on every multi-file crash state of the crash simulator's log
// (test/posix_layer/fsync_order_crash_test.cpp, docs/crashsim.md), and the kill suite runs sqlite3
// under this mode (test/kill/preload_kill_test.cpp).

struct Deferred {
  Inode* ino;  // holds a reference
  std::uint64_t pos;
  std::vector<char> bytes;
};
struct Epoch {
  std::vector<Deferred> writes;  // held back while an earlier epoch was in flight
  std::vector<Inode*> dirty;     // written through the cache in this epoch; each holds a reference
  std::uint64_t seq = 0;
  std::uint64_t closed_ns = 0;
  bool data_only = true;
};
struct OrderState {
  std::mutex mu;
  std::condition_variable cv;
  bool gate_closed = false;
  std::deque<Epoch> closed;  // front: the epoch being made durable
  std::vector<Deferred> open_writes;
  std::vector<Inode*> open_dirty;
  std::uint64_t queued_bytes = 0;  // bytes in `closed` and `open_writes` not yet in the cache
  std::uint64_t closed_seq = 0, durable_seq = 0;
  // How long the order thread took for one epoch lately (its writes to the cache, then its
  // syncs), an average with weight 1/4 on the newest; 0 until the first epoch is done. With the
  // queue's length it predicts when a new epoch will be durable (order_fsync).
  std::uint64_t epoch_ns = 0;
  std::uint64_t front_started_ns = 0;  // when the order thread took the epoch in flight; 0: none
  int error = 0;  // a failed epoch, not yet returned: the thread stops until it is
  bool thread_started = false;
  bool held = false;  // hold_order_thread_for_testing: a device that does not answer
};
OrderState& ord() {
  static auto* o = new OrderState;  // never destroyed: used by the exit handler
  return *o;
}
// skip_epoch_syncs_for_testing: the order thread breaks the rule on purpose (the crash-state
// suite's proof that it can see a broken order): 0 never, else every n-th epoch's syncs are
// skipped. Read once per epoch.
std::atomic<unsigned> g_skip_epoch_syncs{0};
std::atomic<unsigned long long> g_stat_closed{0}, g_stat_durable{0}, g_stat_deferred{0}, g_stat_backpressure{0},
    g_stat_max_queued{0};

// Under o.mu: the open epoch must sync `ino`.
void note_open_dirty_locked(OrderState& o, Inode& ino) {
  if (ino.in_open_dirty) return;
  o.open_dirty.push_back(&ino);  // may throw bad_alloc: the caller fails the write (ENOMEM)
  ino.in_open_dirty = true;
  ino.refs.fetch_add(1, std::memory_order_relaxed);
}

void order_thread_main() noexcept;

// Under o.mu: closes the open epoch. Returns its seq.
std::uint64_t close_epoch_locked(OrderState& o, bool data_only) {
  Epoch e;
  e.writes = std::move(o.open_writes);
  o.open_writes.clear();
  e.dirty = std::move(o.open_dirty);
  o.open_dirty.clear();
  for (Inode* i : e.dirty) i->in_open_dirty = false;
  e.seq = ++o.closed_seq;
  e.closed_ns = now_ns();
  e.data_only = data_only;
  o.closed.push_back(std::move(e));
  o.gate_closed = true;
  g_stat_closed.fetch_add(1, std::memory_order_relaxed);
  if (!o.thread_started) {
    o.thread_started = true;
    try {
      std::thread(order_thread_main).detach();  // lives as long as the process
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tai::posix: cannot start the fsync order thread (%s)\n", ex.what());
      std::abort();  // every fsync would wait for ever: better said at once
    }
  }
  o.cv.notify_all();
  return e.seq;
}

// Anything written since the last epoch became durable (or held back)?
bool open_epoch_empty_locked(const OrderState& o) { return o.open_writes.empty() && o.open_dirty.empty(); }

// The order thread's part: the writes to the cache. Adds each file written to `touched` (one
// reference each, the writes' own). errno of the first write the cache refused, or 0.
int apply_writes(std::vector<Deferred>& writes, std::vector<Inode*>& touched) {
  int err = 0;
  std::uint64_t bytes = 0;
  for (auto& w : writes) {
    Inode& ino = *w.ino;
    {
      std::lock_guard<std::mutex> lock(ino.mu);
      if (ino.file.is_open() && !kernel_locked(ino)) {
        order(ino);
        std::uint64_t pos = w.pos;
        const ssize_t r = submit_write_locked(ino, w.bytes.data(), w.bytes.size(), pos, false);
        if (r < 0 && err == 0) err = static_cast<int>(-r);
      } else if (err == 0) {
        err = EIO;  // the file left the cache meanwhile (it could not be reopened): never reported durable
      }
    }
    bytes += w.bytes.size();
    ino.deferred.fetch_sub(1, std::memory_order_acq_rel);
    if (std::find(touched.begin(), touched.end(), &ino) == touched.end())
      touched.push_back(&ino);
    else
      inode_unref(&ino);
    w.bytes = std::vector<char>();
  }
  writes.clear();
  OrderState& o = ord();
  std::lock_guard<std::mutex> lock(o.mu);
  o.queued_bytes -= bytes;
  o.cv.notify_all();
  return err;
}

// The order thread's part: a durable engine sync of every file in `files`, all submitted, then
// all waited for. errno of the first failure (a sync, or a write-back the file noted), or 0.
int sync_files(const std::vector<Inode*>& files, bool data_only) {
  struct Pending {
    Inode* ino;
    Receipt r;
    std::uint64_t target;
  };
  std::vector<Pending> pending;
  pending.reserve(files.size());
  for (Inode* ip : files) {
    std::lock_guard<std::mutex> lock(ip->mu);
    if (!ip->file.is_open() || kernel_locked(*ip)) continue;  // closed: close_file_locked wrote it back and reported
    order(*ip);
    const std::uint64_t target = ip->writes_submitted.load(std::memory_order_relaxed);
    pending.push_back({ip, data_only ? ip->file.fdatasync() : ip->file.fsync(), target});
  }
  int err = 0;
  for (auto& p : pending) {
    const int e = error_of(p.r);
    settle(*p.ino, p.target);
    const int w = p.ino->write_error.exchange(0, std::memory_order_acq_rel);
    if (err == 0) err = e ? e : w;
    if (e == 0 && w == 0) {
      std::lock_guard<std::mutex> lock(p.ino->mu);
      if (p.target > p.ino->clean_upto.load(std::memory_order_relaxed))
        p.ino->clean_upto.store(p.target, std::memory_order_relaxed);
    }
  }
  return err;
}

void order_thread_main() noexcept {
  tai::detail::mark_this_thread_as_tai();
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  for (;;) {
    o.cv.wait(lk, [&] { return o.error == 0 && o.gate_closed && !o.held; });
    if (!o.closed.empty()) {
      Epoch& front = o.closed.front();
      std::vector<Deferred> writes = std::move(front.writes);
      std::vector<Inode*> files = std::move(front.dirty);
      const bool data_only = front.data_only;
      const unsigned skip_every = g_skip_epoch_syncs.load(std::memory_order_relaxed);
      const bool skip_syncs = skip_every != 0 && front.seq % skip_every == 0;
      const std::uint64_t started = now_ns();
      o.front_started_ns = started;
      lk.unlock();
      int err = 0;
      try {
        err = apply_writes(writes, files);
      } catch (const std::bad_alloc&) {
        err = ENOMEM;
      }
      const int serr = skip_syncs ? 0 : sync_files(files, data_only);
      if (err == 0) err = serr;
      lk.lock();
      if (err != 0) {
        // The cache still holds what failed (tai::File::fsync): the next epoch syncs these files
        // again, and its success is real (as the next fsync after a failed one in `full`).
        for (Inode* ip : files) {
          try {
            note_open_dirty_locked(o, *ip);
          } catch (const std::bad_alloc&) {
            // Not synced again by the next epoch: its close reports the file's state.
          }
        }
      }
      lk.unlock();
      for (Inode* ip : files) inode_unref(ip);
      lk.lock();
      const std::uint64_t took = now_ns() - started;
      o.epoch_ns = o.epoch_ns == 0 ? took : (3 * o.epoch_ns + took) / 4;
      o.front_started_ns = 0;
      o.closed.pop_front();
      ++o.durable_seq;  // done with (a failed one too: its error stops the thread until returned)
      if (err == 0) g_stat_durable.fetch_add(1, std::memory_order_relaxed);
      if (err != 0) {
        o.error = err;
        logf("fsync order: an epoch failed: %s (returned by the next fsync, close or sync_now)", std::strerror(err));
      }
      o.cv.notify_all();
      continue;
    }
    // Every closed epoch is durable: the open epoch's held writes go to the cache, then the gate
    // opens (a write held back meanwhile is taken by the next round).
    if (o.open_writes.empty()) {
      o.gate_closed = false;
      o.cv.notify_all();
      continue;
    }
    std::vector<Deferred> writes = std::move(o.open_writes);
    o.open_writes.clear();
    int err = 0;
    // On the open epoch's list before they leave `open_writes`: an fsync or sync_now made while
    // they are on their way to the cache must find the epoch not empty (its sync runs on this
    // thread, after them).
    for (auto& w : writes) {
      try {
        note_open_dirty_locked(o, *w.ino);
      } catch (const std::bad_alloc&) {
        if (err == 0) err = ENOMEM;
      }
    }
    lk.unlock();
    std::vector<Inode*> touched;
    try {
      if (const int e = apply_writes(writes, touched); e && err == 0) err = e;
    } catch (const std::bad_alloc&) {
      err = ENOMEM;
    }
    for (Inode* ip : touched) inode_unref(ip);
    lk.lock();
    if (err != 0) o.error = err;
    o.cv.notify_all();
  }
}

// Under o.mu: returns (and clears) a failed epoch's error; the thread goes on.
int take_error_locked(OrderState& o) {
  const int e = std::exchange(o.error, 0);
  if (e) o.cv.notify_all();
  return e;
}

// Before a write of n bytes (no lock held): while the gate is closed and the queue is full, wait.
void order_admit(std::size_t n) {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  const std::uint64_t limit = g_order_limit.load(std::memory_order_relaxed);
  if (!o.gate_closed || o.queued_bytes == 0 || o.queued_bytes + n <= limit) return;
  g_stat_backpressure.fetch_add(1, std::memory_order_relaxed);
  o.cv.wait(lk, [&] { return !o.gate_closed || o.queued_bytes == 0 || o.queued_bytes + n <= limit || o.error != 0; });
}

// Under ino.mu (after order()): a write of the cached path in order mode. Returns bytes or -errno.
ssize_t order_write_locked(Inode& ino, const void* buf, std::size_t n, std::uint64_t pos) {
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  try {
    if (o.gate_closed) {
      if (pos > kOffMax || n > kOffMax - pos) return -EINVAL;
      const char* p = static_cast<const char*>(buf);
      o.open_writes.push_back(Deferred{&ino, pos, std::vector<char>(p, p + n)});
      ino.refs.fetch_add(1, std::memory_order_relaxed);
      ino.deferred.fetch_add(1, std::memory_order_acq_rel);
      o.queued_bytes += n;
      g_stat_deferred.fetch_add(1, std::memory_order_relaxed);
      if (o.queued_bytes > g_stat_max_queued.load(std::memory_order_relaxed))
        g_stat_max_queued.store(o.queued_bytes, std::memory_order_relaxed);
      grow_size(ino, pos + n);
      return static_cast<ssize_t>(n);
    }
    note_open_dirty_locked(o, ino);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  // Under o.mu: an fsync of another thread cannot close the epoch between the check and the
  // write reaching the cache (the order thread's sync would miss it).
  return submit_write_locked(ino, buf, n, pos, false);
}

// Waits until every closed epoch is durable. errno of a failed one (left for the next fsync), or 0.
// Also waits for the held writes to reach the cache (the gate open): a truncation by the
// kernel (an O_TRUNC open) must come after them, as the program made them.
int order_point_impl() {
  if (!order_mode()) return 0;
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  o.cv.wait(lk, [&] { return !o.gate_closed || o.error != 0; });
  return o.error;
}

// Waits until the gate is open: every closed epoch durable, every held write in the cache.
// Without any lock of the layer held. A caller that then goes to the kernel takes the inode's
// mutex and order_gate_locked, and starts over when that finds the gate closed again.
void order_drain() {
  if (!order_mode()) return;
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  o.cv.wait(lk, [&] { return !o.gate_closed || o.error != 0; });
}

// Under ino.mu, in order mode, before a call that goes to the kernel behind the cache (an
// O_APPEND write, a truncation): 0 with `gate` holding the state's mutex and the gate open
// (the file is on the open epoch's list: the next fsync covers what the call does); 1: the gate
// closed again since order_drain, start over; -errno: a failed epoch not yet returned (it is
// returned now, by this call: nothing after it goes to the kernel before the program heard).
int order_gate_locked(Inode& ino, std::unique_lock<std::mutex>& gate) {
  OrderState& o = ord();
  gate = std::unique_lock<std::mutex>(o.mu);
  if (o.error != 0) return -take_error_locked(o);
  if (o.gate_closed) {
    gate.unlock();
    return 1;
  }
  try {
    note_open_dirty_locked(o, ino);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  return 0;
}

// fsync/fdatasync of a routed file in order mode: closes the epoch. -errno or 0.
int order_fsync(bool data_only) {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  if (const int e = take_error_locked(o)) return -e;
  if (open_epoch_empty_locked(o)) return 0;  // nothing written since the last epoch was closed
  const std::uint64_t delay = g_max_delay_ns.load(std::memory_order_relaxed);
  // The delay bound: the epoch this call closes will be durable after the epochs queued before
  // it, one at a time. Back-pressure when the device is behind by more than the quota, when the
  // oldest waiting epoch is older than the delay, or when the queue, at the order thread's
  // recent time per epoch, would pass the delay (a program that closes epochs faster than the
  // device syncs them is held to the device's pace instead of letting the lag grow with the
  // queue). The time per epoch: the recent average, at least how long the epoch in flight has
  // taken so far, and before any epoch was measured at least a sixteenth of the delay (so a
  // burst of fsyncs at the start queues about 16 epochs before the device's pace is known).
  bool wait = false;
  if (!o.closed.empty()) {
    const std::uint64_t now = now_ns();
    std::uint64_t per = o.epoch_ns != 0 ? o.epoch_ns : delay / 16;
    if (o.front_started_ns != 0) per = std::max(per, now - o.front_started_ns);
    wait = o.queued_bytes > g_order_limit.load(std::memory_order_relaxed) || now - o.closed.front().closed_ns > delay ||
           (o.closed.size() + 1) * per > delay;
  }
  const std::uint64_t seq = close_epoch_locked(o, data_only);
  if (!wait) return 0;
  // Back-pressure: the device is behind by more than the quota or the delay; this fsync waits
  // for its own epoch, as a full one would.
  g_stat_backpressure.fetch_add(1, std::memory_order_relaxed);
  o.cv.wait(lk, [&] { return o.durable_seq >= seq || o.error != 0; });
  return -take_error_locked(o);
}

// Every routed write durable, in order mode. errno or 0.
int order_sync_all() {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  std::uint64_t seq = o.closed_seq;
  if (!open_epoch_empty_locked(o)) seq = close_epoch_locked(o, false);
  o.cv.wait(lk, [&] { return o.durable_seq >= seq || o.error != 0; });
  return take_error_locked(o);
}

// count is clamped here. pos: the explicit offset, or the description's (then
// `append` decides; on return pos is where the bytes went, for the description's offset).
// Returns bytes or -errno.
ssize_t do_write(Description& d, int fd, const void* buf, std::size_t n, std::uint64_t& pos, bool append,
                 bool explicit_offset) {
  if (!writable(d)) return -EBADF;
  if (const ssize_t e = clamp_count(buf, n)) return e;
  if (n == 0) return 0;
  if (!append && (pos > kOffMax || n > kOffMax - pos)) return -EINVAL;
  if (buf == nullptr) return -EFAULT;
  Inode& ino = *d.inode;
  const bool ordered = order_mode();
  if (ordered && !append) order_admit(n);
  for (;;) {
  if (ordered && append) order_drain();
  std::unique_lock<std::mutex> lock(ino.mu);
  order(ino);
  std::unique_lock<std::mutex> gate;  // order mode, O_APPEND: the gate held open (order_gate_locked)
  if (ordered && append) {
    const int g = order_gate_locked(ino, gate);
    if (g == 1) continue;
    if (g < 0) return g;
  }
  if (append) {
    std::uint64_t end = pos;
    const std::uint64_t at = pos;
    const ssize_t r = append_through_locked(ino, fd, end, !explicit_offset, [&] {
      // pwrite on an O_APPEND descriptor appends on Linux (the offset is ignored) and leaves
      // the descriptor's offset alone.
      return explicit_offset ? ::pwrite(fd, buf, n, static_cast<off_t>(at)) : ::write(fd, buf, n);
    });
    if (r > 0) pos = end >= static_cast<std::uint64_t>(r) ? end - static_cast<std::uint64_t>(r) : 0;
    return r;
  }
  count_write_locked(ino, fd, n);
  if (kernel_locked(ino)) {  // write-through, or see shut_down_locked
    ssize_t r;
    do {
      r = ::pwrite(fd, buf, n, static_cast<off_t>(pos));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    grow_size(ino, pos + static_cast<std::uint64_t>(r));
    return r;
  }
  if (ordered) return order_write_locked(ino, buf, n, pos);
  return submit_write_locked(ino, buf, n, pos, false);
  }
}

ssize_t do_read(Description& d, int fd, void* buf, std::size_t n, std::uint64_t pos) {
  if (!readable(d)) return -EBADF;
  if (const ssize_t e = clamp_count(buf, n)) return e;
  if (n == 0) return 0;
  if (pos > kOffMax || n > kOffMax - pos) return -EINVAL;
  Inode& ino = *d.inode;
  if (buf == nullptr) return pos >= current_size(ino, fd) ? 0 : -EFAULT;
  if (ino.deferred.load(std::memory_order_acquire) != 0) {
    // Order mode: writes of this file are held back behind an epoch; the read waits until they
    // are in the cache (a failed epoch, not yet returned, is returned by this read instead).
    OrderState& o = ord();
    std::unique_lock<std::mutex> lk(o.mu);
    o.cv.wait(lk, [&] { return ino.deferred.load(std::memory_order_acquire) == 0 || o.error != 0; });
    if (ino.deferred.load(std::memory_order_acquire) != 0) return -take_error_locked(o);
  }
  Receipt r;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (kernel_locked(ino)) {  // write-through (the kernel has every byte), or see shut_down_locked
      if (ino.through) order(ino);
      ssize_t k;
      do {
        k = ::pread(fd, buf, n, static_cast<off_t>(pos));
      } while (k < 0 && errno == EINTR);
      return k < 0 ? -errno : k;
    }
    order(ino);
    ino.cache_used = true;
    r = ino.file.read(pos, buf, n);
  }
  if (!r.ok()) return -error_of(r);
  return static_cast<ssize_t>(r.bytes());
}


int sync_routed(Description& d, int fd, bool data_only) {
  Inode& ino = *d.inode;
  if (g_fsync_none.load(std::memory_order_relaxed)) return 0;  // benchmark only: see Settings
  if (order_mode()) {
    bool kernel;
    {
      std::lock_guard<std::mutex> lock(ino.mu);
      kernel = kernel_locked(ino);
    }
    // A file still write-through (its engine cannot open it) or a layer shutting down: the
    // kernel's own fsync below, which waits.
    if (!kernel) return order_fsync(data_only);
  }
  Receipt r;
  std::uint64_t target;
  bool small = false;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (kernel_locked(ino)) {
      // Write-through: order() first, so that this covers another thread's write that went
      // through just before (the kernel has every byte then). Or see shut_down_locked.
      if (ino.through) {
        order(ino);
        ino.bytes_since_sync = 0;
      }
      int rc;
      do {
        rc = data_only ? ::fdatasync(fd) : ::fsync(fd);
      } while (rc < 0 && errno == EINTR);
      if (rc < 0) return -errno;
      // An error of a write-back from before the file went write-through (a close of its stale
      // cache) is reported here, once, as the cached path does.
      if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return -w;
      return 0;
    }
    order(ino);
    target = ino.writes_submitted.load(std::memory_order_relaxed);
    const std::uint64_t through = g_sync_through.load(std::memory_order_relaxed);
    small = through != 0 && ino.bytes_since_sync <= through;
    ino.bytes_since_sync = 0;
    r = data_only ? ino.file.fdatasync() : ino.file.fsync();
  }
  const int err = error_of(r);
  settle(ino, target);
  if (err) return -err;
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return -w;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (target > ino.clean_upto.load(std::memory_order_relaxed)) ino.clean_upto.store(target, std::memory_order_relaxed);
  }
  if (small) {
    // Synced often for what it writes: write-through from now on, when nothing was submitted
    // to the file since this sync (so the cache holds nothing dirty of it: this sync wrote
    // every earlier write back and made it durable).
    std::lock_guard<std::mutex> lock(ino.mu);
    if (!ino.through && ino.file.is_open() && ino.writes_submitted.load(std::memory_order_relaxed) == target &&
        ino.write_error.load(std::memory_order_acquire) == 0 && (!ino.last_sync.valid() || ino.last_sync.finished())) {
      ino.through = true;
      count_cached_locked(ino, false);  // this sync made every cached write of it durable
      remember_through_path(ino.name, true);
      logf("%s: write-through (synced after at most %" PRIu64 " bytes)", ino.name.c_str(),
           g_sync_through.load(std::memory_order_relaxed));
    }
  }
  return 0;
}

template <class T>
T finish(T ret, int saved) {
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  errno = saved;
  return ret;
}

// ---------------------------------------------------------------------------------------------
// Opening

void start_keeper() noexcept;

// Whether /proc/self/fd exists, asked once: /proc is mounted for the life of a process, and
// SQLite routes a new journal per transaction (an access() each before).
bool proc_fd_available() noexcept {
  static const bool available = ::access("/proc/self/fd", F_OK) == 0;
  return available;
}

// Decides whether `fd` (just opened by the program's call with `flags`) is routed, and routes
// it. Never fails the open: a file that cannot be routed passes through. Returns nullptr when
// routed, else why not (a static string, for logs).
const char* maybe_route(int fd, int flags, const char* path, std::uint64_t offset = 0,
                        const struct stat* known = nullptr) {
  if (g_down.load(std::memory_order_acquire)) return "the layer is shut down (exit, exec or a forked child)";
  if (flags & O_PATH) return "O_PATH";
  if (flags & O_DIRECT) return "O_DIRECT (the program asked to bypass caches)";
  if (flags & O_DSYNC) return "O_SYNC/O_DSYNC (every write must be durable when it returns)";  // O_SYNC includes O_DSYNC's bit
  if (fd >= kMaxFd) return "descriptor number too high";
  struct stat st {};
  if (known)
    st = *known;  // the caller's fstat of fd, made just now
  else if (::fstat(fd, &st) != 0)
    return "not a regular file";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const int acc = flags & O_ACCMODE;
  const bool wants_write = acc == O_WRONLY || acc == O_RDWR;
  if (wants_write && !controller()) return "no controller";  // made here, before g_reg_mu (lock order: init, reg, inode)
  Inode* ino = nullptr;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    auto it = registry().find(InodeKey{st.st_dev, st.st_ino});
    if (it != registry().end()) {
      ino = it->second;
    } else if (wants_write) {
      auto owned = std::make_unique<Inode>();
      owned->dev = st.st_dev;
      owned->ino = st.st_ino;
      owned->name = path;
      owned->via_proc = proc_fd_available();  // else the path (no /proc)
      if (g_sync_through.load(std::memory_order_relaxed) != 0 && !order_mode() && through_path_known(owned->name)) {
        // Made again under the name of a file that went write-through: it starts so, and gets
        // its engine file only if it goes back to the cache (leave_through_locked).
        owned->through = true;
      } else {
        const std::string how = owned->via_proc ? "/proc/self/fd/" + std::to_string(fd) : owned->name;
        auto f = open_engine_file(how, true);
        if (!f && f.error().code == std::errc::permission_denied) {
          owned->engine_readable = false;
          f = open_engine_file(how, false);
        }
        if (!f) {
          logf("%s (fd %d) not routed: %s", path, fd, f.error().message.c_str());
          return "TAI's engine cannot open it (TAI_LOG=1 says why)";
        }
        owned->file = std::move(f.value());
      }
      if (g_start_writeback.load(std::memory_order_relaxed) != 0) {
        owned->writeback_fd = tai::detail::dup_own_descriptor(fd);
      }
      owned->size.store(static_cast<std::uint64_t>(st.st_size), std::memory_order_relaxed);
      if (!owned->through) count_cached_locked(*owned, true);  // not published yet: no lock needed
      ino = owned.release();
      registry()[InodeKey{st.st_dev, st.st_ino}] = ino;
      fresh = true;
    } else {
      return "opened read-only and nothing of the file is cached";
    }
    ++ino->opens;
  }
  Description* d = new_description();
  d->inode = ino;
  d->accmode = acc;
  d->append = (flags & O_APPEND) != 0;
  d->offset = offset;
  d->handed = false;
  d->refs.store(1, std::memory_order_relaxed);
  if (!fresh && (flags & O_TRUNC) && wants_write) {
    // The program's ::open truncated the file, but this process's cache may hold bytes of it
    // that a write-back would bring back: truncate through the cache as ftruncate(fd, 0) does.
    std::lock_guard<std::mutex> lock(ino->mu);
    (void)truncate_locked(*ino, fd, 0);
  }
  install(fd, d);  // release: the description's fields above happen-before its users
  if (fresh) start_keeper();
  if (order_mode() && wants_write && (flags & (O_CREAT | O_TRUNC))) {
    // The open may have made or truncated the file in the kernel: the next fsync syncs it.
    OrderState& o = ord();
    std::lock_guard<std::mutex> lk(o.mu);
    try {
      note_open_dirty_locked(o, *ino);
    } catch (const std::bad_alloc&) {
      // Then only a write to the file puts it on the epoch's list.
    }
  }
  logf("%s (fd %d) routed%s", path, fd, fresh ? "" : " (file already routed: shares its cache)");
  return nullptr;
}

int open_impl(int dirfd, const char* path, int flags, mode_t mode) {
  if (path == nullptr) {  // glibc declares it nonnull; the kernel answers EFAULT
    errno = EFAULT;
    return -1;
  }
  const int saved = errno;
  if (flags & O_TRUNC) (void)order_point_impl();  // order mode: the truncation after the epochs before it
  int fd;
  do {
    fd = ::openat(dirfd, path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;  // the kernel's errno
  (void)maybe_route(fd, flags, path);
  errno = saved;
  return fd;
}

// Sets the kernel's offset of fd, with the system call itself: the exit handler runs outside
// the preload library's depth count, so ::lseek would come back into the layer through its
// interposer, and wait for the description's mutex the caller holds.
void kernel_seek(int fd, std::uint64_t offset) noexcept {
  (void)::syscall(SYS_lseek, fd, static_cast<off_t>(offset), SEEK_SET);
}

// Hands each routed descriptor's offset to the kernel (the exit handler: libc serves them
// afterwards).
void hand_back_offsets() {
  for (int top = 0; top < (1 << kTopBits); ++top) {
    Chunk* c = g_top[top].load(std::memory_order_acquire);
    if (!c) continue;
    for (int i = 0; i < (1 << kChunkBits); ++i) {
      Description* d = c->slot[i].load(std::memory_order_acquire);
      if (!d) continue;
      // By slot, not by the number the description was opened as: that one may be closed (an
      // alias made by dup outlives it). Aliases share the kernel offset: setting it twice is fine.
      const int fd = (top << kChunkBits) | i;
      std::lock_guard<std::mutex> lock(d->mu);
      kernel_seek(fd, d->offset);
      d->handed = true;  // a call that waited for d->mu meanwhile now uses the kernel's offset
    }
  }
}

std::vector<std::string> shutdown_locked() {
  std::vector<std::string> failures;
  Controller* c = g_ctl.load(std::memory_order_acquire);
  g_down.store(true, std::memory_order_release);
  if (!c) {
    g_handed_back.store(true, std::memory_order_release);
    return failures;
  }
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    for (auto& [key, ino] : registry()) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (const int err = close_file_locked(*ino))
        failures.push_back("write-back of " + ino->name + " failed: " + std::strerror(err));
    }
  }
  hand_back_offsets();
  g_handed_back.store(true, std::memory_order_release);
  ShutdownReport report = c->shutdown();
  for (auto& f : report.failures) failures.push_back(std::move(f));
  return failures;
}

std::atomic<bool> g_forked_child{false};  // set in a child of fork(): never touch the controller

void at_exit() {
  // A child of fork() has a copy of the controller without its threads (and maybe with a lock
  // some other thread of the parent held): nothing to shut down, nothing to take.
  if (g_forked_child.load(std::memory_order_acquire)) return;
  const int saved = errno;
  // A fatal signal's handler (the preload library's) asks the keeper for a write-back, which
  // needs g_init_mu: held back until the shutdown is done, as inside the layer.
  std::vector<std::string> failures;
  // Order mode: every epoch durable first (the order thread does it; it takes no lock of ours).
  if (order_mode() && g_ctl.load(std::memory_order_acquire) && !g_down.load(std::memory_order_acquire)) {
    if (const int err = order_sync_all()) failures.push_back(std::string("fsync order: an epoch failed: ") + std::strerror(err));
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  {
    std::lock_guard<std::mutex> lock(g_init_mu);
    for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (failures.empty()) {
    errno = saved;
    return;
  }
  std::fprintf(stderr, "tai::posix: at exit, data could not be written back:\n");
  for (const auto& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
  std::fprintf(stderr, "tai::posix: exiting with status %d\n", kExitStatusOnLoss);
  std::fflush(nullptr);
  ::_exit(kExitStatusOnLoss);
}

// Registered when libtai is loaded, before the program's own handlers and static objects: it
// runs after them (atexit handlers run in reverse order), so their writes are written back too.
__attribute__((constructor(101))) void register_exit_handler() { std::atexit(&at_exit); }

}  // namespace

Controller* controller() {
  if (Controller* c = g_ctl.load(std::memory_order_acquire)) return c;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_down.load(std::memory_order_acquire)) return nullptr;
  if (Controller* c = g_ctl.load(std::memory_order_acquire)) return c;
  std::vector<std::string> warnings;
  Settings s = g_override ? *g_override : settings_from_env(&warnings);
  g_log.store(s.log, std::memory_order_relaxed);
  for (const auto& w : warnings) std::fprintf(stderr, "tai::posix: %s\n", w.c_str());
  Controller* c = nullptr;
  try {
    c = new Controller(s.options);
    if (s.setup) s.setup(*c);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "tai::posix: cannot make the controller (%s): every file passes through to libc\n",
                 ex.what());
    delete c;
    g_down.store(true, std::memory_order_release);
    g_handed_back.store(true, std::memory_order_release);
    return nullptr;
  }
  g_trivial.store(s.trivial_tree, std::memory_order_release);
  g_start_writeback.store(s.start_writeback_bytes, std::memory_order_release);
  g_write_behind_ns.store(s.write_behind_ms * 1'000'000u, std::memory_order_release);
  g_sync_through.store(s.sync_through_bytes, std::memory_order_release);
  if (!g_fsync_mode_set.load(std::memory_order_acquire))
    g_fsync_mode.store(static_cast<int>(s.fsync_mode), std::memory_order_release);
  g_fsync_none.store(s.fsync_none_for_benchmark, std::memory_order_release);
  g_max_delay_ns.store(s.fsync_max_delay_ms * 1'000'000u, std::memory_order_release);
  g_order_limit.store(s.order_queue_bytes ? s.order_queue_bytes : std::max<std::uint64_t>(c->options().weak_quota, 1),
                      std::memory_order_release);
  if (s.fsync_none_for_benchmark)
    std::fprintf(stderr, "tai::posix: benchmark-only mode: every fsync is a no-op, nothing is durable\n");
  // A new controller caches nothing yet: a stamp left by the last one (restart_for_testing,
  // whose write-behind may have been off, so that the keeper never cleared it) would keep the
  // next write from stamping and waking the keeper, and its deadline would pass unseen.
  g_dirty_since.store(0, std::memory_order_release);
  g_keeper_wake.fetch_add(1, std::memory_order_release);
  futex_wake(g_keeper_wake, 1);
  logf("fsync mode %s (max delay %" PRIu64 " ms, queue %" PRIu64 " bytes)", order_mode() ? "order" : "full",
       s.fsync_max_delay_ms, g_order_limit.load(std::memory_order_relaxed));
  logf("controller: %u workers, engine %s (%s), tree %s, quota %" PRIu64 ",%" PRIu64 ", start write-back every %" PRIu64
       " bytes, write-behind %" PRIu64 " ms, write-through below %" PRIu64 " bytes per sync", c->workers(), s.options.engine.c_str(), c->engine_note().c_str(), s.trivial_tree ? "trivial" : "default",
       c->options().weak_quota, c->options().strict_quota, s.start_writeback_bytes,
       s.write_behind_ms, s.sync_through_bytes);
  g_ctl.store(c, std::memory_order_release);
  return c;
}

int alias_descriptor(int oldfd, int newfd) {
  Description* d = g_down.load(std::memory_order_acquire) ? nullptr : acquire(oldfd);
  if (!d) return -1;
  if (oldfd == newfd) {
    release(d);
    return 0;
  }
  std::atomic<Description*>* s = slot_of(newfd, true);
  if (!s) {
    release(d);
    return -1;
  }
  // The reference taken by acquire() becomes the new slot's.
  Description* old = s->exchange(d, std::memory_order_acq_rel);
  return old ? release(old) : 0;
}

int forget_descriptor(int fd) {
  std::atomic<Description*>* s = slot_of(fd, false);
  Description* d = s ? s->exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  return d ? release(d) : 0;
}

const char* route_descriptor(int fd, int flags, const char* path, std::uint64_t offset, const struct stat* st) {
  return maybe_route(fd, flags, path, offset, st);
}

namespace {
// Calls fn(fd, description) for every routed slot (chunks that exist only).
template <class Fn>
void for_each_slot(Fn&& fn) {
  for (int top = 0; top < (1 << kTopBits); ++top) {
    Chunk* c = g_top[top].load(std::memory_order_acquire);
    if (!c) continue;
    for (int i = 0; i < (1 << kChunkBits); ++i) {
      Description* d = c->slot[i].load(std::memory_order_acquire);
      if (d) fn((top << kChunkBits) | i, d);
    }
  }
}

// Hands fd's offset to the kernel and forgets the slot if it still holds `d`. The release's
// error (the file's write-back, when this was its last description) is returned (errno).
int unroute_slot(int fd, Description* d) {
  {
    std::lock_guard<std::mutex> lock(d->mu);
    kernel_seek(fd, d->offset);
  }
  std::atomic<Description*>* s = slot_of(fd, false);
  Description* expected = d;
  if (s && s->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return release(d);
  return 0;
}
}  // namespace

int unroute_file(int fd) {
  Ref ref(fd);
  if (!ref) return 0;
  // Order mode: the kernel gets the file from now on (mmap, fork, exec): every epoch durable
  // and every held write in the cache first, so that nothing of the file is left behind.
  if (order_mode()) {
    if (const int err = order_sync_all()) logf("unrouting %s: an epoch failed: %s", ref->inode->name.c_str(), std::strerror(err));
  }
  Inode* ino = ref->inode;
  int err = 0;
  {
    // Everything the cache holds goes to the kernel first, so that the kernel's view (the
    // mapping, the other process, the pass-through calls from now on) is the program's.
    std::lock_guard<std::mutex> lock(ino->mu);
    err = close_file_locked(*ino);
  }
  for_each_slot([&](int slot_fd, Description* d) {
    if (d->inode != ino) return;
    const int e = unroute_slot(slot_fd, d);
    if (err == 0) err = e;
  });
  if (err) logf("unrouting %s: write-back failed: %s", ino->name.c_str(), std::strerror(err));
  return err;
}

int unroute_inode(dev_t dev, ino_t ino) {
  int fd = -1;
  for_each_slot([&](int slot_fd, Description*) {
    if (fd >= 0) return;
    Description* d = acquire(slot_fd);  // a reference: the inode cannot go while we look at it
    if (!d) return;
    if (d->inode && d->inode->dev == dev && d->inode->ino == ino) fd = slot_fd;
    release(d);
  });
  return fd < 0 ? 0 : unroute_file(fd);
}

int unroute_all(bool inheritable_only) {
  if (!g_ctl.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire)) return 0;
  std::vector<int> fds;
  for_each_slot([&](int fd, Description*) {
    if (inheritable_only) {
      const int fl = ::fcntl(fd, F_GETFD);
      if (fl >= 0 && (fl & FD_CLOEXEC)) return;  // stays in this process: keeps its routing
    }
    fds.push_back(fd);
  });
  int err = 0;
  for (const int fd : fds) {
    const int e = unroute_file(fd);
    if (err == 0) err = e;
  }
  return err;
}

int write_back_all(bool drain_order) {
  // Held writes reach the cache first (the caller hands the cache to the kernel).
  if (drain_order) order_drain();
  Controller* c = g_down.load(std::memory_order_acquire) ? nullptr : g_ctl.load(std::memory_order_acquire);
  if (!c) return 0;
  // Every routed file's writes that another thread submitted must reach the cache first.
  std::vector<Receipt> lasts;
  std::vector<std::pair<Inode*, std::uint64_t>> dirty;  // each holds a reference
  try {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    for (auto& [key, ino] : registry()) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (ino->last.valid()) lasts.push_back(ino->last);
      const std::uint64_t submitted = ino->writes_submitted.load(std::memory_order_relaxed);
      if (submitted != ino->clean_upto.load(std::memory_order_relaxed)) {
        ino->refs.fetch_add(1, std::memory_order_relaxed);
        dirty.emplace_back(ino, submitted);
      }
    }
  } catch (const std::bad_alloc&) {
    for (auto& [ino, n] : dirty) inode_unref(ino);
    dirty.clear();
    return error_of(c->flush());  // the slow way: everything
  }
  if (dirty.empty()) return 0;
  for (auto& r : lasts) r.wait();
  Receipt r = c->flush();
  const int err = error_of(r);
  for (auto& [ino, n] : dirty) {
    if (err == 0) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (n > ino->clean_upto.load(std::memory_order_relaxed)) ino->clean_upto.store(n, std::memory_order_relaxed);
    }
    inode_unref(ino);
  }
  return err;
}

namespace {
void keeper_write_back() noexcept {
  // g_init_mu: the controller cannot be shut down or replaced (restart_for_testing) meanwhile.
  std::lock_guard<std::mutex> lock(g_init_mu);
  const int err = write_back_all(false);  // the write-behind: what the cache has, no waiting for epochs
  // A failed write-back leaves the data dirty in the cache; the file's next fsync or close
  // writes it again and reports the error.
  if (err) logf("write-behind: write-back failed: %s", std::strerror(err));
}

void keeper_main() noexcept {
  tai::detail::mark_this_thread_as_tai();  // libc directly, no program signal handlers here
  for (;;) {
    const std::uint32_t seen = g_keeper_wake.load(std::memory_order_acquire);
    const std::uint32_t requested = g_end_requested.load(std::memory_order_acquire);
    if (requested != g_end_done.load(std::memory_order_relaxed)) {  // only the keeper stores it
      // Everything written so far goes now: the stamp is cleared first (acq_rel: a write
      // stamping after this is seen by the next round; one before it is in this write-back).
      g_handing_since.store(g_dirty_since.exchange(0, std::memory_order_acq_rel), std::memory_order_relaxed);
      keeper_write_back();
      g_handing_since.store(0, std::memory_order_relaxed);
      g_end_done.store(requested, std::memory_order_release);  // the waiters' acquire loads
      futex_wake(g_end_done, INT_MAX);
      continue;
    }
    const std::uint64_t deadline = g_write_behind_ns.load(std::memory_order_relaxed);
    const std::uint64_t since = g_dirty_since.load(std::memory_order_acquire);
    std::uint64_t wait_ns = 0;  // no limit: nothing is dirty (or write-behind is off)
    if (deadline != 0 && since != 0) {
      const std::uint64_t now = now_ns();
      if (now >= since + deadline) {
        g_handing_since.store(g_dirty_since.exchange(0, std::memory_order_acq_rel), std::memory_order_relaxed);
        keeper_write_back();
        g_handing_since.store(0, std::memory_order_relaxed);
        continue;
      }
      wait_ns = since + deadline - now;
    }
    futex_wait(g_keeper_wake, seen, wait_ns);
  }
}

void start_keeper() noexcept {
  bool expected = false;
  // acq_rel: one thread starts it; the others see it started.
  if (!g_keeper_started.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return;
  try {
    std::thread(keeper_main).detach();  // lives as long as the process (gone in a forked child)
  } catch (const std::exception& ex) {
    g_keeper_failed.store(true, std::memory_order_release);
    std::fprintf(stderr, "tai::posix: cannot start the write-behind thread (%s): no write-behind deadline; "
                 "cached writes reach the kernel at close, fsync and the end of the program\n", ex.what());
  }
}
}  // namespace

int write_back_for_end(int timeout_ms) noexcept {
  if (g_forked_child.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire) ||
      !g_keeper_started.load(std::memory_order_acquire))
    return 0;  // nothing was ever routed (the keeper starts with the first routed file)
  if (g_keeper_failed.load(std::memory_order_acquire)) {
    // No keeper: on this thread, without the bounded wait (better than losing the data).
    keeper_write_back();
    return 0;
  }
  const std::uint32_t mine = g_end_requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  g_keeper_wake.fetch_add(1, std::memory_order_release);
  futex_wake(g_keeper_wake, 1);
  const std::uint64_t limit = now_ns() + static_cast<std::uint64_t>(timeout_ms < 0 ? 0 : timeout_ms) * 1'000'000u;
  for (;;) {
    const std::uint32_t done = g_end_done.load(std::memory_order_acquire);
    if (static_cast<std::int32_t>(done - mine) >= 0) return 0;
    const std::uint64_t now = now_ns();
    if (now >= limit) return ETIMEDOUT;
    futex_wait(g_end_done, done, limit - now);
  }
}

std::int64_t unwritten_age_ms() noexcept {
  // relaxed: a report, read while the keeper may be stuck; the older of the two stamps.
  const std::uint64_t a = g_handing_since.load(std::memory_order_relaxed);
  const std::uint64_t b = g_dirty_since.load(std::memory_order_relaxed);
  const std::uint64_t oldest = a == 0 ? b : (b == 0 || a < b ? a : b);
  if (oldest == 0) return -1;
  const std::uint64_t now = now_ns();
  return now > oldest ? static_cast<std::int64_t>((now - oldest) / 1'000'000u) : 0;
}

namespace {
// Writes back after every earlier write of any thread to `ino` (order()); waits outside the
// inode's mutex. errno or 0.
int write_back_one(Inode& ino) {
  order_drain();  // held writes of the file reach the cache first
  Controller* c = g_down.load(std::memory_order_acquire) ? nullptr : g_ctl.load(std::memory_order_acquire);
  if (!c) return 0;
  Receipt last;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (!ino.file.is_open()) return 0;
    order(ino);
    if (ino.through) return 0;  // nothing of it is cached dirty: the kernel has every byte
    last = ino.last;
  }
  // The last submission first: a write too small to cache goes to the engine as a request of
  // its own, which flush() does not wait for (cpio -m: a 6-byte file written after its
  // futimens). Its error, if any, reaches the file's next fsync or close (note_error).
  if (last.valid()) last.wait();
  // The controller has no per-file flush; flush() after every earlier submission to the file
  // covers what the cache holds of it.
  return error_of(c->flush());
}
}  // namespace

int write_back_inode(dev_t dev, ino_t ino) {
  if (!g_ctl.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire)) return 0;
  Inode* ip = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    auto it = registry().find(InodeKey{dev, ino});
    if (it == registry().end()) return 0;
    ip = it->second;
    ip->refs.fetch_add(1, std::memory_order_relaxed);  // under g_reg_mu: it is registered (refs >= 1)
  }
  const int err = write_back_one(*ip);
  inode_unref(ip);
  return err;
}

int write_back_fd(int fd) {
  Ref d(fd);
  return d ? write_back_one(*d->inode) : 0;
}

void disable_in_forked_child() noexcept {
  g_forked_child.store(true, std::memory_order_release);
  g_down.store(true, std::memory_order_release);
  g_handed_back.store(true, std::memory_order_release);
}

namespace {
// Order mode, before a shutdown: every epoch durable. The failure, if any, as a message.
void order_sync_before_shutdown(std::vector<std::string>& failures) {
  if (!order_mode() || !g_ctl.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire)) return;
  if (const int err = order_sync_all()) failures.push_back(std::string("fsync order: an epoch failed: ") + std::strerror(err));
}
}  // namespace

std::vector<std::string> shutdown_for_exec() {
  if (g_forked_child.load(std::memory_order_acquire)) return {};
  std::vector<std::string> failures;
  order_sync_before_shutdown(failures);
  std::lock_guard<std::mutex> lock(g_init_mu);
  for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  return failures;
}

int order_point() { return order_point_impl(); }

void hold_order_thread_for_testing(bool hold) {
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  o.held = hold;
  o.cv.notify_all();
}

void skip_epoch_syncs_for_testing(unsigned every) { g_skip_epoch_syncs.store(every, std::memory_order_relaxed); }

bool fsync_is_noop() noexcept { return g_fsync_none.load(std::memory_order_relaxed); }

bool nothing_cached() noexcept {
  // The order mode holds writes back behind epochs (and never makes a file write-through): a
  // write-back there always has its drain to do.
  return !order_mode() && g_cached_files.load(std::memory_order_seq_cst) == 0;
}

namespace {
// full mode: a durable sync of every routed file, all submitted, then all waited for.
int full_sync_all() {
  if (!g_ctl.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire)) return 0;
  std::vector<Inode*> files;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    try {
      files.reserve(registry().size());
    } catch (const std::bad_alloc&) {
      return ENOMEM;
    }
    for (auto& [key, ino] : registry()) {
      ino->refs.fetch_add(1, std::memory_order_relaxed);
      files.push_back(ino);
    }
  }
  int err = 0;
  std::vector<Inode*> cached;
  for (Inode* ip : files) {
    bool through = false;
    {
      std::lock_guard<std::mutex> lock(ip->mu);
      order(*ip);
      through = ip->through || !ip->file.is_open();
    }
    if (through) {
      // The kernel has its bytes: its own sync, through TAI's duplicate when there is one.
      if (ip->writeback_fd >= 0 && ::fsync(ip->writeback_fd) != 0 && err == 0) err = errno;
      if (ip->writeback_fd < 0) ::sync();
      if (const int w = ip->write_error.exchange(0, std::memory_order_acq_rel); w && err == 0) err = w;
    } else {
      cached.push_back(ip);
    }
  }
  if (const int e = sync_files(cached, false); e && err == 0) err = e;
  for (Inode* ip : files) inode_unref(ip);
  return err;
}
}  // namespace

int sync_all() { return order_mode() ? order_sync_all() : full_sync_all(); }

bool cached_size(dev_t dev, ino_t ino, std::uint64_t* size) {
  if (!g_ctl.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(g_reg_mu);
  auto it = registry().find(InodeKey{dev, ino});
  if (it == registry().end()) return false;
  *size = it->second->size.load(std::memory_order_acquire);
  return true;
}

int forget_range(unsigned first, unsigned last) {
  int err = 0;
  for_each_slot([&](int fd, Description*) {
    if (static_cast<unsigned>(fd) < first || static_cast<unsigned>(fd) > last) return;
    const int e = forget_descriptor(fd);
    if (err == 0) err = e;
  });
  return err;
}

ShutdownReport restart_for_testing(const Settings& settings) {
  if (order_mode() && g_ctl.load(std::memory_order_acquire) && !g_down.load(std::memory_order_acquire)) {
    // Every epoch durable before the controller goes; a failure (a test's fault engine) is
    // returned and the thread goes on, a few times, then what is left is dropped.
    for (int i = 0; i < 8 && order_sync_all() != 0; ++i) {
    }
  }
  {
    OrderState& o = ord();
    std::lock_guard<std::mutex> lk(o.mu);
    o.error = 0;
    o.epoch_ns = 0;  // the next controller's device is measured afresh
    if (!o.closed.empty() || !o.open_writes.empty()) {
      std::fprintf(stderr, "tai::posix: restart_for_testing: fsync order queue not empty; dropped\n");
      for (auto& e : o.closed) {
        for (auto& w : e.writes) {
          w.ino->deferred.fetch_sub(1, std::memory_order_acq_rel);
          inode_unref(w.ino);
        }
        for (Inode* ip : e.dirty) inode_unref(ip);
      }
      for (auto& w : o.open_writes) {
        w.ino->deferred.fetch_sub(1, std::memory_order_acq_rel);
        inode_unref(w.ino);
      }
      o.closed.clear();
      o.open_writes.clear();
      o.queued_bytes = 0;
      o.durable_seq = o.closed_seq;
    }
    for (Inode* ip : o.open_dirty) {
      ip->in_open_dirty = false;
      inode_unref(ip);
    }
    o.open_dirty.clear();
    o.gate_closed = false;
    o.cv.notify_all();
  }
  g_fsync_mode_set.store(false, std::memory_order_release);
  g_fsync_mode.store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_init_mu);
  ShutdownReport report;
  if (Controller* c = g_ctl.exchange(nullptr, std::memory_order_acq_rel)) {
    report = c->shutdown();
    delete c;
  }
  g_override = settings;
  g_down.store(false, std::memory_order_release);
  g_handed_back.store(false, std::memory_order_release);
  return report;
}

std::vector<std::string> shutdown_for_testing() {
  std::vector<std::string> failures;
  order_sync_before_shutdown(failures);
  std::lock_guard<std::mutex> lock(g_init_mu);
  for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  return failures;
}

}  // namespace tai::posix::detail

// =============================================================================================
// The public functions

namespace tai::posix {

using detail::Description;
using detail::finish;
using detail::Ref;

int open(const char* path, int flags, mode_t mode) { return detail::open_impl(AT_FDCWD, path, flags, mode); }
int openat(int dirfd, const char* path, int flags, mode_t mode) { return detail::open_impl(dirfd, path, flags, mode); }
int creat(const char* path, mode_t mode) { return detail::open_impl(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

int close(int fd) {
  const int saved = errno;
  int err = 0;
  if (detail::order_mode()) {
    // Order mode: close waits for full durability (of every epoch: the simple way).
    Ref d(fd);
    if (d && detail::writable(*d.d) && !d->handed) err = detail::order_sync_all();
  }
  std::atomic<Description*>* s = detail::slot_of(fd, false);
  Description* d = s ? s->exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  if (const int e = d ? detail::release(d) : 0; e && err == 0) err = e;
  if (::close(fd) != 0) {
    if (err == 0) err = errno;
  }
  return finish(err ? -err : 0, saved);
}

ssize_t write(int fd, const void* buf, std::size_t count) {
  Ref d(fd);
  if (!d) return ::write(fd, buf, count);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::write(fd, buf, count);
  std::uint64_t pos = d->offset;
  const ssize_t r = detail::do_write(*d.d, fd, buf, count, pos, d->append, false);
  if (r > 0) d->offset = pos + static_cast<std::uint64_t>(r);
  return finish(r, saved);
}

ssize_t pwrite(int fd, const void* buf, std::size_t count, off_t offset) {
  const int saved = errno;
  if (offset < 0) return finish<ssize_t>(-EINVAL, saved);  // before the descriptor, as the kernel
  Ref d(fd);
  if (!d) return ::pwrite(fd, buf, count, offset);
  std::uint64_t pos = static_cast<std::uint64_t>(offset);
  return finish(detail::do_write(*d.d, fd, buf, count, pos, d->append, true), saved);  // Linux: O_APPEND appends
}

ssize_t read(int fd, void* buf, std::size_t count) {
  Ref d(fd);
  if (!d) return ::read(fd, buf, count);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::read(fd, buf, count);
  const ssize_t r = detail::do_read(*d.d, fd, buf, count, d->offset);
  if (r > 0) d->offset += static_cast<std::uint64_t>(r);
  return finish(r, saved);
}

ssize_t pread(int fd, void* buf, std::size_t count, off_t offset) {
  const int saved = errno;
  if (offset < 0) return finish<ssize_t>(-EINVAL, saved);
  Ref d(fd);
  if (!d) return ::pread(fd, buf, count, offset);
  return finish(detail::do_read(*d.d, fd, buf, count, static_cast<std::uint64_t>(offset)), saved);
}

namespace {
// The checks of the kernel's import_iovec: -errno, or 0 with the total (clamped to MAX_RW_COUNT
// as the kernel does, by trimming the vector's use).
ssize_t check_iov(const struct iovec* iov, int iovcnt, std::size_t& total) {
  total = 0;
  if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
  if (iovcnt > 0 && iov == nullptr) return -EFAULT;
  for (int i = 0; i < iovcnt; ++i) {
    if (static_cast<ssize_t>(iov[i].iov_len) < 0) return -EINVAL;
    if (iov[i].iov_len > static_cast<std::size_t>(std::numeric_limits<ssize_t>::max()) - total) return -EINVAL;
    total += iov[i].iov_len;
  }
  return 0;
}
}  // namespace

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  Ref d(fd);
  if (!d) return ::writev(fd, iov, iovcnt);
  const int saved = errno;
  std::size_t total;
  if (const ssize_t e = check_iov(iov, iovcnt, total)) return finish(e, saved);
  if (!detail::writable(*d.d)) return finish<ssize_t>(-EBADF, saved);
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::writev(fd, iov, iovcnt);
  if (detail::order_mode()) {
    // One write of the gathered bytes: the order path (held back or cached, see do_write)
    // takes a buffer, and the pieces stay together as the kernel's writev keeps them.
    std::vector<char> all;
    std::size_t left = std::min(total, detail::kMaxRw);
    try {
      all.reserve(left);
    } catch (const std::bad_alloc&) {
      return finish<ssize_t>(-ENOMEM, saved);
    }
    for (int i = 0; i < iovcnt && left > 0; ++i) {
      const std::size_t n = std::min(iov[i].iov_len, left);
      if (n == 0) continue;
      if (iov[i].iov_base == nullptr) {
        if (all.empty()) return finish<ssize_t>(-EFAULT, saved);
        break;
      }
      const char* p = static_cast<const char*>(iov[i].iov_base);
      all.insert(all.end(), p, p + n);
      left -= n;
    }
    if (all.empty()) return finish<ssize_t>(0, saved);
    std::uint64_t pos = d->offset;
    const ssize_t r = detail::do_write(*d.d, fd, all.data(), all.size(), pos, d->append, false);
    if (r > 0) d->offset = pos + static_cast<std::uint64_t>(r);
    return finish(r, saved);
  }
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> il(ino.mu);  // the pieces go in together: no other write between
  detail::order(ino);
  if (d->append) {  // through to the kernel: see append_through_locked
    std::uint64_t end = d->offset;
    const ssize_t r = detail::append_through_locked(ino, fd, end, true, [&] { return ::writev(fd, iov, iovcnt); });
    if (r >= 0) d->offset = end;
    return finish(r, saved);
  }
  std::uint64_t pos = d->offset;
  if (pos > detail::kOffMax || total > detail::kOffMax - pos) return finish<ssize_t>(-EINVAL, saved);
  detail::count_write_locked(ino, fd, std::min(total, detail::kMaxRw));
  if (detail::kernel_locked(ino)) {  // write-through, or see shut_down_locked
    ssize_t r;
    do {
      r = ::pwritev(fd, iov, iovcnt, static_cast<off_t>(pos));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return finish<ssize_t>(-errno, saved);
    d->offset = pos + static_cast<std::uint64_t>(r);
    return finish(r, saved);
  }
  ssize_t done = 0;
  std::size_t left = std::min(total, detail::kMaxRw);
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const std::size_t n = std::min(iov[i].iov_len, left);
    if (n == 0) continue;
    if (iov[i].iov_base == nullptr) {
      if (done == 0) return finish<ssize_t>(-EFAULT, saved);
      break;  // the kernel stops at the fault and reports what it copied
    }
    std::uint64_t at = pos + static_cast<std::uint64_t>(done);
    const ssize_t r = detail::submit_write_locked(ino, iov[i].iov_base, n, at, false);
    if (r < 0) {
      if (done == 0) return finish(r, saved);
      break;
    }
    done += r;
    left -= n;
  }
  d->offset = pos + static_cast<std::uint64_t>(done);
  return finish(done, saved);
}

ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  Ref d(fd);
  if (!d) return ::readv(fd, iov, iovcnt);
  const int saved = errno;
  std::size_t total;
  if (const ssize_t e = check_iov(iov, iovcnt, total)) return finish(e, saved);
  if (!detail::readable(*d.d)) return finish<ssize_t>(-EBADF, saved);
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::readv(fd, iov, iovcnt);
  const std::uint64_t pos = d->offset;
  if (pos > detail::kOffMax || total > detail::kOffMax - pos) return finish<ssize_t>(-EINVAL, saved);
  ssize_t done = 0;
  std::size_t left = std::min(total, detail::kMaxRw);
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const std::size_t n = std::min(iov[i].iov_len, left);
    if (n == 0) continue;
    const ssize_t r = detail::do_read(*d.d, fd, iov[i].iov_base, n, pos + static_cast<std::uint64_t>(done));
    if (r < 0) {
      if (done == 0) return finish(r, saved);
      break;
    }
    done += r;
    left -= n;
    if (static_cast<std::size_t>(r) < n) break;  // end of file
  }
  d->offset = pos + static_cast<std::uint64_t>(done);
  return finish(done, saved);
}

off_t lseek(int fd, off_t offset, int whence) {
  Ref d(fd);
  if (!d) return ::lseek(fd, offset, whence);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::lseek(fd, offset, whence);
  const off_t cur = static_cast<off_t>(d->offset);
  off_t next = 0;
  switch (whence) {
    case SEEK_SET:
      next = offset;
      break;
    case SEEK_CUR:
      if (__builtin_add_overflow(cur, offset, &next)) return finish<off_t>(-EINVAL, saved);
      break;
    case SEEK_END: {
      const off_t size = static_cast<off_t>(detail::current_size(*d->inode, fd));
      if (__builtin_add_overflow(size, offset, &next)) return finish<off_t>(-EINVAL, saved);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      // The whole file counts as data (allowed by POSIX, and true of what is cached): SEEK_DATA
      // stays, SEEK_HOLE goes to the end; both fail with ENXIO at or past the end.
      const off_t size = static_cast<off_t>(detail::current_size(*d->inode, fd));
      if (offset < 0 || offset >= size) return finish<off_t>(-ENXIO, saved);
      next = whence == SEEK_DATA ? offset : size;
      break;
    }
    default:
      return finish<off_t>(-EINVAL, saved);
  }
  if (next < 0) return finish<off_t>(-EINVAL, saved);
  d->offset = static_cast<std::uint64_t>(next);
  return finish(next, saved);
}

int fsync(int fd) {
  Ref d(fd);
  if (!d) return ::fsync(fd);
  const int saved = errno;
  return finish(detail::sync_routed(*d.d, fd, false), saved);
}

int fdatasync(int fd) {
  Ref d(fd);
  if (!d) return ::fdatasync(fd);
  const int saved = errno;
  return finish(detail::sync_routed(*d.d, fd, true), saved);
}

int ftruncate(int fd, off_t length) {
  Ref d(fd);
  if (!d || !detail::writable(*d.d)) return ::ftruncate(fd, length);  // the kernel's checks and errno
  const int saved = errno;
  if (length < 0) return finish(-EINVAL, saved);
  detail::Inode& ino = *d->inode;
  if (detail::order_mode()) {
    // The truncation goes to the kernel: after every closed epoch is durable, with the gate
    // held open (see detail::order_gate_locked).
    for (;;) {
      detail::order_drain();
      std::lock_guard<std::mutex> lock(ino.mu);
      std::unique_lock<std::mutex> gate;
      const int g = detail::order_gate_locked(ino, gate);
      if (g == 1) continue;
      if (g < 0) return finish(g, saved);
      return finish(detail::truncate_locked(ino, fd, static_cast<std::uint64_t>(length)), saved);
    }
  }
  std::lock_guard<std::mutex> lock(ino.mu);
  return finish(detail::truncate_locked(ino, fd, static_cast<std::uint64_t>(length)), saved);
}

int fstat(int fd, struct stat* st) {
  Ref d(fd);
  // glibc declares fstat's buffer nonnull; the system call answers a null one (EBADF first,
  // else EFAULT), so that is what a null buffer gets.
  const int rc = st ? ::fstat(fd, st) : static_cast<int>(::syscall(SYS_fstat, fd, st));
  if (rc != 0 || !d) return rc;
  const std::uint64_t size = d->inode->size.load(std::memory_order_acquire);
  if (static_cast<std::uint64_t>(st->st_size) < size) st->st_size = static_cast<off_t>(size);
  return 0;
}

Receipt fsync_async(int fd) {
  Ref d(fd);
  if (!d) {
    const int saved = errno;  // the answer is on the receipt: errno stays as it was
    const bool open = ::fcntl(fd, F_GETFD) >= 0;
    Controller* c = open ? detail::controller() : nullptr;
    errno = saved;
    if (!c) return File().fsync();  // rejected: EBADF
    return c->submit([fd] {
      if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category(), "fsync");
    });
  }
  if (detail::order_mode()) {
    // Held-back writes are not in the file's cache, so the file's own sync would not cover
    // them: every epoch durable here (waits), and the receipt carries the outcome.
    const int err = detail::order_sync_all();
    Controller* c = detail::g_ctl.load(std::memory_order_acquire);
    if (!c) return File().fsync();  // rejected: EBADF
    return c->submit([err] {
      if (err != 0) throw std::system_error(err, std::generic_category(), "fsync");
    });
  }
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> lock(ino.mu);
  detail::order(ino);
  // A receipt is the controller's: the file goes back to the cache (write-through is for the
  // synchronous fsync; the kernel has every byte written through so far, and this sync, an
  // engine sync of the same inode, covers them).
  if (!detail::leave_through_locked(ino, fd)) {
    Controller* c = detail::g_ctl.load(std::memory_order_acquire);
    if (!c) return File().fsync();  // rejected: EBADF
    return c->submit([fd] {
      if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category(), "fsync");
    });
  }
  ino.bytes_since_sync = 0;
  Receipt r = ino.file.fsync();
  ino.last = r;
  ino.last_sync = r;
  ino.last_tid = std::this_thread::get_id();
  return r;
}

int barrier(int fd) {
  Ref d(fd);
  if (!d) return ::fdatasync(fd);
  const int saved = errno;
  if (detail::order_mode()) return finish(detail::order_fsync(true), saved);  // an epoch is a barrier across files
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> lock(ino.mu);
  detail::order(ino);
  // The barrier is the controller's (see fsync_async); a file that cannot leave write-through
  // gets the kernel's sync, which orders as much.
  if (!detail::leave_through_locked(ino, fd)) return finish(::fdatasync(fd) < 0 ? -errno : 0, saved);
  Receipt r = ino.file.barrier();
  if (r.finished() && !r.ok()) return finish(-detail::error_of(r), saved);
  ino.last = r;
  ino.last_sync = r;
  ino.last_tid = std::this_thread::get_id();
  return finish(0, saved);
}

int wait(int fd) {
  Ref d(fd);
  const int saved = errno;
  if (!d) return ::fcntl(fd, F_GETFD) < 0 ? -1 : 0;
  detail::Inode& ino = *d->inode;
  Receipt last, sync;
  std::uint64_t target;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    last = ino.last;
    sync = ino.last_sync;
    target = ino.writes_submitted.load(std::memory_order_relaxed);
  }
  last.wait();
  sync.wait();
  detail::settle(ino, target);
  if (sync.valid() && !sync.ok()) return finish(-detail::error_of(sync), saved);
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return finish(-w, saved);
  return finish(0, saved);
}

bool routed(int fd) noexcept {
  Ref d(fd);
  return static_cast<bool>(d);
}

int set_fsync_mode(FsyncMode mode) {
  const int saved = errno;
  int err = 0;
  const bool now_order = detail::order_mode();
  if (mode == FsyncMode::order && !now_order) {
    // What the cache holds was written under `full`, outside any epoch's list: durable first.
    err = detail::sync_all();
  } else if (mode == FsyncMode::full && now_order) {
    err = detail::sync_all();
  }
  detail::g_fsync_mode_set.store(true, std::memory_order_release);
  detail::g_fsync_mode.store(static_cast<int>(mode), std::memory_order_release);
  return finish(err ? -err : 0, saved);
}

FsyncMode fsync_mode() noexcept { return detail::order_mode() ? FsyncMode::order : FsyncMode::full; }

int sync_now() {
  const int saved = errno;
  const int err = detail::sync_all();
  return finish(err ? -err : 0, saved);
}

FsyncOrderStats fsync_order_stats() noexcept {
  FsyncOrderStats s;
  s.epochs_closed = detail::g_stat_closed.load(std::memory_order_relaxed);
  s.epochs_durable = detail::g_stat_durable.load(std::memory_order_relaxed);
  s.deferred_writes = detail::g_stat_deferred.load(std::memory_order_relaxed);
  s.backpressure = detail::g_stat_backpressure.load(std::memory_order_relaxed);
  s.max_queued_bytes = detail::g_stat_max_queued.load(std::memory_order_relaxed);
  return s;
}

}  // namespace tai::posix

// The drop-in layer's internals (tai/posix.hpp: POSIX calls over a process-wide controller),
// shared by its sources, one concern each: settings.cpp (the environment, the log), state.cpp
// (the controller pointer, the modes, the keeper's futex words), inodes.cpp (one per routed
// file, write-through), descriptors.cpp (open file descriptions, the descriptor table),
// transfers.cpp (writes, reads, syncs of routed descriptors), order_mode.cpp (TAI_FSYNC=order),
// routing.cpp (opening, routing and unrouting descriptors), process_events.cpp (the
// controller's life, the exit handler, write-back of everything, the keeper thread, fork and
// exec, restarts for the tests) and api.cpp (the public functions). Not installed: layer.hpp is
// the interface of the preload library and the tests, and holds the cross-thread ordering rule.
// Internal functions return -errno (as the kernel does) and never read errno except right after
// a system call; the public functions turn that into -1 and errno, and restore the caller's
// errno on success.
#pragma once

#include "src/posix/layer.hpp"
#include "src/posix/held_copy_pool.hpp"
#include "src/posix/order_log.hpp"

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

inline constexpr std::uint64_t kOffMax = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
// The kernel's MAX_RW_COUNT (INT_MAX rounded down to a page): longer transfers are short.
inline constexpr std::size_t kMaxRw = static_cast<std::size_t>(INT_MAX) & ~static_cast<std::size_t>(4095);
inline constexpr int kExitStatusOnLoss = 75;  // EX_TEMPFAIL

// Paths of files that went write-through, most recent last: a file opened again under one of
// them starts write-through (a journal made and deleted by every transaction would otherwise
// pay a sync through the workers before each of its lives learns it). Bounded; a leaf lock.
inline constexpr std::size_t kThroughPaths = 64;

inline constexpr int kChunkBits = 10;
inline constexpr int kTopBits = 16;
inline constexpr int kMaxFd = 1 << (kChunkBits + kTopBits);

struct Inode;
struct InodeKey;
struct Description;
struct Chunk;
struct Ref;
struct Deferred;
struct Epoch;
struct NamedDir;
struct OrderState;

// Process-wide state (the comments are at the definitions).
extern std::atomic<bool> g_log;
extern std::mutex g_init_mu;
extern std::mutex g_make_mu;
extern std::atomic<bool> g_configured;
extern std::atomic<Controller*> g_ctl;
extern std::atomic<bool> g_down;
extern std::atomic<bool> g_handed_back;
std::optional<Settings>& settings_override();  // restart_for_testing's settings (under g_init_mu)
extern std::atomic<bool> g_trivial;
extern std::atomic<std::uint64_t> g_start_writeback;
extern std::atomic<std::uint64_t> g_sync_through;
extern std::atomic<bool> g_start_through;
extern std::atomic<int> g_fsync_mode;
extern std::atomic<bool> g_fsync_mode_set;
extern std::atomic<bool> g_fsync_none;
extern std::atomic<std::uint64_t> g_max_delay_ns;
extern std::atomic<int> g_fsync_inline;
extern std::atomic<std::uint64_t> g_order_limit;
extern std::atomic<std::uint64_t> g_write_behind_ns;
extern std::atomic<std::uint64_t> g_dirty_since;
extern std::atomic<std::uint64_t> g_handing_since;
extern std::atomic<std::uint32_t> g_keeper_wake;
extern std::atomic<std::uint32_t> g_end_requested;
extern std::atomic<std::uint32_t> g_end_done;
extern std::atomic<bool> g_keeper_started;
extern std::atomic<bool> g_keeper_failed;
extern std::atomic<long> g_cached_files;
extern std::atomic<bool> g_order_gate_open;
extern std::mutex g_reg_mu;
extern std::mutex g_through_mu;
extern std::mutex g_pool_mu;
extern std::atomic<Chunk*> g_top[1u << kTopBits];
extern std::atomic<int> g_top_used;
extern std::atomic<unsigned> g_skip_epoch_syncs;
extern std::atomic<bool> g_skip_dir_syncs;
extern std::atomic<unsigned> g_fail_dir_syncs;
extern std::atomic<int> g_fail_dir_syncs_errno;
extern std::atomic<unsigned> g_log_write_delay_ms;
extern std::atomic<unsigned> g_fail_apply_notes;
// Settings::kernel_observer's, or null. Stored (release) by configure before any file is routed,
// cleared by restart_for_testing before the settings that own it go; loaded (acquire) at each
// report.
extern std::atomic<KernelObserver*> g_kernel_observer;
extern std::atomic<unsigned long long> g_stat_closed, g_stat_durable, g_stat_deferred, g_stat_backpressure, g_stat_max_queued,
    g_stat_logged, g_stat_log_batches, g_stat_checkpoints, g_stat_inline, g_stat_through_writes, g_stat_max_lag_ns,
    g_stat_max_early_lag_ns;
extern std::atomic<bool> g_forked_child;

// Functions of one source used by another (the comments are at the definitions).
void logf(const char* fmt, ...);
bool parse_bytes(const std::string& s, std::uint64_t& out);
bool parse_ms(const char* text, std::uint64_t& out);
bool order_mode() noexcept;
std::uint64_t now_ns() noexcept;
uint32_t* futex_word(std::atomic<std::uint32_t>& a) noexcept;
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::uint64_t ns) noexcept;
void futex_wake(std::atomic<std::uint32_t>& word, int n) noexcept;
void note_dirty() noexcept;
void inode_unref(Inode* ino) noexcept;
void note_error(Inode& ino, int err) noexcept;
int error_of(const Receipt& r) noexcept;
void settle(Inode& ino, std::uint64_t target) noexcept;
void order(Inode& ino) noexcept;
void count_cached_locked(Inode& ino, bool cached) noexcept;
std::map<InodeKey, Inode*>& registry();
Result<File> open_engine_file(const std::string& path, bool readable);
bool configure();
Controller* make_controller();
bool layer_active() noexcept;
int close_file_locked(Inode& ino) noexcept;
int inode_release_open(Inode* ino) noexcept;
void reopen_locked(Inode& ino, int fd, const char* why) noexcept;
int truncate_locked(Inode& ino, int fd, std::uint64_t length) noexcept;
// ftruncate to the size the file already has (SQLite sets its database's size after every WAL
// checkpoint): 0 or -errno when done here, 1 when the general path must do it. See inodes.cpp.
int truncate_to_own_size(Inode& ino, int fd, std::uint64_t length) noexcept;
std::vector<std::string>& through_paths();
bool through_path_known(const std::string& path);
void remember_through_path(const std::string& path, bool through);
bool leave_through_locked(Inode& ino, int fd) noexcept;
std::vector<Description*>& pool();
Description* new_description();
int release(Description* d) noexcept;
std::atomic<Description*>* slot_of(int fd, bool make);
Description* acquire(int fd) noexcept;
void install(int fd, Description* d);
bool readable(const Description& d);
bool writable(const Description& d);
std::uint64_t current_size(const Inode& ino, int fd);
void grow_size(Inode& ino, std::uint64_t end) noexcept;
void start_writeback_every(Inode& ino, std::size_t n);
ssize_t submit_write_locked(Inode& ino, const void* buf, std::size_t n, std::uint64_t& pos, bool append);
ssize_t submit_buffer_locked(Inode& ino, Buffer&& data, std::uint64_t pos);
ssize_t note_submitted_write_locked(Inode& ino, Receipt r, std::size_t n, std::uint64_t pos);
ssize_t clamp_count(const void* buf, std::size_t& n);
bool shut_down_locked(const Inode& ino) noexcept;
bool kernel_locked(const Inode& ino) noexcept;
// Under ino.mu, in order mode: the file is write-through and its writes still pass the epoch
// gate (held back while it is closed, then written by the order thread on Inode::direct_fd, its
// syncs made there too). False for a file write-through without that descriptor and while the
// layer shuts down: those go to the kernel at once, as `full` does.
bool order_through_locked(const Inode& ino) noexcept;
// Under ino.mu: a write of a write-through file to the kernel on the program's descriptor (EINTR
// retried), the file's size grown. Bytes or -errno.
ssize_t kernel_write_locked(Inode& ino, int fd, const void* buf, std::size_t n, std::uint64_t pos);
// The kernel's fdatasync (data_only) or fsync of fd, EINTR retried. errno or 0.
int kernel_sync(int fd, bool data_only) noexcept;
// The same of a write-through file `ino` (fd: a descriptor of it), reported to the observer.
int kernel_sync_file(const Inode& ino, int fd, bool data_only) noexcept;
// An fsync (whole_fs: a syncfs) of directory (dev, ino) on its descriptor fd, reported to the
// observer as a file's fsync (a file system's syncfs). errno or 0.
int kernel_sync_directory(dev_t dev, ino_t ino, int fd, bool whole_fs) noexcept;
// The kernel's syncfs of the file system of `ino` on its descriptor fd (the system call, as
// kernel_sync), reported to the observer. errno or 0.
int kernel_syncfs(const Inode& ino, int fd) noexcept;
// pwrite_all / pwritev_all (order_log.hpp) of a write-through file `ino`, reported to the
// observer. errno or 0.
int kernel_pwrite_file(const Inode& ino, int fd, const char* p, std::size_t n, std::uint64_t pos) noexcept;
int kernel_pwritev_file(const Inode& ino, int fd, struct iovec* iov, int count, std::uint64_t pos) noexcept;
void count_write_locked(Inode& ino, int fd, std::size_t n) noexcept;
OrderState& ord();
void note_open_dirty_locked(OrderState& o, Inode& ino);
std::uint64_t close_epoch_locked(OrderState& o, bool data_only, bool wake = true);
bool open_epoch_empty_locked(const OrderState& o);
int apply_writes(std::vector<std::vector<Deferred>>& groups, std::vector<Inode*>& touched) noexcept;
int sync_files(const std::vector<Inode*>& files, bool data_only);
// The order thread's part for an epoch's directories: each synced (fsync, or syncfs for a
// whole_fs entry), reported to the observer. errno of the first failure, or 0. The caller closes
// the descriptors (drop_dirs) or, after a failure, puts them on the open epoch's list.
int sync_dirs(const std::vector<NamedDir>& dirs) noexcept;
// Closes the descriptors of `dirs` and empties it (an epoch dropped by restart_for_testing).
void drop_dirs(std::vector<NamedDir>& dirs) noexcept;
void order_thread_main() noexcept;
int take_error_locked(OrderState& o);
// order_hold_write's answer when the write was not held back (the caller takes the inode's
// mutex and the general path).
inline constexpr ssize_t kNotHeld = std::numeric_limits<ssize_t>::min();
// A write in order mode, without the inode's mutex: admitted (back-pressure while the queue of
// held bytes is full), then held back when the gate is closed. Bytes or -errno, or kNotHeld
// when the gate is open, the layer shuts down, or the write would take a write-through file back
// to the cache.
ssize_t order_hold_write(Inode& ino, const void* buf, std::size_t n, std::uint64_t pos);
ssize_t order_write_locked(Inode& ino, int fd, const void* buf, std::size_t n, std::uint64_t pos);
// Under the inode's mutex and the order state's: does a write held back for `ino`, not yet in
// the cache, end exactly at `end`?
bool held_write_ends_at_locked(const OrderState& o, const Inode& ino, std::uint64_t end);
// A read of a file with writes held back (Inode::deferred): the cache's (or the kernel's) bytes
// with the held writes laid over them, oldest first, instead of waiting for the epochs before
// them to be durable. Bytes or -errno.
ssize_t read_held_through(Inode& ino, int fd, void* buf, std::size_t n, std::uint64_t pos);
// start_read_locked's answer when the cache has the read: wait for its receipt.
inline constexpr ssize_t kCacheRead = std::numeric_limits<ssize_t>::min();
// Under ino.mu: a read of what the kernel has (a write-through file, or see shut_down_locked),
// answered at once (bytes or -errno), or of the cache: kCacheRead, `r` its receipt, which the
// caller waits for (without the mutex where it can).
ssize_t start_read_locked(Inode& ino, int fd, void* buf, std::size_t n, std::uint64_t pos, Receipt& r);
int order_point_impl();
void order_drain();
int order_gate_locked(Inode& ino, std::unique_lock<std::mutex>& gate);
int order_fsync(bool data_only);
int order_close(Inode& ino);
int order_wait_closed();
// Under ino.mu, in order mode, at the last close of `ino` (inode_release_open): bounds the
// closed files the open epoch holds (see OrderState::closed_in_open_dirty).
void order_release_closed_locked(Inode& ino) noexcept;
// A failed epoch or held write not yet returned (taken), or 0.
int order_take_error();
// may_inline false: from a caller outside the preload library's depth count (a libc call there
// would come back into the layer): the order thread makes the last epoch durable, never the
// caller. (The exit handler and exec call order_wait_closed, which closes no epoch.)
int order_sync_all(bool may_inline = true);
void order_log_configure(const std::string& dir, std::uint64_t checkpoint_bytes);
// Replays the logs of dead processes in `dir` ("" : none), once per directory and process: before
// the first routed open, read-only ones included (a reader must not see the files unreplayed).
void recover_order_logs_once(const std::string& dir);
void order_log_shutdown();
// The exit handler in order mode, while other threads may still be writing: exit_gate_close
// makes new writes and syncs wait and waits for those under way (OrderedCall), so that the last
// epoch it makes durable is the last one; exit_gate_open then switches the layer to `full` and
// lets the waiting calls go on (writes to the cache, which the shutdown writes back, or to the
// kernel; syncs the full way). Without it, writers kept the order thread's gate closed and the
// exit handler waited for good.
void order_exit_gate_close() noexcept;
void order_exit_gate_open() noexcept;
void order_exit_gate_reset() noexcept;  // restart_for_testing: back to phase 0
// A write, fsync or sync of everything in order mode, counted while it runs (see
// order_exit_gate_close): the handler's last epoch must be the last one, and a program thread
// that kept closing epochs (an fsync loop) would keep the order thread's gate closed under the
// handler's wait. ordered(): whether the call goes the order mode's way; false in `full`, and for
// a call that waited out the exit handler's last epoch (the layer is `full` then). Construct it
// before the call's order_mode() check and without any lock of the layer held. Nested in a
// counted one of the same thread, it is counted with it (it never waits: the handler waits for
// the outer one). Thread-safe; one per call.
class OrderedCall {
 public:
  OrderedCall() noexcept;
  ~OrderedCall();
  OrderedCall(const OrderedCall&) = delete;
  OrderedCall& operator=(const OrderedCall&) = delete;
  bool ordered() const noexcept { return counted_; }

 private:
  bool counted_;
};
std::string absolute_path_of(int fd, const char* path);
ssize_t do_write(Description& d, int fd, const void* buf, std::size_t n, std::uint64_t& pos, bool append,
                 bool explicit_offset);
ssize_t do_read(Description& d, int fd, void* buf, std::size_t n, std::uint64_t pos);
int sync_routed(Description& d, int fd, bool data_only);
bool proc_fd_available() noexcept;
const char* maybe_route(int fd, int flags, const char* path, std::uint64_t offset = 0,
                        const struct stat* known = nullptr);
int open_impl(int dirfd, const char* path, int flags, mode_t mode);
void kernel_seek(int fd, std::uint64_t offset) noexcept;
void hand_back_offsets();
std::vector<std::string> shutdown_locked();
void at_exit();
__attribute__((constructor(101))) void register_exit_handler();
int unroute_slot(int fd, Description* d);
void keeper_write_back() noexcept;
void keeper_main() noexcept;
void start_keeper() noexcept;
int write_back_one(Inode& ino);
void order_sync_before_shutdown(std::vector<std::string>& failures);
int full_sync_all();

struct Inode {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;          // for messages
  // The absolute path the order mode's log names the file by (a replay opens it); "" when it
  // could not be known (no /proc and a relative name): the file's writes then never go to the log.
  std::string log_path;
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
  // Order mode: TAI's own descriptor of the file, opened anew (its own open file description:
  // write access, never O_APPEND), for the order thread's writes and syncs while the file is
  // write-through (the program's descriptor may be closed by then). -1: none, and then the file
  // never goes write-through in order mode. Set before the inode is published, closed with it.
  int direct_fd = -1;
  std::uint64_t unstarted_bytes = 0; // under mu: written since the last start of write-back
  std::uint64_t writeback_started = 0;  // under mu: the end of the ranges whose write-back was started
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
  // Atomic (seq_cst, the default: rare stores, loads are plain on x86) because the order mode's
  // held-back writes and fsyncs read it without mu (order_hold_write, sync_routed): a value
  // that changes under them only moves the write-through decision to the next write.
  std::atomic<bool> through{false};
  // Under mu (or before the inode is published): counted in g_cached_files (see there).
  bool counted_cached = false;
  // Written since the last sync (or the open). Changed under mu, except by the order mode's
  // held-back writes and fsyncs, which add and reset it without mu (hence atomic; see `through`).
  std::atomic<std::uint64_t> bytes_since_sync{0};
  // TAI_FSYNC=order (see "The order mode" below): writes of this file held back in the layer
  // behind an epoch not yet durable (reads lay them over the cache's bytes), and whether the
  // open epoch's list of files to sync has it (under the order state's mutex).
  std::atomic<std::uint64_t> deferred{0};
  bool in_open_dirty = false;
  // Order mode: the next sync of this file by an epoch syncs its whole file system (syncfs on
  // direct_fd): it stands for files of that file system closed since the last epoch that the
  // open epoch no longer holds (order_release_closed_locked). Set (release) under the order
  // state's mutex after those files' bytes are in the kernel; taken (exchange, acq_rel) by the
  // syncing thread without it, which then syncs after those bytes.
  std::atomic<bool> sync_whole_fs{false};

  Inode() = default;
  Inode(const Inode&) = delete;
  Inode& operator=(const Inode&) = delete;
  ~Inode() {
    if (writeback_fd >= 0) (void)tai::detail::close_own_descriptor(writeback_fd);
    if (direct_fd >= 0) (void)tai::detail::close_own_descriptor(direct_fd);
  }
};

struct InodeKey {
  dev_t dev;
  ino_t ino;
  bool operator<(const InodeKey& o) const noexcept { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};

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

struct Chunk {
  std::atomic<Description*> slot[1u << kChunkBits] = {};
};

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

// ---------------------------------------------------------------------------------------------
// The order mode (TAI_FSYNC=order)
//
// One process-wide state. While no epoch is waiting for the device the gate is open: writes go
// to the cache as in `full`, and each file written is put on the open epoch's list of files to
// sync. An fsync closes the epoch: it moves that list (and the writes held back, below) into an
// Epoch at the back of the `closed` queue, closes the gate, and returns. From then on writes are
// not given to the cache (whose idle flush, quota, write-around and write-behind would send them
// to the engine at any time) but copied into `open_writes`, under the state's mutex alone (no
// inode mutex: order_hold_write); a read of the file meanwhile gets them laid over the cache's
// bytes (read_held_through, OrderState::applying). The order thread takes the epochs
// from the front, one at a time: it gives the epoch's held writes to the cache, then syncs every
// file of the epoch through the engine (tai::File::fsync: write-back and the engine's durable
// sync) and waits for all of them; only then is the epoch popped and the next one started. When
// the queue is empty it gives the open epoch's held writes to the cache and opens the gate. So a
// write of epoch n+1 reaches the cache, hence the engine, only after every file of epochs <= n
// was synced: the rule of DESIGN section 3. Deliberately simple: one epoch in flight, one sync
// per file per epoch, no merging of epochs (which would break the rule). The log of epochs is
// the exception: a batch's epochs are durable together in the log before any of their writes
// reaches the cache, so those writes are applied as one sequence (apply_writes).
//
// What goes to the kernel behind the cache (O_APPEND writes, an ftruncate that changes the size,
// and in the preload unlink/rename/link, open with O_TRUNC, an fsync of a non-routed descriptor
// but a directory) first
// waits until the gate is open (order_drain) or the closed epochs are durable (order_point), and
// is done with the gate held open (the state's mutex), so that the next fsync covers it.
// A write-through file (Settings::sync_through_bytes: synced after little data) keeps the rule:
// while the gate is open its writes go to the kernel under the state's mutex (so the next fsync
// covers them), while it is closed they are held back like cached ones, and the order thread
// writes them and syncs the file on the inode's own descriptor (Inode::direct_fd), with no
// controller hand-off. A file starts write-through when it is empty at its open (or made again
// under a write-through name), and goes write-through after an order-thread sync of it that
// covered every write submitted to it; one made write-through in `full` goes back to the cache
// at its next write. Not covered: a file that cannot leave write-through (its engine cannot
// open it) keeps writing to the kernel directly; the creation of a file is not held back (an
// empty new file may appear before the epoch that precedes it is durable). Name changes (rename,
// link, unlink, mkdir, rmdir, symlink) are made with the gate held open, as an O_APPEND write is
// (order_name_change), and put their directory on the open epoch's list (NamedDir), synced with
// its files; so does a file the layer sees made (order_name_changed).
//
// Lock order: a description's mutex, an inode's mutex, then the state's mutex. The order thread
// never holds the state's mutex while it takes an inode's.
//
// Without the log of epochs there is one device sync per epoch, one epoch at a time, as many
// syncs as `full`: the mode wins the overlap of the program's work with the sync. With it
// (TAI_FSYNC_LOG_DIR, order_log.hpp) a run of epochs costs one sync of the log. The rule is
// checked on the recording engine's log (test/posix_layer/fsync_order_test.cpp), on every
// multi-file crash state of the crash simulator's log (test/posix_layer/fsync_order_crash_test.cpp,
// docs/crashsim.md; write-through files' kernel writes and syncs logged through KernelObserver),
// for write-through files also by what the kernel holds while an epoch is held
// (test/posix_layer/order_through_test.cpp), and the kill suite runs sqlite3 under this mode
// (test/kill/preload_kill_test.cpp).

struct Deferred {
  Inode* ino;  // holds a reference
  std::uint64_t pos;
  Buffer bytes;  // the write's, in a block of HeldCopyPool
};

// A directory whose entries the program changed in an epoch (a rename, link or unlink under it,
// order_name_changed): synced with the epoch's files, so that the name change is durable before
// any write of a later epoch reaches the device. A name change is no write to any file, and a
// file's fsync or fdatasync does not make it durable (POSIX asks for an fsync of the directory;
// ext4 commits it with a file's fsync only when that fsync commits the journal, which an
// fdatasync of an overwrite does not). `fd` is owned (O_RDONLY | O_DIRECTORY), closed when the
// epoch is done with it. `whole_fs`: past kNamedDirsMax directories in one epoch, one entry per
// file system stands for the rest and its file system is synced whole (syncfs).
struct NamedDir {
  dev_t dev;
  ino_t ino;
  int fd;
  bool whole_fs;
  // OrderState::names_noted when its latest name change was noted: a program's own fsync of
  // the directory that began after that covers it (order_directory_synced).
  std::uint64_t noted = 0;
};

struct Epoch {
  std::vector<Deferred> writes;  // held back while an earlier epoch was in flight
  std::vector<Inode*> dirty;     // written through the cache in this epoch; each holds a reference
  std::vector<NamedDir> dirs;    // their names changed in this epoch: synced with `dirty`
  std::uint64_t seq = 0;
  std::uint64_t closed_ns = 0;
  bool data_only = true;
  // Its fsync returned before it was durable (order_fsync): TAI_FSYNC_MAX_DELAY is a promise
  // about this epoch. An epoch whose closer waited for it (back-pressure, exit, close, sync_now)
  // was promised nothing the full way would not have.
  bool early = false;
};

struct OrderState {
  std::mutex mu;
  std::condition_variable cv;
  bool gate_closed = false;
  std::deque<Epoch> closed;  // front: the epoch being made durable
  std::vector<Deferred> open_writes;
  // Held writes on their way to the cache, older first (older than every write in `closed` and
  // `open_writes`): moved here under mu by the thread making them durable (the order thread, or
  // an inline epoch's), which alone changes the vectors, cleared under mu when they are in. A
  // write's bytes leave (for the cache, or the kernel of a write-through file) under its inode's
  // mutex: a reader holding that mutex and mu sees exactly the held writes of that file that the
  // cache does not have yet (read_held_through).
  std::vector<std::vector<Deferred>> applying;
  // Rounds of `applying` done: incremented under mu where each round is cleared, in the same
  // hold of mu that publishes the round's error (a close waits for the round it found naming its
  // file, order_close, not for every later one).
  std::uint64_t apply_rounds = 0;
  std::vector<Inode*> open_dirty;
  std::vector<NamedDir> open_dirs;  // the open epoch's directories (NamedDir)
  // Name changes noted so far (NamedDir::noted): incremented under mu, read without it by
  // order_names_ticket (seq_cst both).
  std::atomic<std::uint64_t> names_noted{0};
  // Files in open_dirty whose last descriptor was closed (order_release_closed_locked): each
  // holds TAI's descriptors of it open until the epoch is durable. Zeroed when the epoch closes.
  std::size_t closed_in_open_dirty = 0;
  std::uint64_t queued_bytes = 0;  // bytes in `closed` and `open_writes` not yet in the cache
  std::uint64_t closed_seq = 0, durable_seq = 0;
  // The pace at which epochs became durable lately, per epoch: the time from the last epoch made
  // durable (or from this one's fsync, when it came later) to this one durable, an average with
  // weight 1/4 on the newest; 0 until the first epoch is done. With the queue's length it
  // predicts when a new epoch will be durable (order_fsync). Counted from the last one durable,
  // not from when the order thread took this one, so that its wake-ups and its waits for a CPU
  // count too: with two program threads closing epochs as fast as they could on 2 CPUs, the
  // order thread's own system calls were half of its pace, and an epoch waited 2.1 s to be
  // durable under a delay of 1 s.
  std::uint64_t epoch_ns = 0;
  // The pace's recent worst: the slowest epoch lately, each newer one taking a sixteenth off it
  // (about 45 epochs to halve). The prediction takes the larger of the two, so that a device
  // whose syncs vary (a loop device throttled to 200 writes/s: 5 to 60 ms a sync) is not judged
  // by its fast ones: under the average alone, two threads closing epochs on such a device had
  // one durable 1.09 s after its fsync under a delay of 1 s (0.29 s at most with this).
  std::uint64_t epoch_peak_ns = 0;
  std::uint64_t last_durable_ns = 0;  // when the last epoch was made durable (0: none yet)
  std::uint64_t front_started_ns = 0;  // when the order thread took the epoch in flight; 0: none
  // How many epochs are in flight since front_started_ns: 1 the direct way, a log batch's count
  // with the log (they become durable together, with one sync).
  std::size_t front_epochs = 0;
  int error = 0;  // a failed epoch, not yet returned: the thread stops until it is
  bool thread_started = false;
  // A program thread makes the front epoch durable itself (order_fsync, order_sync_all: see
  // Settings::fsync_inline); the order thread leaves the state alone until it is done.
  bool inline_running = false;
  bool order_busy = false;  // the order thread is at work (not waiting for some)
  int program_waiters = 0;  // program threads in program_wait: an inline epoch wakes them only
  // For the automatic choice (inline_wanted_locked): the probe, an epoch closed alone and left
  // to the order thread, whose fate is watched (0: none); one bit per probe of the last 8,
  // newest lowest, set when the program waited for it (or the epochs after it) at once; alone
  // epochs made inline since the last probe.
  std::uint64_t probe_seq = 0;
  std::uint64_t probe_closed_ns = 0;
  std::uint32_t caught_history = 0;
  unsigned probes_judged = 0;  // bits of caught_history that are probes (at most 8)
  unsigned inline_since_probe = 0;
  bool held = false;  // hold_order_thread_for_testing: a device that does not answer
  // Every epoch <= this is durable in the files themselves (not only in the log): what close,
  // exit and sync_now wait for. Equal to durable_seq while the log is not in use.
  std::uint64_t checkpointed_seq = 0;
  std::uint64_t checkpoint_wanted = 0;  // order_sync_all waits for this epoch to be checkpointed
  // Program threads waiting for the gate to open (order_point, order_drain) or for the queue to
  // shrink (admit_locked): with the log in use, the order thread then checkpoints at once instead
  // of keeping the log open for the next epochs.
  int gate_waiters = 0;
  // The log of epochs (order_log.hpp, TAI_FSYNC_LOG_DIR). `dir` is set with the controller
  // (under mu); the rest belongs to the order thread, and to order_log_shutdown once the
  // thread is idle with the gate open.
  struct Log {
    std::string dir;  // "" : no log
    std::string path;
    int lock_fd = -1;
    File file;
    bool broken = false;  // it failed once: not used again by this process
    std::uint64_t generation = 1;
    std::uint64_t end = kOrderLogHeaderBytes;  // where the next batch goes
    // Batches start at multiples of this: 4096 when the log is open with O_DIRECT (where the file
    // system allows it), else 1.
    std::uint32_t align = 1;
    std::uint64_t checkpoint_bytes = std::uint64_t{64} << 20;
    std::vector<Inode*> files;  // written through it since the last checkpoint, a reference each
    unsigned batches_since_checkpoint = 0;
    unsigned short_runs = 0;     // forced checkpoints in a row after a single batch each
    unsigned paused_epochs = 0;  // epochs sent the direct way while paused
    // Batches written since the last checkpoint: a replay would write them, so nothing may reach
    // the files outside the log until the next checkpoint.
    bool active() const noexcept { return batches_since_checkpoint > 0; }
  } log;
};

// Under o.mu (`lk`): a program thread waits on o.cv until `pred` (counted, so that an inline
// epoch, which needs no order thread, wakes nobody when nobody else waits).
template <class Pred>
void program_wait(OrderState& o, std::unique_lock<std::mutex>& lk, Pred pred) {
  ++o.program_waiters;
  o.cv.wait(lk, pred);
  --o.program_waiters;
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
// or -1 with errno; `iov` holds the bytes it writes (for KernelObserver, which is told of a
// write whose end was found). Sets `end` to the end of what was written when `end_from_offset`
// (the descriptor's offset moved there), else to the file's size. Returns bytes or -errno.
template <class KernelWrite>
ssize_t append_through_locked(Inode& ino, int fd, std::uint64_t& end, bool end_from_offset, const struct iovec* iov,
                              int iovcnt, KernelWrite kernel_write) {
  if (ino.cache_used) {
    if (const int err = close_file_locked(ino)) note_error(ino, err);  // reported by the next fsync/close
    reopen_locked(ino, fd, "O_APPEND write");
  }
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  const std::uint64_t t = seen ? seen->before() : 0;
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
    if (seen && end >= static_cast<std::uint64_t>(r))
      seen->wrote(ino.dev, ino.ino, end - static_cast<std::uint64_t>(r), iov, iovcnt, r, t);
  }
  return r;
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

// Calls fn(fd, description) for every routed slot (chunks that exist only).
template <class Fn>
void for_each_slot(Fn&& fn) {
  const int used = g_top_used.load(std::memory_order_acquire);  // pairs with slot_of's raise
  for (int top = 0; top < used; ++top) {
    Chunk* c = g_top[top].load(std::memory_order_acquire);
    if (!c) continue;
    for (int i = 0; i < (1 << kChunkBits); ++i) {
      Description* d = c->slot[i].load(std::memory_order_acquire);
      if (d) fn((top << kChunkBits) | i, d);
    }
  }
}

}  // namespace tai::posix::detail

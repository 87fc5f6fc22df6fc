// src/posix/layer.hpp - internals of tai/posix.hpp shared with its tests (and, later, with the
// preload library): the settings, the process-wide controller's lifecycle, the descriptor table.
//
// Structures (see tai/posix.hpp for what they serve):
//  * Inode: one per routed file (st_dev, st_ino): the tai::File, the logical size, the order
//    of submissions across threads, errors of writes not yet reported. Found through the
//    registry (a mutex and a map, touched by open and the last close only).
//  * Description: one per successful open (the kernel's "open file description"): access mode,
//    O_APPEND, the file offset; reference counted. Table slots point to descriptions, so an
//    alias made by dup (preload) is one more slot pointing to the same description.
//  * FdTable: a two-level array of atomic pointers indexed by descriptor (1024 slots per chunk,
//    65536 chunk pointers: descriptors below 2^26), chunks made on first use and never freed,
//    so a lookup is two acquire loads and never takes a lock. Installing a description is a
//    release store (or exchange); removal an acq_rel exchange. A caller takes a reference with
//    increment-if-nonzero and then checks that the slot still holds the description (else it
//    drops it and retries): descriptions are type-stable (recycled through a pool, never freed)
//    so that this increment is always on valid memory, and a description recycled for another
//    descriptor fails the re-check.
//
// Ordering across threads. The controller keeps the order of one thread's submissions; two
// threads' submissions go through separate queues and may be admitted in either order. POSIX
// wants a read to see a write that happened before it in any thread, so each inode remembers
// the last asynchronous operation (write, fsync_async, barrier) and the thread that submitted
// it; a submission from another thread first waits for that one to finish (under the inode's
// mutex). A single-threaded program never waits; threads taking turns on one file wait for the
// other's last write to reach the cache (one round of the controller).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tai/controller.hpp"
#include "tai/file.hpp"
#include "tai/posix.hpp"
#include "tai/receipt.hpp"

namespace tai::posix::detail {

/// TAI_FSYNC_INLINE (order mode): who makes an epoch durable when no other epoch is in flight.
enum class InlineEpochs {
  automatic,  ///< the fsync's own thread when the program waited for most recent epochs at once
  never,      ///< always the order thread (the fsync returns at once)
  always,     ///< always the fsync's own thread (as in full mode, with the order mode's rule)
};

/// For the crash simulator's rig (test/posix_layer/fsync_order_crash_test.cpp): told of what
/// the layer hands the kernel itself for write-through files in the order fsync mode, behind
/// every engine: their writes
/// (on the program's descriptor while the gate is open, on the order thread's own when it applies
/// held writes) and their syncs (a file's fsync or fdatasync, a file system's syncfs), so that
/// the rig logs them beside the engine's requests and judges every crash state of both. O_APPEND
/// writes, which go to the kernel in every mode, are reported too (append_through_locked; not
/// one whose end of file cannot be read back after it). Not reported: truncations (the rig logs
/// its own), and the `full` mode's own kernel calls (writev and fsync of a file that cannot
/// leave write-through, the exit's fsync of every file), which the rig never makes.
/// Called on whichever thread makes the call, under the inode's mutex for writes: every member
/// must be thread-safe and must not call into the layer.
class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  /// A clock reading taken before the system call, handed back with its report.
  virtual std::uint64_t before() noexcept = 0;
  /// A write of file (dev, ino) at `pos` from `iov` (one or more segments, in file order);
  /// `result`: the bytes written, or -errno.
  virtual void wrote(dev_t dev, ino_t ino, std::uint64_t pos, const struct iovec* iov, int iovcnt,
                     std::int64_t result, std::uint64_t before) noexcept = 0;
  /// An fdatasync (data_only) or fsync of file (dev, ino); `err`: 0 or errno.
  virtual void synced(dev_t dev, ino_t ino, bool data_only, int err, std::uint64_t before) noexcept = 0;
  /// A syncfs of file system `dev`; `err`: 0 or errno.
  virtual void synced_fs(dev_t dev, int err, std::uint64_t before) noexcept = 0;
};

/// How the layer's controller is made.
struct Settings {
  ControllerOptions options;
  bool trivial_tree = false;  ///< BTreeTrivial instead of BTreeDefault
  bool log = false;           ///< TAI_LOG
  /// TAI_START_WRITEBACK: after this many bytes written to a file, ask the kernel to start
  /// writing the file's dirty pages to the device (sync_file_range(SYNC_FILE_RANGE_WRITE), on a
  /// worker), so that the program's fsync finds little left. Each range is started once, from
  /// the end of the last start to the file's size: overwrites below it wait for the fsync. 0:
  /// never (the kernel starts only at fsync or after its dirty timeout). 1 MiB: a program that syncs every megabyte or few (the
  /// serial image loop at fsync every 30 writes 0.8 MiB between syncs) gets its device write
  /// started before the fsync; at 8 MiB it never did, and the fsync waited for all of it.
  std::uint64_t start_writeback_bytes = std::uint64_t{1} << 20;
  /// TAI_WRITE_BEHIND_MS: a routed write reaches the kernel (written back, not synced) at most
  /// this many milliseconds after it was made, whatever the program does next: what a SIGKILL
  /// can take is bounded by it. 0: off (the cache keeps data until close, fsync, exit or the
  /// controller's own idle and quota write-back).
  std::uint64_t write_behind_ms = 200;
  /// TAI_SYNC_THROUGH: a file whose fsync (or fdatasync) finds at most this many bytes written
  /// since its previous one (or its open) is synced often for what it writes: from then on its
  /// writes, reads and syncs go straight to the kernel on the program's descriptor, as libc's
  /// would ("write-through"), until more than this many bytes are written between two of its
  /// syncs, when it goes back to the cache. Between a write and the fsync that follows it the
  /// cache has nothing to hide (the fsync waits for the write-back and the device either way),
  /// and each fsync through the workers costs a wake-up and a round trip. The path is
  /// remembered, so a file made again under the same name (SQLite's rollback journal, made and
  /// deleted by every transaction) starts write-through, and so does every file (see
  /// files_start_through). Under order a write-through file's writes still pass the epoch
  /// gate, and the order thread writes and syncs them on its own descriptor. 0: off (every
  /// routed file is cached).
  std::uint64_t sync_through_bytes = std::uint64_t{1} << 20;
  /// A file routed for writing starts write-through, as a file synced after little data, and
  /// goes to the cache once more than sync_through_bytes are written between two of its syncs.
  /// Most files a short process writes are small and synced at once or appended to (git's
  /// objects, lock files and logs, journals): through the cache each would cost a worker's
  /// hand-off per sync, and the process a controller (workers, engines, the keeper) that a
  /// process whose files all stay write-through never makes. A large output pays its first
  /// sync_through_bytes as libc's writes. false keeps every file cached from its first write
  /// (tests of the cache), but under order a file routed empty (made, or truncated by its open)
  /// starts write-through all the same.
  bool files_start_through = true;
  /// TAI_FSYNC (tai/posix.hpp).
  FsyncMode fsync_mode = FsyncMode::full;
  /// TAI_FSYNC_INLINE (order only). An epoch the program waits for right after its fsync (at a
  /// close, unlink, rename or truncation: SQLite's rollback journal, git's objects before their
  /// refs) gains nothing from the order thread and pays two hand-offs to it and back. When no
  /// epoch is in flight and the program waited so for most of the recent epochs, the fsync
  /// makes its epoch durable itself, as a full one would (see inline_wanted_locked).
  InlineEpochs fsync_inline = InlineEpochs::automatic;
  /// TAI_FSYNC_MAX_DELAY in milliseconds (order only).
  std::uint64_t fsync_max_delay_ms = 1000;
  /// Bytes held back behind epochs not yet durable before writes and fsyncs wait (order only).
  /// 0: the weak quota.
  std::uint64_t order_queue_bytes = 0;
  /// TAI_FSYNC_LOG_DIR (order only): the directory of the log of epochs, where the order thread
  /// writes every epoch queued behind the device in one batch with one device sync, instead of
  /// a sync of every file per epoch (order_log.hpp). "": no log. Whatever the mode, a layer
  /// given a directory first replays the logs that processes which died left there.
  std::string fsync_log_dir;
  /// TAI_FSYNC_LOG_CHECKPOINT: bytes of log after which the files are synced and the log voided.
  std::uint64_t fsync_log_checkpoint_bytes = std::uint64_t{64} << 20;
  /// Benchmark only (TAI_FSYNC_BENCHMARK_ONLY_NONE=1): every fsync of the program is a no-op,
  /// the unsafe upper bound the benchmark compares `order` with. Not a user setting.
  bool fsync_none_for_benchmark = false;
  /// Called once on the new controller before any file is opened (tests add engines here).
  std::function<void(Controller&)> setup;
  /// Tests only: see KernelObserver. Null: nothing is reported (an acquire load per call).
  std::shared_ptr<KernelObserver> kernel_observer;
};

/// The settings the environment asks for (TAI_ENGINE, TAI_TREE, TAI_WORKERS, TAI_QUOTA,
/// TAI_START_WRITEBACK, TAI_WRITE_BEHIND_MS, TAI_SYNC_THROUGH, TAI_FLUSH_IDLE_MS, TAI_WRITE_AROUND, TAI_CLEAN_BUDGET,
/// TAI_HUGE_PAGES, TAI_FSYNC, TAI_FSYNC_INLINE, TAI_FSYNC_MAX_DELAY, TAI_FSYNC_LOG_DIR, TAI_FSYNC_LOG_CHECKPOINT, TAI_LOG); a malformed
/// value adds a line to `warnings` and keeps its default.
Settings settings_from_env(std::vector<std::string>* warnings);

/// The process-wide controller, made on first call (thread-safe); nullptr when it cannot be made
/// or after the exit handler shut it down.
Controller* controller();

/// For the preload library (dup, dup2, dup3, fcntl F_DUPFD): makes `newfd`, which the caller
/// has just made a kernel duplicate of `oldfd`, an alias of it in the layer: both share one
/// description (one offset, one O_APPEND flag, one cache). Whatever `newfd` had is dropped
/// first (dup2 onto a routed descriptor: that one's last close writes it back; its error is
/// returned as errno, 0 if none). Returns -1 when `oldfd` is not routed (nothing to do).
int alias_descriptor(int oldfd, int newfd);

/// For the preload library: the layer forgets `fd` without closing the kernel descriptor (the
/// caller closes it: close_range, closefrom, a dup2 over it). The file's write-back error, if
/// this was its last descriptor, is returned (errno), 0 if none.
int forget_descriptor(int fd);

// --- for the preload library (src/preload) ---------------------------------------------------

/// Routes `fd`, which the caller has just opened with `flags` (the program's own open, done by
/// the caller), when the layer's rules allow (tai/posix.hpp, "What is routed"); its offset
/// starts at `offset`. nullptr when
/// routed, else why not (a static string). `st`, when given, is the caller's fstat of `fd`
/// made just now (the layer's own is then spared). Thread-safe.
const char* route_descriptor(int fd, int flags, const char* path, std::uint64_t offset = 0,
                             const struct stat* st = nullptr);

/// Takes the file of routed `fd` out of the layer: its cached writes go to the kernel (written
/// back, not synced), every routed descriptor of it gets its offset handed to the kernel and
/// becomes a plain descriptor. For calls the layer does not do itself (mmap, sendfile, a dup onto
/// a standard stream, ...): slower from then on, never wrong. Returns the write-back's error
/// (errno), 0 if none or when `fd` is not routed. A write of another thread racing with this
/// call on the same file may fail with EBADF. Thread-safe.
int unroute_file(int fd);

/// unroute_file for the routed file (dev, ino), if any (truncate by path). errno or 0.
int unroute_inode(dev_t dev, ino_t ino);

/// unroute_file for every routed descriptor (inheritable_only: only those without FD_CLOEXEC,
/// which a child process inherits). Before fork (every descriptor: the child shares their
/// offsets) and posix_spawn/system/popen (the inheritable ones). Returns the first error.
int unroute_all(bool inheritable_only);

/// Every routed file's cached writes to the kernel (no fsync): before a child process or another
/// process may read the files (posix_spawn, fcntl locks, sync). 0 or the first error (errno).
int write_back_all(bool drain_order = true);

/// For the ends of a program that skip the exit handler (_exit, exit_group, abort, a fatal
/// signal's default action): every routed file's cached writes to the kernel (no fsync), done by
/// the layer's keeper thread while the caller waits at most `timeout_ms` (a signal handler may
/// have interrupted a thread that holds a lock the write-back needs: then the caller proceeds
/// without it). Uses only atomics and futex calls on the caller's side: callable from a signal
/// handler. 0 when done (or nothing to do), ETIMEDOUT when the wait ran out.
int write_back_for_end(int timeout_ms) noexcept;

/// After write_back_for_end ran out of time: the age in ms of the oldest routed write not known
/// to be handed to the kernel (stamped for the write-behind deadline: the one the keeper's
/// current write-back took over, or the oldest since). -1 when no such write is stamped (nothing
/// cached dirty, or TAI_WRITE_BEHIND_MS=0, which stamps nothing). Lock-free: callable from a
/// signal handler while the keeper is stuck.
std::int64_t unwritten_age_ms() noexcept;

/// The cached writes of routed file (dev, ino), if any, to the kernel (no fsync), after every
/// earlier write of any thread to it: before a call that changes the file's metadata (times,
/// mode, owner, name, links), which a later write-back would otherwise overwrite (mtime) or
/// which another process may act on. errno or 0.
int write_back_inode(dev_t dev, ino_t ino);
/// write_back_inode for routed descriptor fd's file; 0 when fd is not routed.
int write_back_fd(int fd);

/// In the child of fork(): the controller's threads did not survive; every call passes through
/// to libc from now on, and the exit handler does nothing. Async-signal-safe.
void disable_in_forked_child() noexcept;

/// Before execve: what the exit handler does (everything written back, offsets handed to the
/// kernel, the controller shut down), without exiting. Returns the failures.
std::vector<std::string> shutdown_for_exec();

/// TAI_FSYNC=order: waits until every epoch closed so far (every fsync made before the call) is
/// durable and every write held back behind them is in the cache, for a call that goes to the kernel behind the layer and must not overtake them
/// (unlink, rename, link, truncation, an fsync of a descriptor that is not routed). errno of a
/// failed epoch (left for the next fsync to report as well), else 0. Returns at once in `full`.
int order_point();
/// TAI_FSYNC=order: after the kernel changed a name (a rename, link or unlink; `path` as given to
/// it, relative to `dirfd`, AT_FDCWD or a directory's descriptor), its directory is synced with the
/// open epoch's files, so that no write of a later epoch reaches the device before the name change
/// is durable. Call it after order_point() and the successful call. Takes a descriptor of the
/// directory (held until that epoch is durable; past 64 directories in one epoch, one per file
/// system, synced whole); when the directory cannot be opened, a sync() now. Nothing in `full`.
/// Thread-safe.
void order_name_changed(int dirfd, const char* path) noexcept;
/// TAI_FSYNC=order: the name change `call(arg)` (the kernel's rename, link or unlink; it must not
/// enter the layer) made after every closed epoch is durable and with the epochs' gate held open
/// (the state's mutex), so that no epoch can close between the change and its note; on success
/// the directories of `path` and `path2` (relative to dirfd, dirfd2; null: none) are noted as by
/// order_name_changed. Returns call's result, errno as it left it. In `full`: call(arg) alone.
/// Thread-safe.
using NameCall = int (*)(void* arg);
int order_name_change(NameCall call, void* arg, int dirfd, const char* path, int dirfd2, const char* path2) noexcept;
/// TAI_FSYNC=order, for a program's own fsync of a directory (SQLite syncs the directory after
/// making its journal): take the ticket before the fsync, and after it succeeded pass it with the
/// descriptor; the open epoch then does not sync that directory again for the name changes noted
/// before the ticket. Nothing in `full` (ticket 0). Thread-safe.
std::uint64_t order_names_ticket() noexcept;
void order_directory_synced(int fd, std::uint64_t ticket) noexcept;
/// For tests: the order thread leaves every epoch's directories unsynced (breaks the rule for
/// name changes). false: the normal order.
void skip_directory_syncs_for_testing(bool skip);
/// For tests: the next `count` syncs of an epoch's directories fail with `err` instead of
/// reaching the kernel. 0: none.
void fail_directory_syncs_for_testing(unsigned count, int err);
/// For tests: the fsyncs of directories the layer made (order_name_changed) and that succeeded.
std::uint64_t kernel_directory_syncs_for_testing() noexcept;
/// For tests: while held, the order thread starts no epoch (a device that does not answer).
void hold_order_thread_for_testing(bool hold);
/// For tests only, breaks the order rule: with `every` = n > 0 the order thread makes no engine
/// sync of the files of every n-th epoch (epochs n, 2n, ...: their writes still go to the cache,
/// and the next epoch starts at once), so a later epoch's writes can reach the device before an
/// earlier epoch's are durable. 0: the normal order.
void skip_epoch_syncs_for_testing(unsigned every);
/// For tests: the next `count` times the order thread notes a file it wrote into (the list of
/// files its epoch must sync) fail as if memory had run out. The write is applied, the epoch
/// fails with ENOMEM (reported by the next fsync, close or sync_now), nothing is left counted as
/// held. 0: none.
void fail_order_bookkeeping_for_testing(unsigned count);
/// For tests: each write of the order log's batches takes `ms` milliseconds longer (a slow
/// device while a batch is in flight). 0: no delay.
void delay_order_log_writes_for_testing(unsigned ms);
/// For tests: the fsync/fdatasync system calls the layer made itself and that succeeded (a
/// write-through file's syncs, which reach no engine).
std::uint64_t kernel_syncs_for_testing() noexcept;
/// The same of the layer's syncfs calls (order mode: a file system synced for closed files).
std::uint64_t kernel_syncfs_for_testing() noexcept;
/// For tests, order mode: closes of a write-through file that waited only for the epochs closed
/// before them (the file's own writes since left to the open epoch), not for every write.
std::uint64_t closes_through_for_testing() noexcept;

/// Whether the controller is made (it is made at the first file that goes to the cache, or by
/// controller(); a process whose routed files all stay write-through never makes one).
bool controller_made_for_testing() noexcept;
/// Every routed write durable (tai::posix::sync_now()): errno or 0.
int sync_all();
/// The benchmark-only `none` mode (Settings::fsync_none_for_benchmark) is on.
bool fsync_is_noop() noexcept;
/// Lock-free (two atomic loads, callable from anywhere): true when no routed file can have
/// bytes in the cache (every routed file is write-through, or none is routed) and, in the
/// order fsync mode, its gate is open (no epoch waits to be durable, no write is held back).
/// Then write_back_all, write_back_inode and write_back_fd have nothing to do and cached_size
/// never raises the kernel's size, so the preload library skips them (and
/// their signal masking) for record locks, stat and metadata calls. A write another thread
/// makes concurrently may make it false the next moment, as it may land after the caller's
/// call with libc.
bool nothing_cached() noexcept;

/// The logical size (cached writes included) of routed file (dev, ino); false when not routed.
bool cached_size(dev_t dev, ino_t ino, std::uint64_t* size);

/// forget_descriptor for every routed descriptor in [first, last] (close_range, closefrom).
int forget_range(unsigned first, unsigned last);

/// For tests: shuts the current controller down (every routed descriptor must be closed first)
/// and makes the next one, at its first use, with `settings` instead of the environment's.
/// Returns the shutdown's report. Not thread-safe with any other call of the layer.
ShutdownReport restart_for_testing(const Settings& settings);

/// For tests: what the exit handler does, without exiting: writes every routed file back,
/// shuts the controller down, and returns the failures (empty: nothing lost). Afterwards routed
/// descriptors are served by libc; restart_for_testing makes the layer usable again.
std::vector<std::string> shutdown_for_testing();

}  // namespace tai::posix::detail

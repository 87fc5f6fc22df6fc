// tai/posix.hpp - the drop-in layer: POSIX file calls over one process-wide tai::Controller.
//
//     #include "tai/posix.hpp"
//     namespace io = tai::posix;                       // or: using tai::posix::write; ...
//     int fd = io::open("out.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
//     io::write(fd, buf, n);                          // returns once the bytes are copied
//     if (io::fsync(fd) != 0) perror("fsync");        // durable, or the write-back's error
//     io::close(fd);
//
// Every function has the signature and the meaning of its POSIX namesake (Linux's where POSIX
// leaves a choice): int descriptors, -1 or (ssize_t)-1 with errno on failure. A program that
// swaps `::write` for `tai::posix::write` cannot tell the difference except by the clock: the
// write returns once the bytes are copied into TAI's cache, and TAI's workers write them back
// while the program computes, so that its fsync finds little left to do.
//
// What is routed through TAI. open/openat/creat open the file with ::open themselves, so the
// descriptor returned is a real kernel descriptor of that file (select, fcntl, fd arithmetic,
// fstat through libc all work). A descriptor is *routed* (its reads and writes go through TAI's
// cache) when it names a regular file opened with write access (O_WRONLY or O_RDWR) without
// O_DIRECT, O_SYNC, O_DSYNC or O_PATH, or when it names a file that an earlier routed
// descriptor still has open (so that its reads see the cached writes). Everything else passes
// straight to libc: read-only opens, directories, pipes, ttys, /dev/*, sockets, and any
// descriptor the layer did not open (unknown descriptors). The layer keeps a table from
// descriptor to its state; descriptors at or above 2^26 are never routed.
//
// TAI's own descriptor. TAI's engine does not use the program's descriptor: the layer opens the
// same file again through /proc/self/fd/<fd> (the same inode even if the path was renamed or
// unlinked meanwhile; the path itself when /proc is not mounted) with O_RDWR (O_WRONLY when the
// file cannot be read), never with O_CREAT, O_EXCL, O_TRUNC or O_APPEND: the program's ::open
// did the creating, the exclusive check and the truncation, once, with the program's flags and
// umask; O_APPEND is done by the layer (below). Every routed descriptor of one file (same
// st_dev and st_ino) shares one tai::File, one cache and one size. TAI's own descriptors are
// O_CLOEXEC. The program's descriptor is not used for data: its kernel file offset stays where
// open left it (the layer keeps the offset of a routed descriptor itself); a program that hands
// a routed descriptor to libc calls behind the layer's back (::write, ::dup, a child process)
// must call tai::posix::fsync(fd) first (which writes the cache back) and should not mix the
// two. (The preload library, which sees every call, takes care of this for unmodified programs.)
// TAI's own descriptors (the engine's reopened files, eventfds, io_uring rings) are O_CLOEXEC and
// live at high numbers (from half the RLIMIT_NOFILE soft limit, at least 256), so the program's
// next open gets the number it would get without TAI.
//
// POSIX meaning, kept:
//  * write/pwrite/writev return once the bytes are copied; read/pread/readv see every earlier
//    write of the process on that file, whichever thread or routed descriptor made it.
//  * lseek(SEEK_END) and fstat's st_size use the size with cached writes included.
//    O_APPEND is the kernel's: a write on a descriptor opened with O_APPEND goes through to the
//    kernel on the program's descriptor (whose O_APPEND makes the kernel take the end of file
//    atomically, also against other processes appending to the file), after the file's cache
//    was written back and emptied if anything went through it since the last append (so the
//    append lands after every earlier write, and no cached copy of the appended bytes goes
//    stale). Two threads, two descriptors or two processes appending never overlap or lose a
//    record. A file that is only appended to never touches the cache (a write and an lseek per
//    call). As on Linux, pwrite on an O_APPEND descriptor appends (the offset is ignored).
//  * ftruncate drops cached bytes beyond the new size (and grows with zeros).
//  * fsync/fdatasync return when every earlier write of the file is durable, with the error
//    (EIO, ENOSPC, ...) of any write-back that failed since the last fsync; after a failed
//    engine sync every later fsync fails until the data was written again (tai::File::fsync).
//    close returns such an error too (it waits for the file's write-back, not for an fsync).
//  * errno is set only by a failing call, never by the layer's own work on a successful one.
//  * Bad input gets the kernel's errno: EBADF (closed, unknown or not opened for it), EINVAL
//    (negative offsets, offset + count past the largest off_t, bad whence or iovcnt), EFAULT
//    (a null buffer with count > 0 where the kernel would copy bytes: a read at or past end of
//    file returns 0 as the kernel does), EISDIR, ENOENT, EACCES, EEXIST (from the program's
//    ::open). EOVERFLOW: on 64-bit Linux none of these calls gives it for a
//    regular file (off_t is 64 bits) and neither does the layer; test/posix_layer/errno_test.cpp
//    compares every case with the same call on a plain kernel descriptor.
//    Writes past the file system's largest file size fail at write-back (EFBIG from the next
//    fsync/close) rather than at the write.
//  Known differences: a write-back error is reported once per file (to the next fsync or close
//  of any of its descriptors), where Linux reports it to every open file description; a
//  read-only descriptor opened *before* the file was routed is not routed and reads what the
//  kernel has (the cached writes only after their write-back); an invalid non-null buffer
//  crashes in the layer's memcpy where the kernel would return EFAULT.
//
// The controller. Made at the first call that needs it (thread-safe), configured from the
// environment:
//   TAI_ENGINE   engine name (default "auto": posix for buffered files, uring, else libaio,
//                else posix, for O_DIRECT ones; see ControllerOptions::engine). An engine that
//                cannot open a file leaves that file unrouted (TAI_LOG says why).
//   TAI_TREE     default | trivial (BTreeDefault or BTreeTrivial, i.e. no cache)
//   TAI_WORKERS  worker threads (default 2)
//   TAI_QUOTA    weak,strict in bytes, suffixes K, M, G allowed (default 256M,512M)
//   TAI_START_WRITEBACK  bytes (suffixes K, M, G; default 8M; 0: off): after this many bytes
//                written to a file, a worker asks the kernel to start writing the file's dirty
//                pages to the device (sync_file_range(SYNC_FILE_RANGE_WRITE)), so that the device
//                works while the program computes and its fsync finds little left to write
//   TAI_WRITE_BEHIND_MS  milliseconds (default 200; 0: off): a routed write reaches the kernel
//                (written back, not synced) at most about this long after it was made, whatever
//                the program does meanwhile. A keeper thread, started with the controller (at
//                the first file that goes to the cache), does it; it sleeps on a futex while
//                nothing is dirty. This bounds what a SIGKILL (or an _exit with this header
//                alone) can take, in time; the strict quota bounds it in bytes.
//   TAI_FSYNC    full | order (default full). full: fsync/fdatasync return when the file's
//                earlier writes are durable (POSIX). order: fsync/fdatasync return at once and
//                close an epoch across every routed file of the process; no write made after
//                it reaches the engine before every write made before it was written and made
//                durable (a sync of every file those writes touched). Writes inside one epoch
//                may be merged and reordered. After a crash the files hold the state of one of
//                the program's fsyncs plus possibly some writes of the epoch after it: what a
//                journal, a log or a database needs to recover; not that a returned fsync's
//                data is on the device. close and exit wait until every fsync made before them
//                is durable, as under full (a write never fsynced stays in the open epoch, in
//                the kernel like after a plain close, and the next fsync of any routed file
//                makes it durable; a close of a file still cached makes every write durable);
//                sync_now() and (preload) sync/syncfs wait for every write to be durable;
//                unlink, rename, link, a truncation, and an fsync of a
//                descriptor that is not routed (a directory) wait until the earlier epochs are
//                durable; the directory of a name changed (renamed, linked, unlinked, or a file
//                made) is synced with the epoch the change was made in (the preload's calls and
//                tai::posix::rename and the others below). Epochs waiting behind a slow device are bounded by the weak quota in
//                bytes and by TAI_FSYNC_MAX_DELAY: an fsync that finds more queued, or the
//                oldest waiting epoch older than the delay, waits for its own epoch like a full
//                one (counted in fsync_order_stats().backpressure). A failed write-back or sync
//                of an epoch is returned by the next fsync, close or sync_now, and no later
//                epoch is written before it was returned.
//   TAI_FSYNC_INLINE  order only: auto (default) | never | always. Who makes an epoch durable
//                when no other is in flight: the order thread (the fsync returns at once), or
//                the fsync's own thread (it returns when the epoch is durable, as in full mode;
//                the rule is the same). auto: the fsync's thread when the program waited (a
//                close, unlink, rename, truncation) for more than half of the last (up to 8)
//                probes (epochs left to the order thread, one in 32 once inline) after
//                working less than half their sync time: it would wait for this one too, and
//                the order thread would only add two hand-offs (SQLite's rollback journal,
//                git). A close that closes an epoch (a cached file's) makes it durable itself
//                unless never.
//   TAI_FSYNC_MAX_DELAY  order only: 1s (default), 250ms, or milliseconds (a plain number).
//   TAI_FSYNC_LOG_DIR  order only, an absolute directory: the epochs queued behind the device are
//                written to a log there in batches, one device sync per batch, then to their
//                files unsynced; a checkpoint (every file synced, the log voided) comes before
//                anything is written outside the log's protection, and before close, exit and
//                sync_now return. After a crash the files are as the contract says only once
//                the log is replayed, which the next process routing a file with the same
//                directory does before its first open (see docs/drop-in.md).
//   TAI_FSYNC_LOG_CHECKPOINT  bytes of log between checkpoints (default 64M).
//   TAI_LOG      1: one line on stderr per decision (configuration, routed or not and why,
//                errors found at close and at exit)
// A malformed value is reported on stderr and its default used.
// Exit: an atexit handler registered when libtai is loaded (so it runs after every handler and
// static destructor registered later, i.e. after the program's own) shuts the controller down:
// every routed file's data is written back and closed. If anything could not be written back it
// prints what on stderr and, because an atexit handler cannot change the exit status that exit()
// was given, flushes stdio and ends the process with _exit(75) (EX_TEMPFAIL): the failure is
// visible in the status even when the program exited 0. After that, routed descriptors are
// served by libc directly (their data is already in the kernel). _exit(), quick_exit() and fatal
// signals skip the handler: cached data not yet written back (younger than the write-behind
// deadline) is then lost, as it is from a crash; call fsync (or wait) first. The preload library
// covers those ends (src/preload/interpose.c) with detail::write_back_for_end.
// fork: the controller's threads do not survive fork(); a child must not use routed descriptors
// (the preload library handles fork; with this header call wait() on every routed descriptor
// before forking and use libc in the child).
//
// Thread-safety: every function is safe from any number of threads at once, as its POSIX
// namesake. Closing a descriptor while another thread uses it is the program's race, as in
// POSIX, but never a crash: the other call either finishes on the file or fails with EBADF.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

#include "tai/receipt.hpp"

namespace tai::posix {

int open(const char* path, int flags, mode_t mode = 0);
int openat(int dirfd, const char* path, int flags, mode_t mode = 0);
int creat(const char* path, mode_t mode);
int close(int fd);
/// Name changes, as their POSIX namesakes (the kernel does them; errno is the kernel's). Under
/// `order` each waits until every earlier epoch is durable, and the directory of each name it
/// changes is synced with the open epoch's files: no write of a later epoch reaches the device
/// before the name change is durable (a program that writes a file, fsyncs it and renames it over
/// the old one finds, after a crash, the old file or the whole new one, and never a later
/// epoch's writes without the rename). Under `full` they are the plain calls. The preload
/// library does the same for the program's rename, renameat, renameat2, link, linkat, unlink,
/// unlinkat, remove, mkdir, mkdirat, rmdir, symlink and symlinkat (for names under
/// TAI_PRELOAD_PATHS).
/// Thread-safe, as the kernel's calls are.
int rename(const char* from, const char* to);
int renameat(int fromdir, const char* from, int todir, const char* to);
int link(const char* from, const char* to);
int unlink(const char* path);
int unlinkat(int dirfd, const char* path, int flags);
/// Names made and directories removed, as above: a directory made under `order` is in its parent
/// durably with the epoch of the mkdir (a file the program then makes in it and fsyncs is found
/// after a crash, by its path, whenever a later epoch's writes are), and so is a symbolic link
/// or a removal (rmdir, and unlinkat with AT_REMOVEDIR).
int mkdir(const char* path, mode_t mode);
int mkdirat(int dirfd, const char* path, mode_t mode);
int rmdir(const char* path);
int symlink(const char* target, const char* linkpath);
int symlinkat(const char* target, int newdirfd, const char* linkpath);

ssize_t read(int fd, void* buf, std::size_t count);
ssize_t write(int fd, const void* buf, std::size_t count);
ssize_t pread(int fd, void* buf, std::size_t count, off_t offset);
ssize_t pwrite(int fd, const void* buf, std::size_t count, off_t offset);
ssize_t readv(int fd, const struct iovec* iov, int iovcnt);
ssize_t writev(int fd, const struct iovec* iov, int iovcnt);
off_t lseek(int fd, off_t offset, int whence);

int fsync(int fd);
int fdatasync(int fd);
int ftruncate(int fd, off_t length);
int fstat(int fd, struct stat* st);

// --- extras for code willing to change a line -----------------------------------------------

/// Starts an fsync of `fd` and returns at once. The receipt finishes when every write made
/// before the call is durable (ok()) or with the error fsync would have returned. A descriptor
/// that is not routed is fsynced with ::fsync on a TAI worker (its failure fails the receipt with
/// ECANCELED: the errno does not travel; use fsync for it). EBADF (on the receipt) for a
/// descriptor that is not open. The fsync is also remembered for wait(fd). The receipt carries
/// the tree's write-back errors; the error of an uncached write that failed (BTreeTrivial, or a
/// write the strict quota sent straight to the engine) is reported by the next fsync, close or
/// wait instead.
Receipt fsync_async(int fd);
/// Waits for the last fsync_async(fd) or barrier(fd) and for every earlier write of `fd` to have
/// finished (taken by the cache, or written to the kernel when it went uncached). 0, or -1 with
/// errno: that fsync's or barrier's error, else the error of an uncached write that failed (then
/// reported once: the next fsync does not report it again). Not routed: 0 (EBADF if not open).
int wait(int fd);
/// An ordering barrier (DESIGN "Ordering barrier"): returns at once; no write made after it
/// becomes durable before every write made before it. 0, or -1 with EBADF. On a descriptor that
/// is not routed: ::fdatasync (the kernel gives no cheaper way to order).
int barrier(int fd);

/// The fsync modes (TAI_FSYNC; see the comment at the top).
enum class FsyncMode { full, order };
/// Switches the mode for the whole process (call it while no other thread writes through the
/// layer). Either switch first makes every routed write durable (sync_now()); its error, if any,
/// is returned (-1 and errno) and the mode is switched anyway. Under `order`, fsync_async waits
/// for every epoch before it returns its (finished) receipt, and barrier(fd) closes an epoch.
int set_fsync_mode(FsyncMode mode);
FsyncMode fsync_mode() noexcept;
/// Every routed write made before the call is durable when it returns 0; else -1 with the
/// errno of a write-back or sync that failed (under `order`, also one of an earlier epoch).
int sync_now();
/// Counters of the `order` mode since the process started.
struct FsyncOrderStats {
  unsigned long long epochs_closed = 0;    ///< fsyncs that closed an epoch
  unsigned long long epochs_durable = 0;   ///< epochs written and synced
  unsigned long long deferred_writes = 0;  ///< writes held back behind an epoch not yet durable
  unsigned long long backpressure = 0;     ///< fsyncs and writes that waited for the device
  unsigned long long max_queued_bytes = 0; ///< the most bytes held back at once
  /// With TAI_FSYNC_LOG_DIR: epochs made durable by the log, the log's batches (one device sync
  /// each, however many epochs they hold), and checkpoints (the files synced, the log voided).
  unsigned long long epochs_logged = 0;
  unsigned long long log_batches = 0;
  unsigned long long log_checkpoints = 0;
  /// Memory for the held-back writes and the log's batches: blocks taken from the allocator,
  /// and blocks reused from the layer's pool (in steady state the second grows, the first not).
  unsigned long long copy_blocks_allocated = 0;
  unsigned long long copy_blocks_reused = 0;
  /// Epochs made durable by the thread that closed them (TAI_FSYNC_INLINE), not the order thread.
  unsigned long long epochs_inline = 0;
  /// System calls that wrote held-back writes of write-through files to the kernel: a run of
  /// them, each starting where the last ended, is one pwritev across every epoch of a log batch.
  unsigned long long through_writes = 0;
  /// The longest time, in nanoseconds, from an epoch's fsync to its being durable, of every
  /// epoch: an exit or close that waits for the epochs before it takes about this much at most.
  unsigned long long max_lag_ns = 0;
  /// The same of the epochs whose fsync returned before they were durable (not held by
  /// back-pressure): what TAI_FSYNC_MAX_DELAY (set_fsync_max_delay) bounds.
  unsigned long long max_early_lag_ns = 0;
};
FsyncOrderStats fsync_order_stats() noexcept;

/// True when `fd` is routed through TAI (for tests, logging and the preload library).
bool routed(int fd) noexcept;

}  // namespace tai::posix

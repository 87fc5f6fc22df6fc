/* src/preload/bridge.h - the C calls the preload library's interposers (interpose.c, plain C so
 * that it can define libc's own names with libc's own declarations) make into TAI's drop-in
 * layer (bridge.cpp, C++). Every function is thread-safe. Unless said otherwise they return
 * like their POSIX namesakes: -1 (or (ssize_t)-1) with errno on failure. */
#ifndef TAI_PRELOAD_BRIDGE_H
#define TAI_PRELOAD_BRIDGE_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Non-zero on a thread TAI started (its calls go straight to libc). */
int tai_bridge_on_tai_thread(void);
/* Non-zero when fd is one of TAI's own descriptors (engine files, eventfds, rings). */
int tai_bridge_is_own_fd(int fd);
/* The next of TAI's own descriptors >= from, or -1. */
int tai_bridge_next_own_fd(int from);
/* Non-zero when fd is routed through the layer. */
int tai_bridge_routed(int fd);

/* Routes fd (just opened with flags, its canonical path `path`). 1 when routed; 0 with *why set
 * (a static string) when not. */
int tai_bridge_route(int fd, int flags, const char* path, const char** why);
/* The same, with the descriptor's offset starting at `offset` (a descriptor inherited across
 * exec: the kernel offset the previous image handed back). */
int tai_bridge_route_at(int fd, int flags, const char* path, int64_t offset, const char** why);
/* tai_bridge_route_at at offset 0 with the caller's fstat of fd (st, made just now). */
int tai_bridge_route_stat(int fd, int flags, const char* path, const struct stat* st, const char** why);

ssize_t tai_bridge_read(int fd, void* buf, size_t n);
ssize_t tai_bridge_write(int fd, const void* buf, size_t n);
ssize_t tai_bridge_pread(int fd, void* buf, size_t n, off_t off);
ssize_t tai_bridge_pwrite(int fd, const void* buf, size_t n, off_t off);
ssize_t tai_bridge_readv(int fd, const struct iovec* iov, int iovcnt);
ssize_t tai_bridge_writev(int fd, const struct iovec* iov, int iovcnt);
ssize_t tai_bridge_preadv(int fd, const struct iovec* iov, int iovcnt, off_t off);
ssize_t tai_bridge_pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off);
off_t tai_bridge_lseek(int fd, off_t off, int whence);
int tai_bridge_fsync(int fd);
int tai_bridge_fdatasync(int fd);
int tai_bridge_ftruncate(int fd, off_t length);
int tai_bridge_fstat(int fd, struct stat* st);
int tai_bridge_close(int fd);

/* dup, dup2, dup3, F_DUPFD: newfd (already a kernel duplicate of oldfd) shares oldfd's routing.
 * Returns the write-back error (errno) of what newfd had, 0 if none. */
int tai_bridge_alias(int oldfd, int newfd);
/* The kernel closed fd behind the layer (dup2 over it, close_range): forget it. errno or 0. */
int tai_bridge_forget(int fd);
/* forget for every routed fd in [first, last]. errno or 0. */
int tai_bridge_forget_range(unsigned first, unsigned last);
/* The file of fd leaves the layer (written back, offsets handed to the kernel). errno or 0. */
int tai_bridge_unroute_file(int fd);
/* unroute_file for every routed fd (only those without FD_CLOEXEC when inheritable_only). */
int tai_bridge_unroute_all(int inheritable_only);
/* unroute_file for the routed file (dev, ino), if any (truncate by path). */
int tai_bridge_unroute_inode(dev_t dev, ino_t ino);
/* Every routed file's cached writes to the kernel (no fsync). errno or 0. */
int tai_bridge_write_back_all(void);
/* Every routed file's cached writes to the kernel (no fsync) for an end of the program that skips
 * the exit handler (_exit, abort, a fatal signal): done by the layer's keeper thread while the
 * caller waits at most timeout_ms. Only atomics and futex calls on the caller's side: callable
 * from a signal handler. 0, or ETIMEDOUT when the wait ran out. */
int tai_bridge_write_back_for_end(int timeout_ms);
/* After that ran out of time: the age in ms of the oldest routed write not known to be handed to
 * the kernel, -1 when none is stamped (TAI_WRITE_BEHIND_MS=0 stamps none). Lock-free. */
long long tai_bridge_unwritten_age_ms(void);
/* The cached writes of the routed file (dev, ino), or of routed fd's file, to the kernel (no
 * fsync), after every earlier write to it: before a metadata call on it. errno or 0 (0 also
 * when it is not routed). */
int tai_bridge_write_back_inode(dev_t dev, ino_t ino);
int tai_bridge_write_back_fd(int fd);
/* TAI_FSYNC=order: waits until every fsync made so far is durable (before a call that goes to
 * the kernel and must not overtake them: unlink, rename, link, an O_TRUNC open, an fsync of a
 * descriptor that is not routed). Returns at once in full mode. */
void tai_bridge_order_point(void);
/* TAI_FSYNC=order: the name change `call(arg)` (the real rename, link or unlink) made with the
 * epochs' gate held open, and the directories of `path` and `path2` (NULL: none) synced with the
 * open epoch's files (tai::posix::detail::order_name_change). The call's result, errno kept. */
int tai_bridge_order_name_change(int (*call)(void*), void* arg, int dirfd, const char* path, int dirfd2,
                                 const char* path2);
/* TAI_FSYNC=order, around the program's fsync of a directory: the ticket before it, then, after
 * it succeeded, the directory's name changes noted before the ticket need no sync of the epoch. */
unsigned long long tai_bridge_order_names_ticket(void);
void tai_bridge_order_directory_synced(int fd, unsigned long long ticket);
/* Non-zero under TAI_FSYNC=order (one atomic load). */
int tai_bridge_fsync_order(void);
/* Non-zero when no routed file can have bytes in TAI's cache (every one is write-through, or
 * none is routed) and the fsync mode is full: write-backs and size fixes have nothing to do.
 * Two atomic loads, no lock: callable outside the layer's signal mask. */
int tai_bridge_nothing_cached(void);
/* Non-zero in the benchmark-only mode where every fsync is a no-op. */
int tai_bridge_fsync_noop(void);
/* Every routed write durable (order), or written back to the kernel (full): before sync/syncfs.
 * errno or 0. */
int tai_bridge_sync_now(void);
/* In the child of fork(): pass everything through from now on. */
void tai_bridge_forked_child(void);
/* Before execve: write everything back and shut the layer down. Failures go to stderr. */
void tai_bridge_before_exec(void);
/* If (dev, ino) is routed, raises *size to its logical size (cached writes included). */
void tai_bridge_fix_size(dev_t dev, ino_t ino, int64_t* size);

#ifdef __cplusplus
}
#endif

#endif

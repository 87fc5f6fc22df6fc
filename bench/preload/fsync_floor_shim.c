/* bench/preload/fsync_floor_shim.c - the `floor` of fsync_modes_bench.sh: what the waits of the
 * order mode's contract cost by themselves, on plain kernel I/O, with the ordering free.
 *
 * The contract of TAI_FSYNC=order lets an fsync return at once, but makes a program wait for the
 * device, for the writes made before its last fsync, at a close of a written file, at a name
 * change (unlink, rename, link), at a truncation (truncate, ftruncate, an O_TRUNC open), at an
 * fsync of a regular file outside the layer, and at exit. This preloaded shim does exactly those
 * waits and nothing else: every fsync/fdatasync of a regular file is a no-op that counts an
 * epoch; at each of those calls, every regular file written before the last fsync and not synced
 * since is synced (fdatasync, the least that makes written bytes durable), all of them, one after
 * the other, and at exit the same. Writes made after the last fsync wait for nothing (the open
 * epoch: a close leaves them in the page cache, as under `full`). A directory's fsync stays real (the order mode makes it).
 * What it leaves out is what keeps the crash states ordered, the epochs' own syncs or log: so no
 * implementation of the contract can be faster than this on the same device, short of
 * overlapping those waits with the program's work. Benchmark only: it is not crash-safe.
 *
 * Built by fsync_modes_bench.sh: cc -O2 -shared -fPIC -o fsync_floor_shim.so fsync_floor_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 65536

/* Per descriptor: 0 not known yet, 1 a regular file with nothing unsynced, 2 a regular file
 * written since its last sync, 3 not a regular file. Reset at close and at open. */
static _Atomic unsigned char g_state[MAX_FD];
/* Per descriptor in state 2: the epoch of its first write since its last sync. The epoch: the
 * fsyncs of regular files so far. */
static _Atomic unsigned g_first_write[MAX_FD];
static _Atomic unsigned g_epoch;
static _Atomic int g_max_fd = -1;

#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, ...)                        \
  static ret (*real_##name)(__VA_ARGS__);                   \
  static void load_##name(void) {                           \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); \
  }

DECLARE_REAL(ssize_t, write, int, const void*, size_t)
DECLARE_REAL(ssize_t, pwrite, int, const void*, size_t, off_t)
DECLARE_REAL(ssize_t, pwrite64, int, const void*, size_t, off64_t)
DECLARE_REAL(ssize_t, writev, int, const struct iovec*, int)
DECLARE_REAL(ssize_t, pwritev, int, const struct iovec*, int, off_t)
DECLARE_REAL(ssize_t, pwritev64, int, const struct iovec*, int, off64_t)
DECLARE_REAL(int, fsync, int)
DECLARE_REAL(int, fdatasync, int)
DECLARE_REAL(int, close, int)
DECLARE_REAL(int, unlink, const char*)
DECLARE_REAL(int, unlinkat, int, const char*, int)
DECLARE_REAL(int, remove, const char*)
DECLARE_REAL(int, rename, const char*, const char*)
DECLARE_REAL(int, renameat, int, const char*, int, const char*)
DECLARE_REAL(int, renameat2, int, const char*, int, const char*, unsigned)
DECLARE_REAL(int, link, const char*, const char*)
DECLARE_REAL(int, linkat, int, const char*, int, const char*, int)
DECLARE_REAL(int, truncate, const char*, off_t)
DECLARE_REAL(int, ftruncate, int, off_t)
DECLARE_REAL(int, open, const char*, int, ...)
DECLARE_REAL(int, open64, const char*, int, ...)
DECLARE_REAL(int, openat, int, const char*, int, ...)
DECLARE_REAL(int, openat64, int, const char*, int, ...)

static int is_regular(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static void note_written(int fd, ssize_t r) {
  if (r <= 0 || fd < 0 || fd >= MAX_FD) return;
  unsigned char s = atomic_load_explicit(&g_state[fd], memory_order_relaxed);
  if (s == 0) s = is_regular(fd) ? 1 : 3;
  if (s == 3) {
    atomic_store_explicit(&g_state[fd], 3, memory_order_relaxed);
    return;
  }
  if (s != 2) atomic_store_explicit(&g_first_write[fd], atomic_load(&g_epoch), memory_order_relaxed);
  atomic_store_explicit(&g_state[fd], 2, memory_order_relaxed);
  int m = atomic_load_explicit(&g_max_fd, memory_order_relaxed);
  while (fd > m && !atomic_compare_exchange_weak(&g_max_fd, &m, fd)) {
  }
}

/* The contract's wait: every regular file written before the last fsync (a closed epoch) and not
 * synced since made durable. */
static void sync_written(void) {
  load_fdatasync();
  const unsigned epoch = atomic_load(&g_epoch);
  const int m = atomic_load(&g_max_fd);
  for (int fd = 0; fd <= m; ++fd) {
    if (atomic_load(&g_state[fd]) != 2 || atomic_load(&g_first_write[fd]) >= epoch) continue;
    unsigned char two = 2;
    if (atomic_compare_exchange_strong(&g_state[fd], &two, 1)) (void)REAL(fdatasync)(fd);
  }
}

static void forget(int fd) {
  if (fd >= 0 && fd < MAX_FD) atomic_store_explicit(&g_state[fd], 0, memory_order_relaxed);
}

__attribute__((destructor)) static void at_exit_sync(void) { sync_written(); }

ssize_t write(int fd, const void* b, size_t n) {
  load_write();
  const ssize_t r = REAL(write)(fd, b, n);
  note_written(fd, r);
  return r;
}
ssize_t pwrite(int fd, const void* b, size_t n, off_t o) {
  load_pwrite();
  const ssize_t r = REAL(pwrite)(fd, b, n, o);
  note_written(fd, r);
  return r;
}
ssize_t pwrite64(int fd, const void* b, size_t n, off64_t o) {
  load_pwrite64();
  const ssize_t r = REAL(pwrite64)(fd, b, n, o);
  note_written(fd, r);
  return r;
}
ssize_t writev(int fd, const struct iovec* v, int c) {
  load_writev();
  const ssize_t r = REAL(writev)(fd, v, c);
  note_written(fd, r);
  return r;
}
ssize_t pwritev(int fd, const struct iovec* v, int c, off_t o) {
  load_pwritev();
  const ssize_t r = REAL(pwritev)(fd, v, c, o);
  note_written(fd, r);
  return r;
}
ssize_t pwritev64(int fd, const struct iovec* v, int c, off64_t o) {
  load_pwritev64();
  const ssize_t r = REAL(pwritev64)(fd, v, c, o);
  note_written(fd, r);
  return r;
}

/* A regular file's sync closes an epoch: no wait. Outside the layer the order mode would wait
 * for the epochs before it and then sync: here, the files written so far. */
static int floor_sync_of(int fd, int data_only) {
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    load_fsync();
    load_fdatasync();
    return data_only ? REAL(fdatasync)(fd) : REAL(fsync)(fd);
  }
  atomic_fetch_add(&g_epoch, 1);
  return 0;
}
int fsync(int fd) { return floor_sync_of(fd, 0); }
int fdatasync(int fd) { return floor_sync_of(fd, 1); }

int close(int fd) {
  load_close();
  if (fd >= 0 && fd < MAX_FD && atomic_load_explicit(&g_state[fd], memory_order_relaxed) == 2) sync_written();
  forget(fd);
  return REAL(close)(fd);
}

int unlink(const char* p) {
  load_unlink();
  sync_written();
  return REAL(unlink)(p);
}
int unlinkat(int d, const char* p, int f) {
  load_unlinkat();
  sync_written();
  return REAL(unlinkat)(d, p, f);
}
int remove(const char* p) {
  load_remove();
  sync_written();
  return REAL(remove)(p);
}
int rename(const char* a, const char* b) {
  load_rename();
  sync_written();
  return REAL(rename)(a, b);
}
int renameat(int da, const char* a, int db, const char* b) {
  load_renameat();
  sync_written();
  return REAL(renameat)(da, a, db, b);
}
int renameat2(int da, const char* a, int db, const char* b, unsigned f) {
  load_renameat2();
  sync_written();
  return REAL(renameat2)(da, a, db, b, f);
}
int link(const char* a, const char* b) {
  load_link();
  sync_written();
  return REAL(link)(a, b);
}
int linkat(int da, const char* a, int db, const char* b, int f) {
  load_linkat();
  sync_written();
  return REAL(linkat)(da, a, db, b, f);
}
int truncate(const char* p, off_t n) {
  load_truncate();
  sync_written();
  return REAL(truncate)(p, n);
}
int ftruncate(int fd, off_t n) {
  load_ftruncate();
  sync_written();
  return REAL(ftruncate)(fd, n);
}

/* The mode argument of an open call: present only with O_CREAT or O_TMPFILE. */
#define TAKE_MODE(flags, mode)                         \
  mode_t mode = 0;                                     \
  if ((flags) & (O_CREAT | __O_TMPFILE)) {             \
    va_list ap;                                        \
    va_start(ap, flags);                               \
    mode = va_arg(ap, mode_t);                         \
    va_end(ap);                                        \
  }

/* An O_TRUNC open truncates a file in the kernel: the order mode waits for the epochs first. */
#define OPEN_WRAPPER(name)                             \
  int name(const char* p, int flags, ...) {            \
    TAKE_MODE(flags, mode)                             \
    load_##name();                                     \
    if (flags & O_TRUNC) sync_written();               \
    const int fd = REAL(name)(p, flags, mode);         \
    forget(fd);                                        \
    return fd;                                         \
  }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(name)                           \
  int name(int dir, const char* p, int flags, ...) {   \
    TAKE_MODE(flags, mode)                             \
    load_##name();                                     \
    if (flags & O_TRUNC) sync_written();               \
    const int fd = REAL(name)(dir, p, flags, mode);    \
    forget(fd);                                        \
    return fd;                                         \
  }
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

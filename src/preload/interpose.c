/* libtai-preload.so: routes an unmodified program's file I/O on chosen paths through TAI.
 *
 *     LD_PRELOAD=libtai-preload.so TAI_PRELOAD_PATHS=/data/out:/scratch ./program
 *
 * Plain C on purpose: this file defines libc's own names (open, write, fstat, ...) and must see
 * libc's own declarations of them; the work is done by TAI's drop-in layer through bridge.h.
 *
 * What is routed. A descriptor the program opens (open, openat, creat and their fortified and
 * 64-bit names, fopen, fdopen) whose file, resolved through /proc/self/fd (so relative paths,
 * openat(dirfd, ...) and symlinks all resolve to the real path), lies under one of the prefixes
 * of TAI_PRELOAD_PATHS (colon-separated, each resolved with realpath at start-up), and which the
 * drop-in layer takes: a regular file opened for writing without O_DIRECT, O_SYNC, O_DSYNC or
 * O_PATH, or opened read-only while the file is routed already. Everything else goes to libc
 * untouched (dlsym(RTLD_NEXT)). Descriptors 0, 1 and 2 are routed only when the program itself
 * duplicates a routed descriptor onto them (dd does, for of=): glibc's stdin, stdout and stderr
 * read and write through an internal read/write that no preload can see, so the stream is then
 * replaced by one over the layer (see adopt_std_stream). Descriptors inherited from the parent
 * process are not routed: the parent may still use the same open file description (its offset).
 *
 * What passes through, and how. A call on a routed descriptor that the layer does not do itself
 * first takes the file out of the layer (its cached writes go to the kernel, its offset is handed
 * to the kernel descriptor) and then goes to libc: mmap, sendfile, copy_file_range, splice,
 * fallocate, preadv2/pwritev2 with flags, fcntl(F_SETFL) changing O_APPEND or O_DIRECT,
 * truncate by path. fcntl record locks, sync_file_range, posix_fadvise and sync
 * write every routed file's cache to the kernel first and keep the routing. fork takes every
 * routed file out of the layer first (parent and child share the descriptors' offsets, so both
 * must use the kernel's), and the child passes every call through to libc; vfork is done as fork
 * (a wrapper cannot return twice on one stack). posix_spawn, system and popen take the
 * inheritable (non-close-on-exec) routed files out first; execve and its relatives write
 * everything back and shut the layer down first. close_range and closefrom never close TAI's own
 * descriptors. Slower from then on, never wrong.
 *
 * The ends of a program. What write() acknowledged reaches the kernel however the program
 * ends, SIGKILL aside: exit through the layer's atexit handler, exec through before_exec, and
 * _exit, _Exit, exit_group, quick_exit, abort and the fatal signals the program leaves at
 * SIG_DFL through the section "the ends of a program" at the end of this file (which also
 * virtualises sigaction and signal: the program's own handlers run behind a trampoline). SIGKILL takes at most what is younger
 * than the layer's write-behind deadline (TAI_WRITE_BEHIND_MS).
 *
 * O_APPEND stays the kernel's atomic append across processes: the layer writes an O_APPEND
 * descriptor's data through to the kernel (tai/posix.hpp). Metadata calls (times, mode, owner,
 * rename, link) on a routed file first hand its cache to the kernel, so that a later write-back
 * cannot undo them (section "metadata" at the end).
 *
 * stdio. glibc's FILE writes through an internal write, so fopen and fdopen of a routed file
 * return a FILE made with fopencookie over the routed descriptor; fileno() of it answers the
 * descriptor (the cookie stream's _fileno, which glibc uses for nothing else on such a stream).
 * freopen is not interposed: a stream reopened onto a routed path is a plain one, and that file
 * should then not also be written through a routed descriptor. A standard stream replaced by a cookie stream
 * (adopt_std_stream) whose original the program still fcloses through a saved pointer gets the
 * replacement flushed first (fclose).
 *
 * Re-entrancy and signals. The layer itself calls libc (through these same names, as does TAI's
 * engine): a thread-local depth makes every call made from inside the layer, and every call of a
 * thread TAI started, go straight to libc. A signal that finds its thread inside the layer waits
 * until the thread leaves it (enter_layer, program_trampoline), and TAI's own threads block
 * signals for good, so a handler always runs on a program thread outside the layer: its write goes through the layer in order and never waits for a lock
 * its own thread holds. Initialisation (reading the environment) happens once, at load or at the
 * first call, whichever comes first; a call made while it runs passes through.
 *
 * TAI_PRELOAD_LOG=1 prints on stderr what was routed, what passed through and why.
 * The drop-in layer's own variables apply: TAI_ENGINE, TAI_TREE, TAI_WORKERS, TAI_QUOTA, TAI_LOG.
 */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE /* the fortified inline open() would clash with the definition here */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#include "src/preload/bridge.h"

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------------------------ */
/* The next definitions (libc's), found once. A race finds the same pointer twice: harmless.  */

#define REAL(fn)                                                                        \
  __extension__({                                                                                    \
    static _Atomic(void*) real_##fn##_ptr = NULL;                                       \
    void* real_##fn##_f = atomic_load_explicit(&real_##fn##_ptr, memory_order_relaxed); \
    if (!real_##fn##_f) {                                                               \
      real_##fn##_f = dlsym(RTLD_NEXT, #fn);                                            \
      atomic_store_explicit(&real_##fn##_ptr, real_##fn##_f, memory_order_relaxed);     \
    }                                                                                   \
    (__typeof__(&fn))real_##fn##_f;                                                     \
  })

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                      */

enum { kUninit = 0, kInitializing = 1, kInactive = 2, kActive = 3 };
static _Atomic int g_state = kUninit;
static int g_log = 0;
#define kMaxPrefixes 32
static char g_prefix[kMaxPrefixes][PATH_MAX];
static size_t g_prefix_len[kMaxPrefixes];
static int g_prefixes = 0;

/* Descriptors the program that exec'd this one routed (TAI_PRELOAD_ADOPT), routed again at the
 * first call that may route (not in the constructor: TAI's own static objects in this library
 * may not be made yet then). */
#define kAdoptMax 64
#define kExclusiveMax 65536
static int g_adopt[kAdoptMax];
static int g_adopt_count = 0;
static _Atomic int g_adopt_pending = 0;
static void adopt_inherited(void);

/* Depth of calls into the layer on this thread (initial-exec: no allocation on first use, safe
 * in signal handlers). */
static __thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;

/* Inside the layer a thread may hold its locks (and the allocator's): a signal handler that
 * wrote to a routed descriptor there would wait for itself, or its write would go to the kernel
 * behind the cache. So no program handler runs on a thread inside the layer; a handler that was
 * due runs right after, outside the layer, and its write goes through the layer in order like
 * any other. Calls the layer makes to libc itself see t_depth > 0 and go straight to libc.
 *
 * How, by default ("lazy", as a kernel disables interrupts lazily): entering the layer only
 * counts the depth, no system call. Every handler the program installs is installed behind a
 * trampoline (program_trampoline, in the section on ends): a signal that finds its thread inside
 * the layer is not handled there; the trampoline queues it again for the same thread with its
 * own siginfo (rt_tgsigqueueinfo), and returns into the layer with every signal blocked, the
 * program's mask saved; leaving the layer restores that mask, and the kernel delivers the signal
 * outside. A routed call costs no rt_sigprocmask until a signal actually arrives during one (an
 * SQLite transaction makes about seventeen). TAI_PRELOAD_SIGNAL_MASK=eager blocks the catchable
 * signals on every entry and restores them on the way out instead (two rt_sigprocmask calls per
 * routed call): for a program that installs handlers with an inline system call instruction,
 * which this library cannot see, and under ThreadSanitizer, whose runtime delivers signals at
 * points of its own with a copy of the context, so that the trampoline cannot change the mask
 * the layer resumes with. */
#include <signal.h>
#include <ucontext.h>
#if defined(__SANITIZE_THREAD__)
enum { kLazyMaskBuilt = 0 };
#else
enum { kLazyMaskBuilt = 1 };
#endif
static int g_eager_mask = !kLazyMaskBuilt; /* set by init_once, before the state is published */
/* The program's mask while this thread is inside the layer with signals blocked (t_masked). */
static __thread sigset_t t_saved_mask __attribute__((tls_model("initial-exec")));
static __thread int t_masked __attribute__((tls_model("initial-exec"))) = 0;
/* The order matters: in the eager mode signals are blocked before the depth says "inside", and
 * the depth says "outside" before they are unblocked. A handler that runs in between the other
 * way round would see depth 1 and send its write to the kernel behind the layer. The signal
 * fences keep the compiler from moving the depth's store across the layer's code: a handler on
 * this thread reads it. */
static inline void enter_layer(void) {
  if (t_depth == 0 && g_eager_mask) {
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved);
    t_saved_mask = saved;
    t_masked = 1;
  }
  ++t_depth;
  atomic_signal_fence(memory_order_seq_cst);
}
static inline void leave_layer(void) {
  atomic_signal_fence(memory_order_seq_cst);
  if (--t_depth != 0) return;
  atomic_signal_fence(memory_order_seq_cst);
  /* Signals are blocked whenever t_masked is set, so nothing changes it between the test and the
   * restore; a signal deferred by the trampoline is delivered by this call. */
  if (t_masked) {
    t_masked = 0;
    pthread_sigmask(SIG_SETMASK, &t_saved_mask, NULL);
  }
}
#define ENTER() enter_layer()
#define LEAVE() leave_layer()

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
  if (!g_log) return;
  const int saved = errno;
  char line[PATH_MAX + 256];
  int n = snprintf(line, sizeof line, "tai-preload: ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t (*w)(int, const void*, size_t) = REAL(write);
  if (w) (void)w(2, line, (size_t)n);
  errno = saved;
}

static void install_end_handlers(void);
static long (*g_libc_syscall)(long, ...);
static int (*g_libc_sigaction)(int, const struct sigaction*, struct sigaction*);

static void init_once(void) {
  int expected = kUninit;
  if (!atomic_compare_exchange_strong(&g_state, &expected, kInitializing)) return;
  const int saved = errno;
  enter_layer();
  const char* log = getenv("TAI_PRELOAD_LOG");
  g_log = log && *log && strcmp(log, "0") != 0;
  const char* paths = getenv("TAI_PRELOAD_PATHS");
  int state = kInactive;
  if (paths && *paths) {
    const char* p = paths;
    while (*p) {
      const char* end = strchr(p, ':');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      if (len > 0 && len < PATH_MAX) {
        char raw[PATH_MAX];
        memcpy(raw, p, len);
        raw[len] = '\0';
        if (g_prefixes == kMaxPrefixes) {
          say("TAI_PRELOAD_PATHS: more than %d prefixes; '%s' and later ones ignored", kMaxPrefixes, raw);
          break;
        }
        char* slot = g_prefix[g_prefixes];
        if (!realpath(raw, slot)) {
          say("TAI_PRELOAD_PATHS: '%s' does not resolve (%s); ignored", raw, strerror(errno));
        } else {
          size_t n = strlen(slot);
          while (n > 1 && slot[n - 1] == '/') slot[--n] = '\0';
          g_prefix_len[g_prefixes++] = n;
          say("routing files under %s", slot);
        }
      }
      if (!end) break;
      p = end + 1;
    }
    if (g_prefixes > 0) state = kActive;
  }
  if (state == kInactive) say("TAI_PRELOAD_PATHS names no directory: every call passes through to libc");
  const char* adopt = getenv("TAI_PRELOAD_ADOPT");
  if (adopt && state == kActive) {
    for (const char* q = adopt; *q && g_adopt_count < kAdoptMax;) {
      char* end = NULL;
      const long fd = strtol(q, &end, 10);
      if (end == q) break;
      if (fd >= 0 && fd < kExclusiveMax) g_adopt[g_adopt_count++] = (int)fd;
      q = *end == ',' ? end + 1 : end;
    }
    atomic_store_explicit(&g_adopt_pending, g_adopt_count > 0, memory_order_release);
  }
  if (adopt) unsetenv("TAI_PRELOAD_ADOPT"); /* for this image only, not its children */
  const char* mask = getenv("TAI_PRELOAD_SIGNAL_MASK");
  if (mask && *mask) {
    if (strcmp(mask, "eager") == 0) g_eager_mask = 1;
    else if (strcmp(mask, "lazy") == 0) {
      if (!kLazyMaskBuilt) say("TAI_PRELOAD_SIGNAL_MASK=lazy: not in a ThreadSanitizer build; eager");
    } else
      say("TAI_PRELOAD_SIGNAL_MASK='%s' is neither lazy nor eager: %s", mask, g_eager_mask ? "eager" : "lazy");
  }
  if (state == kActive) {
    g_libc_syscall = REAL(syscall);
    g_libc_sigaction = REAL(sigaction);
    install_end_handlers();
  }
  leave_layer();
  errno = saved;
  atomic_store_explicit(&g_state, state, memory_order_release);
}

__attribute__((constructor)) static void tai_preload_load(void) { init_once(); }

/* Whether this call may look at routing at all: the library is active, the thread is not inside
 * the layer (or a signal handler interrupting it) and is not one of TAI's own threads. */
static inline int engaged(void) {
  int s = atomic_load_explicit(&g_state, memory_order_acquire);
  if (s == kUninit) {
    init_once();
    s = atomic_load_explicit(&g_state, memory_order_acquire);
  }
  if (s != kActive || t_depth > 0) return 0;
  if (tai_bridge_on_tai_thread()) return 0;
  if (__builtin_expect(atomic_load_explicit(&g_adopt_pending, memory_order_relaxed), 0)) adopt_inherited();
  return 1;
}

/* Set once the first descriptor is routed: until then (a program that never touches the listed
 * paths, or not yet) a call on a descriptor costs two loads before it goes to libc. */
static _Atomic int g_routed_ever = 0;

/* engaged() and fd routed. */
static inline int routed(int fd) {
  if (!atomic_load_explicit(&g_routed_ever, memory_order_relaxed) &&
      !atomic_load_explicit(&g_adopt_pending, memory_order_relaxed))
    return 0;
  return fd >= 0 && engaged() && tai_bridge_routed(fd);
}

/* TAI_FSYNC=order: a call that goes to the kernel behind the layer (unlink, rename, link, an
 * O_TRUNC open, an fsync of a descriptor that is not routed, such as a directory) waits until
 * every fsync made before it is durable, so that it never overtakes an epoch. Nothing before
 * the first routed file. */
static void order_point(void);


static void order_point(void) {
  if (!atomic_load_explicit(&g_routed_ever, memory_order_relaxed) || !engaged() || !tai_bridge_fsync_order()) return;
  /* In the order mode nothing is cached only while the gate is open: no epoch to wait for. */
  if (tai_bridge_nothing_cached()) return;
  ENTER();
  tai_bridge_order_point();
  LEAVE();
}

static int under_prefix(const char* path);
static int fd_path(int fd, char* out, size_t size);

/* Whether the name `path` (relative to dirfd) is under TAI_PRELOAD_PATHS: its directory made
 * canonical (realpath, as /proc gives the routed files' paths), then the prefix test of routing.
 * Names elsewhere are not the order mode's, as writes to files there are not. */
static int name_under_prefix(int dirfd, const char* path) {
  size_t end = strlen(path);
  while (end > 1 && path[end - 1] == '/') --end;
  size_t slash = end;
  while (slash > 0 && path[slash - 1] != '/') --slash;
  char dir[PATH_MAX], canon[PATH_MAX], name[PATH_MAX];
  size_t used = 0;
  if (path[0] != '/') {
    if (dirfd == AT_FDCWD ? getcwd(dir, sizeof dir) == NULL : !fd_path(dirfd, dir, sizeof dir)) return 0;
    used = strlen(dir);
    if (used + 1 >= sizeof dir) return 0;
    dir[used++] = '/';
  }
  if (used + slash + 2 > sizeof dir) return 0;
  memcpy(dir + used, path, slash);
  used += slash;
  if (used == 0) dir[used++] = '/';
  dir[used] = '\0';
  if (realpath(dir, canon) == NULL) return 0;
  if (snprintf(name, sizeof name, "%s/%.*s", canon, (int)(end - slash), path + slash) >= (int)sizeof name) return 0;
  return under_prefix(name);
}

/* A name change of the program's (rename, link, unlink), made by the real call. */
/* A name made or removed (mkdir, symlink, rmdir) as well. */
enum name_call_kind { NC_RENAMEAT2, NC_LINKAT, NC_UNLINKAT, NC_REMOVE, NC_MKDIRAT, NC_RMDIR, NC_SYMLINKAT };
struct name_call {
  enum name_call_kind kind;
  int dirfd, dirfd2;
  const char *path, *path2; /* NC_SYMLINKAT: path is the link's name, path2 its target */
  int flags;                /* NC_MKDIRAT: the mode */
};
static int do_name_call(void* arg) {
  const struct name_call* c = (const struct name_call*)arg;
  switch (c->kind) {
    case NC_RENAMEAT2:
      return c->flags ? REAL(renameat2)(c->dirfd, c->path, c->dirfd2, c->path2, (unsigned)c->flags)
                      : REAL(renameat)(c->dirfd, c->path, c->dirfd2, c->path2);
    case NC_LINKAT: return REAL(linkat)(c->dirfd, c->path, c->dirfd2, c->path2, c->flags);
    case NC_UNLINKAT: return REAL(unlinkat)(c->dirfd, c->path, c->flags);
    case NC_REMOVE: return REAL(remove)(c->path);
    case NC_MKDIRAT: return REAL(mkdirat)(c->dirfd, c->path, (mode_t)c->flags);
    case NC_RMDIR: return REAL(rmdir)(c->path);
    case NC_SYMLINKAT: return REAL(symlinkat)(c->path2, c->dirfd, c->path);
  }
  errno = EINVAL;
  return -1;
}

/* The name change `c`, whose names are `path` (relative to dirfd) and `path2` (NULL: none) and
 * which already waited for the earlier epochs (order_point): under TAI_FSYNC=order, for names
 * under TAI_PRELOAD_PATHS, made by the layer with the epochs' gate held open (no epoch can close
 * between the kernel's change and its note), and the directories of the names synced with the
 * open epoch, so that no later epoch's writes reach the device before the change is durable.
 * Returns the call's result with its errno. */
static int ordered_name_call(struct name_call* c, int dirfd, const char* path, int dirfd2, const char* path2) {
  if (path == NULL || !atomic_load_explicit(&g_routed_ever, memory_order_relaxed) || !engaged() ||
      !tai_bridge_fsync_order())
    return do_name_call(c); /* a null name: the kernel's EFAULT */
  const int saved = errno;
  const int first = name_under_prefix(dirfd, path), second = path2 && name_under_prefix(dirfd2, path2);
  errno = saved;
  if (!first && !second) return do_name_call(c);
  if (c->kind == NC_MKDIRAT || c->kind == NC_SYMLINKAT) {
    /* A name that exists: the kernel's answer is EEXIST, which changes nothing; given now
     * without waiting for the earlier epochs (`mkdir -p`, Python's makedirs and git make the
     * directories they need on every write, and most exist). */
    struct stat st;
    if (REAL(fstatat)(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      errno = EEXIST;
      return -1;
    }
    errno = saved;
  }
  ENTER();
  const int r = tai_bridge_order_name_change(do_name_call, c, dirfd, first ? path : NULL, dirfd2, second ? path2 : NULL);
  LEAVE();
  return r;
}

/* Before an fsync of a descriptor that is not routed. A regular file's fsync waits for the epochs
 * before it: its writes went straight to the kernel, and the program expects them durable after
 * the routed writes it synced first. A directory's fsync does not: it makes names durable, and the
 * name changes that could break the order (unlink, rename, link, truncate) already waited for the
 * epochs before them; what else it can make durable (a new, empty name) the kernel may commit at
 * any moment anyway, so it adds no crash state the order mode did not already allow. SQLite syncs
 * the directory after creating each rollback journal: this keeps that sync from waiting for the
 * journal's own epoch. */
/* Returns 1 for a directory under the order mode, with *ticket set for order_directory_synced
 * (the program's own sync of it makes the epoch's sync of it needless). */
static int order_point_before_sync(int fd, unsigned long long* ticket) {
  if (!atomic_load_explicit(&g_routed_ever, memory_order_relaxed) || !engaged() || !tai_bridge_fsync_order()) return 0;
  struct stat st;
  if (REAL(fstat)(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ENTER();
    *ticket = tai_bridge_order_names_ticket();
    LEAVE();
    return 1;
  }
  order_point();
  return 0;
}
static void order_directory_synced(int fd, unsigned long long ticket) {
  ENTER();
  tai_bridge_order_directory_synced(fd, ticket);
  LEAVE();
}

static int under_prefix(const char* path) {
  for (int i = 0; i < g_prefixes; ++i) {
    const size_t n = g_prefix_len[i];
    if (strncmp(path, g_prefix[i], n) == 0 && (path[n] == '/' || path[n] == '\0' || n == 1)) return 1;
  }
  return 0;
}

/* The canonical path of an open descriptor, from /proc/self/fd. */
static int fd_path(int fd, char* out, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, out, size - 1);
  if (n < 0) return 0;
  out[n] = '\0';
  return 1;
}

/* Descriptors under a prefix that this process opened itself since its last fork (and their
 * duplicates): no other process shares their open file description (offset), so a program this
 * process execs may route them too (see before_exec and adopt_inherited). */
static _Atomic unsigned char g_exclusive[kExclusiveMax];
static void set_exclusive(int fd, unsigned char on) {
  if (fd >= 0 && fd < kExclusiveMax) atomic_store_explicit(&g_exclusive[fd], on, memory_order_relaxed);
}
static unsigned char is_exclusive(int fd) {
  return fd >= 0 && fd < kExclusiveMax ? atomic_load_explicit(&g_exclusive[fd], memory_order_relaxed) : 0;
}
static void clear_exclusive_all(int inheritable_only) {
  for (int fd = 0; fd < kExclusiveMax; ++fd) {
    if (!atomic_load_explicit(&g_exclusive[fd], memory_order_relaxed)) continue;
    if (inheritable_only) {
      const int fl = REAL(fcntl)(fd, F_GETFD);
      if (fl >= 0 && (fl & FD_CLOEXEC)) continue;
    }
    set_exclusive(fd, 0);
  }
}

static void adopt_std_stream(int fd);

/* Routes fd (under a prefix, path resolved) at `offset`; logs what happened. */
static void route_fd(int fd, int flags, const char* path, int64_t offset) {
  const char* why = NULL;
  ENTER();
  const int ok = tai_bridge_route_at(fd, flags, path, offset, &why);
  LEAVE();
  if (ok) atomic_store_explicit(&g_routed_ever, 1, memory_order_relaxed);
  if (ok)
    say("routed %s (fd %d)", path, fd);
  else
    say("passed %s (fd %d): %s", path, fd, why ? why : "refused");
}

/* After a successful open by the program: route it when its file is under a prefix. */
static int after_open(int fd, int flags) {
  if (fd < 3 || !engaged()) return fd;
  const int saved = errno;
  /* Only regular files are routed, and fstat costs far less than the /proc lookup of the path:
   * a directory (SQLite opens the database's to sync it, once per transaction) or a device stops
   * here. The layer takes this fstat instead of making its own. */
  struct stat st;
  if (REAL(fstat)(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    errno = saved;
    return fd;
  }
  char path[PATH_MAX];
  if (!fd_path(fd, path, sizeof path) || path[0] != '/') {
    errno = saved;
    return fd;
  }
  if (!under_prefix(path)) {
    errno = saved;
    return fd;
  }
  set_exclusive(fd, 1);
  const char* why = NULL;
  ENTER();
  const int ok = tai_bridge_route_stat(fd, flags, path, &st, &why);
  LEAVE();
  if (ok) atomic_store_explicit(&g_routed_ever, 1, memory_order_relaxed);
  if (ok)
    say("routed %s (fd %d)", path, fd);
  else
    say("passed %s (fd %d): %s", path, fd, why ? why : "refused");
  errno = saved;
  return fd;
}

static void adopt_inherited(void) {
  int expected = 1;
  if (!atomic_compare_exchange_strong(&g_adopt_pending, &expected, 0)) return;
  const int saved = errno;
  for (int i = 0; i < g_adopt_count; ++i) {
    const int fd = g_adopt[i];
    char path[PATH_MAX];
    const int flags = REAL(fcntl)(fd, F_GETFL);
    if (flags < 0 || !fd_path(fd, path, sizeof path) || !under_prefix(path)) continue;
    const off_t at = REAL(lseek)(fd, 0, SEEK_CUR);
    if (at < 0) continue;
    set_exclusive(fd, 1);
    route_fd(fd, flags, path, (int64_t)at);
    if (fd < 3 && tai_bridge_routed(fd)) adopt_std_stream(fd);
  }
  errno = saved;
}

/* Takes fd's file out of the layer before a call the layer does not do itself. */
static void unroute_for(int fd, const char* call) {
  if (!routed(fd)) return;
  const int saved = errno;
  ENTER();
  const int err = tai_bridge_unroute_file(fd);
  LEAVE();
  say("fd %d unrouted for %s%s%s", fd, call, err ? ": write-back failed: " : "", err ? strerror(err) : "");
  errno = saved;
}

/* Each skip below on tai_bridge_nothing_cached() (every routed file write-through and, in the
 * order fsync mode, its gate open: the kernel has every byte) saves the layer's two
 * rt_sigprocmask calls, and the fstatat of a path: SQLite takes and drops record locks and stats
 * its files about a dozen times per transaction, and its files are write-through after their
 * first small fsyncs. */
static void write_back_for(const char* call) {
  if (!engaged() || tai_bridge_nothing_cached()) return;
  const int saved = errno;
  ENTER();
  const int err = tai_bridge_write_back_all();
  LEAVE();
  if (err) say("write-back before %s failed: %s", call, strerror(err));
  errno = saved;
}

/* ------------------------------------------------------------------------------------------ */
/* open                                                                                       */

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_WRAPPER(name)                                                   \
  EXPORT int name(const char* path, int flags, ...) {                        \
    va_list ap;                                                              \
    va_start(ap, flags);                                                     \
    const mode_t mode = mode_arg(flags, ap);                                 \
    va_end(ap);                                                              \
    if (flags & O_TRUNC) order_point();                                      \
    return after_open(REAL(name)(path, flags, mode), flags);                 \
  }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(name)                                                 \
  EXPORT int name(int dirfd, const char* path, int flags, ...) {             \
    va_list ap;                                                              \
    va_start(ap, flags);                                                     \
    const mode_t mode = mode_arg(flags, ap);                                 \
    va_end(ap);                                                              \
    if (flags & O_TRUNC) order_point();                                      \
    return after_open(REAL(name)(dirfd, path, flags, mode), flags);          \
  }
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

/* The fortified names (_FORTIFY_SOURCE turns open(path, flags) without a mode into these). */
extern int __open_2(const char*, int);
extern int __open64_2(const char*, int);
extern int __openat_2(int, const char*, int);
extern int __openat64_2(int, const char*, int);
EXPORT int __open_2(const char* path, int flags) { return after_open(REAL(__open_2)(path, flags), flags); }
EXPORT int __open64_2(const char* path, int flags) { return after_open(REAL(__open64_2)(path, flags), flags); }
EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return after_open(REAL(__openat_2)(dirfd, path, flags), flags);
}
EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return after_open(REAL(__openat64_2)(dirfd, path, flags), flags);
}
EXPORT int creat(const char* path, mode_t mode) {
  order_point();
  return after_open(REAL(creat)(path, mode), O_CREAT | O_WRONLY | O_TRUNC);
}
EXPORT int creat64(const char* path, mode_t mode) {
  order_point();
  return after_open(REAL(creat64)(path, mode), O_CREAT | O_WRONLY | O_TRUNC);
}

/* The mkstemp family: glibc opens the file with its internal __open, which no interposition
 * sees, so these are caught by name. sed -i, perl -i, sort -o, zip and many more write their new
 * file under a temporary name made by them and rename it over the old one. O_RDWR | O_CREAT |
 * O_EXCL is what they open with (plus the flags of the *ostemp variants). */
EXPORT int mkstemp(char* tmpl) { return after_open(REAL(mkstemp)(tmpl), O_RDWR | O_CREAT | O_EXCL); }
EXPORT int mkstemp64(char* tmpl) { return after_open(REAL(mkstemp64)(tmpl), O_RDWR | O_CREAT | O_EXCL); }
EXPORT int mkostemp(char* tmpl, int flags) {
  return after_open(REAL(mkostemp)(tmpl, flags), O_RDWR | O_CREAT | O_EXCL | flags);
}
EXPORT int mkostemp64(char* tmpl, int flags) {
  return after_open(REAL(mkostemp64)(tmpl, flags), O_RDWR | O_CREAT | O_EXCL | flags);
}
EXPORT int mkstemps(char* tmpl, int suffixlen) {
  return after_open(REAL(mkstemps)(tmpl, suffixlen), O_RDWR | O_CREAT | O_EXCL);
}
EXPORT int mkstemps64(char* tmpl, int suffixlen) {
  return after_open(REAL(mkstemps64)(tmpl, suffixlen), O_RDWR | O_CREAT | O_EXCL);
}
EXPORT int mkostemps(char* tmpl, int suffixlen, int flags) {
  return after_open(REAL(mkostemps)(tmpl, suffixlen, flags), O_RDWR | O_CREAT | O_EXCL | flags);
}
EXPORT int mkostemps64(char* tmpl, int suffixlen, int flags) {
  return after_open(REAL(mkostemps64)(tmpl, suffixlen, flags), O_RDWR | O_CREAT | O_EXCL | flags);
}

/* ------------------------------------------------------------------------------------------ */
/* close                                                                                      */

EXPORT int close(int fd) {
  set_exclusive(fd, 0);
  if (fd >= 0 && engaged()) {
    if (fd >= 3 && tai_bridge_is_own_fd(fd)) {  /* never the program's: a guessed number, or a close-all loop */
      errno = EBADF;
      return -1;
    }
    /* 0, 1 and 2 too when routed (a routed stdout the program closes: a later write(1) must
     * fail with EBADF as the kernel's would, not land in the cache) */
    if (tai_bridge_routed(fd)) {
      ENTER();
      const int rc = tai_bridge_close(fd);
      LEAVE();
      return rc;
    }
  }
  return REAL(close)(fd);
}

/* Closes [first, last] except TAI's own descriptors (which all lie at or above their base). */
static int close_range_sparing(unsigned first, unsigned last, int flags) {
  int (*real)(unsigned, unsigned, int) = REAL(close_range);
  unsigned lo = first;
  for (;;) {
    const int own = tai_bridge_next_own_fd(lo > (unsigned)INT_MAX ? INT_MAX : (int)lo);
    if (own < 0 || (unsigned)own > last) break;
    if ((unsigned)own > lo && real(lo, (unsigned)own - 1, flags) != 0) return -1;
    if ((unsigned)own == UINT_MAX) return 0;
    lo = (unsigned)own + 1;
  }
  return lo <= last ? real(lo, last, flags) : 0;
}

EXPORT int close_range(unsigned first, unsigned last, int flags) {
  if (!(flags & CLOSE_RANGE_CLOEXEC))
    for (unsigned fd = first; fd <= last && fd < kExclusiveMax; ++fd) set_exclusive((int)fd, 0);
  if (!engaged() || first > last) return REAL(close_range)(first, last, flags);
  if (!(flags & CLOSE_RANGE_CLOEXEC)) {
    ENTER();
    const int err = tai_bridge_forget_range(first, last);
    LEAVE();
    if (err) say("close_range: a routed file's write-back failed: %s", strerror(err));
  }
  return close_range_sparing(first, last, flags);
}

EXPORT void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  for (int fd = lowfd; fd < kExclusiveMax; ++fd) set_exclusive(fd, 0);
  if (!engaged()) {
    REAL(closefrom)(lowfd);
    return;
  }
  ENTER();
  (void)tai_bridge_forget_range((unsigned)lowfd, UINT_MAX);
  LEAVE();
  (void)close_range_sparing((unsigned)lowfd, UINT_MAX, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* transfers                                                                                  */

EXPORT ssize_t read(int fd, void* buf, size_t n) {
  if (!routed(fd)) return REAL(read)(fd, buf, n);
  ENTER();
  const ssize_t r = tai_bridge_read(fd, buf, n);
  LEAVE();
  return r;
}

EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (!routed(fd)) return REAL(write)(fd, buf, n);
  ENTER();
  const ssize_t r = tai_bridge_write(fd, buf, n);
  LEAVE();
  return r;
}

#define PREAD_WRAPPER(name, off_type)                                       \
  EXPORT ssize_t name(int fd, void* buf, size_t n, off_type off) {          \
    if (!routed(fd)) return REAL(name)(fd, buf, n, off);                    \
    ENTER();                                                                \
    const ssize_t r = tai_bridge_pread(fd, buf, n, (off_t)off);             \
    LEAVE();                                                                \
    return r;                                                               \
  }
#define PWRITE_WRAPPER(name, off_type)                                      \
  EXPORT ssize_t name(int fd, const void* buf, size_t n, off_type off) {    \
    if (!routed(fd)) return REAL(name)(fd, buf, n, off);                    \
    ENTER();                                                                \
    const ssize_t r = tai_bridge_pwrite(fd, buf, n, (off_t)off);            \
    LEAVE();                                                                \
    return r;                                                               \
  }
PREAD_WRAPPER(pread, off_t)
PREAD_WRAPPER(pread64, off64_t)
PWRITE_WRAPPER(pwrite, off_t)
PWRITE_WRAPPER(pwrite64, off64_t)

EXPORT ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  if (!routed(fd)) return REAL(readv)(fd, iov, iovcnt);
  ENTER();
  const ssize_t r = tai_bridge_readv(fd, iov, iovcnt);
  LEAVE();
  return r;
}
EXPORT ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  if (!routed(fd)) return REAL(writev)(fd, iov, iovcnt);
  ENTER();
  const ssize_t r = tai_bridge_writev(fd, iov, iovcnt);
  LEAVE();
  return r;
}

#define PREADV_WRAPPER(name, off_type)                                                  \
  EXPORT ssize_t name(int fd, const struct iovec* iov, int iovcnt, off_type off) {     \
    if (!routed(fd)) return REAL(name)(fd, iov, iovcnt, off);                           \
    ENTER();                                                                            \
    const ssize_t r = tai_bridge_preadv(fd, iov, iovcnt, (off_t)off);                   \
    LEAVE();                                                                            \
    return r;                                                                           \
  }
#define PWRITEV_WRAPPER(name, off_type)                                                 \
  EXPORT ssize_t name(int fd, const struct iovec* iov, int iovcnt, off_type off) {     \
    if (!routed(fd)) return REAL(name)(fd, iov, iovcnt, off);                           \
    ENTER();                                                                            \
    const ssize_t r = tai_bridge_pwritev(fd, iov, iovcnt, (off_t)off);                  \
    LEAVE();                                                                            \
    return r;                                                                           \
  }
PREADV_WRAPPER(preadv, off_t)
PREADV_WRAPPER(preadv64, off64_t)
PWRITEV_WRAPPER(pwritev, off_t)
PWRITEV_WRAPPER(pwritev64, off64_t)

/* preadv2/pwritev2: offset -1 means the file offset (readv/writev); flags (RWF_*) have no
 * equivalent in the cache: the file leaves the layer. */
#define PRWV2_WRAPPER(name, off_type, plain, at)                                                  \
  EXPORT ssize_t name(int fd, const struct iovec* iov, int iovcnt, off_type off, int flags) {    \
    if (routed(fd) && flags != 0) unroute_for(fd, #name " with flags");                           \
    if (!routed(fd)) return REAL(name)(fd, iov, iovcnt, off, flags);                              \
    ENTER();                                                                                      \
    const ssize_t r = off == -1 ? plain(fd, iov, iovcnt) : at(fd, iov, iovcnt, (off_t)off);       \
    LEAVE();                                                                                      \
    return r;                                                                                     \
  }
PRWV2_WRAPPER(preadv2, off_t, tai_bridge_readv, tai_bridge_preadv)
PRWV2_WRAPPER(preadv64v2, off64_t, tai_bridge_readv, tai_bridge_preadv)
PRWV2_WRAPPER(pwritev2, off_t, tai_bridge_writev, tai_bridge_pwritev)
PRWV2_WRAPPER(pwritev64v2, off64_t, tai_bridge_writev, tai_bridge_pwritev)

#define LSEEK_WRAPPER(name, off_type)                                        \
  EXPORT off_type name(int fd, off_type off, int whence) {                   \
    if (!routed(fd)) return REAL(name)(fd, off, whence);                     \
    ENTER();                                                                 \
    const off_t r = tai_bridge_lseek(fd, (off_t)off, whence);               \
    LEAVE();                                                                 \
    return (off_type)r;                                                      \
  }
LSEEK_WRAPPER(lseek, off_t)
LSEEK_WRAPPER(lseek64, off64_t)

EXPORT int fsync(int fd) {
  if (!routed(fd)) {
    unsigned long long ticket = 0;
    const int dir = order_point_before_sync(fd, &ticket);
    if (tai_bridge_fsync_noop()) return 0; /* benchmark only */
    const int r = REAL(fsync)(fd);
    if (dir && r == 0) order_directory_synced(fd, ticket);
    return r;
  }
  ENTER();
  const int r = tai_bridge_fsync(fd);
  LEAVE();
  return r;
}
EXPORT int fdatasync(int fd) {
  if (!routed(fd)) {
    unsigned long long ticket = 0; /* a directory's fdatasync is not counted on for its names */
    (void)order_point_before_sync(fd, &ticket);
    if (tai_bridge_fsync_noop()) return 0; /* benchmark only */
    return REAL(fdatasync)(fd);
  }
  ENTER();
  const int r = tai_bridge_fdatasync(fd);
  LEAVE();
  return r;
}

#define FTRUNCATE_WRAPPER(name, off_type)                                    \
  EXPORT int name(int fd, off_type length) {                                 \
    if (!routed(fd)) return REAL(name)(fd, length);                          \
    ENTER();                                                                 \
    const int r = tai_bridge_ftruncate(fd, (off_t)length);                   \
    LEAVE();                                                                 \
    return r;                                                                \
  }
FTRUNCATE_WRAPPER(ftruncate, off_t)
FTRUNCATE_WRAPPER(ftruncate64, off64_t)

/* ------------------------------------------------------------------------------------------ */
/* stat: the size includes cached writes                                                      */

static void fix_stat(int rc, struct stat* st) {
  if (rc != 0 || !st || !S_ISREG(st->st_mode) || !engaged() || tai_bridge_nothing_cached()) return;
  int64_t size = st->st_size;
  ENTER();
  tai_bridge_fix_size(st->st_dev, st->st_ino, &size);
  LEAVE();
  st->st_size = (off_t)size;
}

EXPORT int fstat(int fd, struct stat* st) {
  if (routed(fd)) {
    /* Nothing cached (see write_back_for): the kernel's size is the file's, and the layer would
     * only add it to what the kernel says. SQLite stats its database once per transaction. */
    if (st && tai_bridge_nothing_cached()) return REAL(fstat)(fd, st);
    ENTER();
    const int r = tai_bridge_fstat(fd, st);
    LEAVE();
    return r;
  }
  const int rc = REAL(fstat)(fd, st);
  fix_stat(rc, st);  /* a read-only descriptor of a routed file */
  return rc;
}
EXPORT int fstat64(int fd, struct stat64* st) { return fstat(fd, (struct stat*)st); }

EXPORT int stat(const char* path, struct stat* st) {
  const int rc = REAL(stat)(path, st);
  fix_stat(rc, st);
  return rc;
}
EXPORT int stat64(const char* path, struct stat64* st) { return stat(path, (struct stat*)st); }
EXPORT int lstat(const char* path, struct stat* st) {
  const int rc = REAL(lstat)(path, st);
  fix_stat(rc, st);
  return rc;
}
EXPORT int lstat64(const char* path, struct stat64* st) { return lstat(path, (struct stat*)st); }
EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  const int rc = REAL(fstatat)(dirfd, path, st, flags);
  fix_stat(rc, st);
  return rc;
}
EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  return fstatat(dirfd, path, (struct stat*)st, flags);
}
/* newfstatat is the system call's name; glibc exports no function by it, but a program built
 * against another libc may call it. */
EXPORT int newfstatat(int dirfd, const char* path, struct stat* st, int flags) {
  return fstatat(dirfd, path, st, flags);
}

EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* stx) {
  const int rc = REAL(statx)(dirfd, path, flags, mask, stx);
  if (rc == 0 && (stx->stx_mask & STATX_SIZE) && (stx->stx_mask & STATX_INO) && S_ISREG(stx->stx_mode) &&
      engaged() && !tai_bridge_nothing_cached()) {
    int64_t size = (int64_t)stx->stx_size;
    ENTER();
    tai_bridge_fix_size(makedev(stx->stx_dev_major, stx->stx_dev_minor), (ino_t)stx->stx_ino, &size);
    LEAVE();
    stx->stx_size = (uint64_t)size;
  }
  return rc;
}

/* The __xstat family: compatibility symbols for programs built before glibc 2.33. */
typedef int (*xstat_fn)(int, const char*, struct stat*);
typedef int (*fxstat_fn)(int, int, struct stat*);
typedef int (*fxstatat_fn)(int, int, const char*, struct stat*, int);
static void* compat(const char* name) {
  void* f = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
  return f ? f : dlsym(RTLD_NEXT, name);
}
EXPORT int __xstat(int ver, const char* path, struct stat* st) {
  const int rc = (__extension__(xstat_fn)compat("__xstat"))(ver, path, st);
  fix_stat(rc, st);
  return rc;
}
EXPORT int __xstat64(int ver, const char* path, struct stat64* st) {
  const int rc = (__extension__(xstat_fn)compat("__xstat64"))(ver, path, (struct stat*)st);
  fix_stat(rc, (struct stat*)st);
  return rc;
}
EXPORT int __lxstat(int ver, const char* path, struct stat* st) {
  const int rc = (__extension__(xstat_fn)compat("__lxstat"))(ver, path, st);
  fix_stat(rc, st);
  return rc;
}
EXPORT int __lxstat64(int ver, const char* path, struct stat64* st) {
  const int rc = (__extension__(xstat_fn)compat("__lxstat64"))(ver, path, (struct stat*)st);
  fix_stat(rc, (struct stat*)st);
  return rc;
}
EXPORT int __fxstat(int ver, int fd, struct stat* st) {
  if (routed(fd)) return fstat(fd, st);
  const int rc = (__extension__(fxstat_fn)compat("__fxstat"))(ver, fd, st);
  fix_stat(rc, st);
  return rc;
}
EXPORT int __fxstat64(int ver, int fd, struct stat64* st) { return __fxstat(ver, fd, (struct stat*)st); }
EXPORT int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  const int rc = (__extension__(fxstatat_fn)compat("__fxstatat"))(ver, dirfd, path, st, flags);
  fix_stat(rc, st);
  return rc;
}
EXPORT int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  return __fxstatat(ver, dirfd, path, (struct stat*)st, flags);
}

/* truncate by path: the file leaves the layer first (its cache could hold bytes beyond). */
static void unroute_path(const char* path) {
  struct stat st;
  if (!engaged() || REAL(stat)(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
  const int saved = errno;
  ENTER();
  (void)tai_bridge_unroute_inode(st.st_dev, st.st_ino);
  LEAVE();
  errno = saved;
}
EXPORT int truncate(const char* path, off_t length) {
  order_point();
  unroute_path(path);
  return REAL(truncate)(path, length);
}
EXPORT int truncate64(const char* path, off64_t length) {
  order_point();
  unroute_path(path);
  return REAL(truncate64)(path, length);
}

/* ------------------------------------------------------------------------------------------ */
/* descriptors: dup, fcntl                                                                    */

/* After the kernel made newfd a duplicate of oldfd (which was routed when `was_routed`). */
static void after_dup(int oldfd, int newfd, int was_routed) {
  if (newfd < 0) return;
  set_exclusive(newfd, is_exclusive(oldfd));
  const int saved = errno;
  ENTER();
  const int err = was_routed ? tai_bridge_alias(oldfd, newfd) : tai_bridge_forget(newfd);
  LEAVE();
  if (err) say("fd %d replaced by dup: its file's write-back failed: %s", newfd, strerror(err));
  errno = saved;
}

static FILE* cookie_stream(int fd, const char* mode);

/* A routed file became descriptor 0, 1 or 2 (dd, a shell redirect done by hand): glibc's stdin,
 * stdout or stderr would read and write that descriptor behind the layer, so the stream is
 * flushed and replaced by a cookie stream over the layer (programs name the streams through the
 * stdin/stdout/stderr variables, which glibc's own functions read too). */
/* The streams replaced (glibc's own) and their replacements, by descriptor: a program that
 * saved the stream's pointer before (mawk keeps stdout in its table of output files) may still
 * fclose the original, see fclose below. Set once per descriptor, by the thread that adopts. */
static FILE* _Atomic g_std_original[3];
static FILE* _Atomic g_std_replacement[3];

static void adopt_std_stream(int fd) {
  FILE** slot = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
  if (fd != 0) fflush(*slot);
  FILE* c = cookie_stream(fd, fd == 0 ? "r" : "w");
  if (!c) {
    unroute_for(fd, "a standard stream that could not be replaced");
    return;
  }
  if (fd == 2) setvbuf(c, NULL, _IONBF, 0);
  /* release: the streams are made before fclose may compare against them */
  atomic_store_explicit(&g_std_replacement[fd], c, memory_order_release);
  atomic_store_explicit(&g_std_original[fd], *slot, memory_order_release);
  *slot = c;
  say("fd %d is a routed file: %s now writes through TAI", fd, fd == 0 ? "stdin" : fd == 1 ? "stdout" : "stderr");
}

static void after_dup_std(int oldfd, int fd, int was) {
  after_dup(oldfd, fd, was);
  if (was && fd >= 0 && fd < 3 && tai_bridge_routed(fd)) adopt_std_stream(fd);
}

EXPORT int dup(int oldfd) {
  if (!engaged()) {
    const int fd = REAL(dup)(oldfd);
    if (fd >= 0) set_exclusive(fd, is_exclusive(oldfd));
    return fd;
  }
  const int was = tai_bridge_routed(oldfd);
  const int fd = REAL(dup)(oldfd);
  after_dup_std(oldfd, fd, was);
  return fd;
}

static int dup2_like(int oldfd, int newfd, int flags, int use_dup3) {
  if (!engaged()) {
    const int fd = use_dup3 ? REAL(dup3)(oldfd, newfd, flags) : REAL(dup2)(oldfd, newfd);
    if (fd >= 0 && oldfd != newfd) set_exclusive(fd, is_exclusive(oldfd));
    return fd;
  }
  /* stdio's buffered bytes for the descriptor being replaced belong to its old file */
  if (newfd == 1 || newfd == 2) fflush(newfd == 1 ? stdout : stderr);
  const int was = tai_bridge_routed(oldfd);
  const int fd = use_dup3 ? REAL(dup3)(oldfd, newfd, flags) : REAL(dup2)(oldfd, newfd);
  if (fd >= 0 && oldfd != newfd) after_dup_std(oldfd, fd, was);
  return fd;
}
EXPORT int dup2(int oldfd, int newfd) { return dup2_like(oldfd, newfd, 0, 0); }
EXPORT int dup3(int oldfd, int newfd, int flags) { return dup2_like(oldfd, newfd, flags, 1); }

static int is_lock_cmd(int cmd) {
  return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_GETLK ||
         cmd == F_OFD_GETLK;
}

static int fcntl_impl(int fd, int cmd, uintptr_t arg) {
  int (*real)(int, int, ...) = REAL(fcntl);
  if (!engaged()) {
    const int r = real(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) set_exclusive(r, is_exclusive(fd));
    return r;
  }
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
    const int was = tai_bridge_routed(fd);
    const int nfd = real(fd, cmd, arg);
    after_dup_std(fd, nfd, was);
    return nfd;
  }
  if (tai_bridge_routed(fd)) {
    if (is_lock_cmd(cmd)) {
      /* Another process that takes the lock next must read what this one wrote. */
      write_back_for("a record lock");
    } else if (cmd == F_SETFL) {
      const int now = real(fd, F_GETFL);
      if (now >= 0 && ((now ^ (int)arg) & (O_APPEND | O_DIRECT))) unroute_for(fd, "fcntl(F_SETFL) changing O_APPEND or O_DIRECT");
    }
  }
  return real(fd, cmd, arg);
}

EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  const uintptr_t arg = va_arg(ap, uintptr_t);  /* every command's argument fits a word */
  va_end(ap);
  return fcntl_impl(fd, cmd, arg);
}
EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  const uintptr_t arg = va_arg(ap, uintptr_t);
  va_end(ap);
  return fcntl_impl(fd, cmd, arg);
}

/* ------------------------------------------------------------------------------------------ */
/* calls the layer does not do: the file leaves it first                                      */

EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (!(flags & MAP_ANONYMOUS)) unroute_for(fd, "mmap");
  return REAL(mmap)(addr, len, prot, flags, fd, off);
}
EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
  if (!(flags & MAP_ANONYMOUS)) unroute_for(fd, "mmap");
  return REAL(mmap64)(addr, len, prot, flags, fd, off);
}
EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* off, size_t count) {
  unroute_for(out_fd, "sendfile");
  unroute_for(in_fd, "sendfile");
  return REAL(sendfile)(out_fd, in_fd, off, count);
}
EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t* off, size_t count) {
  unroute_for(out_fd, "sendfile");
  unroute_for(in_fd, "sendfile");
  return REAL(sendfile64)(out_fd, in_fd, off, count);
}
EXPORT ssize_t copy_file_range(int in_fd, off64_t* in_off, int out_fd, off64_t* out_off, size_t len,
                               unsigned flags) {
  unroute_for(in_fd, "copy_file_range");
  unroute_for(out_fd, "copy_file_range");
  return REAL(copy_file_range)(in_fd, in_off, out_fd, out_off, len, flags);
}
EXPORT ssize_t splice(int in_fd, loff_t* in_off, int out_fd, loff_t* out_off, size_t len, unsigned flags) {
  unroute_for(in_fd, "splice");
  unroute_for(out_fd, "splice");
  return REAL(splice)(in_fd, in_off, out_fd, out_off, len, flags);
}
EXPORT int fallocate(int fd, int mode, off_t off, off_t len) {
  unroute_for(fd, "fallocate");
  return REAL(fallocate)(fd, mode, off, len);
}
EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) {
  unroute_for(fd, "fallocate");
  return REAL(fallocate64)(fd, mode, off, len);
}
EXPORT int posix_fallocate(int fd, off_t off, off_t len) {
  unroute_for(fd, "posix_fallocate");
  return REAL(posix_fallocate)(fd, off, len);
}
EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) {
  unroute_for(fd, "posix_fallocate");
  return REAL(posix_fallocate64)(fd, off, len);
}

/* The kernel acts on what it has: give it what the cache holds, keep the routing. */
EXPORT int sync_file_range(int fd, off64_t off, off64_t n, unsigned flags) {
  if (routed(fd)) write_back_for("sync_file_range");
  return REAL(sync_file_range)(fd, off, n, flags);
}
EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  if (advice == POSIX_FADV_DONTNEED && routed(fd)) write_back_for("posix_fadvise(DONTNEED)");
  return REAL(posix_fadvise)(fd, off, len, advice);
}
EXPORT int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) {
  if (advice == POSIX_FADV_DONTNEED && routed(fd)) write_back_for("posix_fadvise(DONTNEED)");
  return REAL(posix_fadvise64)(fd, off, len, advice);
}
/* sync and syncfs: every routed write durable first (order), or handed to the kernel (full). */
static void sync_now_for(const char* call) {
  if (!atomic_load_explicit(&g_routed_ever, memory_order_relaxed) || !engaged()) return;
  ENTER();
  const int err = tai_bridge_sync_now();
  LEAVE();
  if (err) say("%s: a write-back or sync failed: %s", call, strerror(err));
}
EXPORT void sync(void) {
  sync_now_for("sync");
  REAL(sync)();
}
EXPORT int syncfs(int fd) {
  sync_now_for("syncfs");
  return REAL(syncfs)(fd);
}

/* ------------------------------------------------------------------------------------------ */
/* processes                                                                                  */

static void sig_lock(sigset_t* saved);
static void sig_unlock(const sigset_t* saved);
EXPORT pid_t fork(void) {
  if (engaged()) {
    ENTER();
    const int err = tai_bridge_unroute_all(0);
    LEAVE();
    say("fork: every routed file handed to the kernel%s%s", err ? "; a write-back failed: " : "",
        err ? strerror(err) : "");
  }
  clear_exclusive_all(0); /* parent and child share every descriptor from now on */
  /* Under the signal table's lock, so that the child never starts with it held by a thread it
   * does not have (another thread's signal delivery or sigaction). */
  sigset_t saved;
  sig_lock(&saved);
  const pid_t pid = REAL(fork)();
  const int err = errno;
  sig_unlock(&saved);
  errno = err;
  if (pid == 0) tai_bridge_forked_child();
  return pid;
}
/* vfork's child borrows the parent's stack: a wrapper that returned in the child would wreck the
 * frame the parent returns through. fork is a valid vfork. */
EXPORT pid_t vfork(void) { return fork(); }

static void before_child(const char* call) {
  clear_exclusive_all(1); /* the child shares the inheritable ones */
  if (!engaged()) return;
  ENTER();
  int err = tai_bridge_unroute_all(1);
  const int err2 = tai_bridge_write_back_all();
  if (!err) err = err2;
  LEAVE();
  say("%s: inheritable routed files handed to the kernel, the rest written back%s%s", call,
      err ? "; a write-back failed: " : "", err ? strerror(err) : "");
}

EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa,
                       const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  before_child("posix_spawn");
  return REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}
EXPORT int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa,
                        const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  before_child("posix_spawnp");
  return REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}
EXPORT int system(const char* command) {
  before_child("system");
  return REAL(system)(command);
}
EXPORT FILE* popen(const char* command, const char* type) {
  before_child("popen");
  return REAL(popen)(command, type);
}

/* Before exec: everything written back, the layer shut down, and the list of exclusive
 * inheritable descriptors (TAI_PRELOAD_ADOPT=fd,fd,...) put in *entry for the next image. */
static void before_exec(char* entry, size_t size) {
  entry[0] = '\0';
  if (atomic_load_explicit(&g_state, memory_order_acquire) != kActive) return;
  if (engaged()) {
    ENTER();
    tai_bridge_before_exec();
    LEAVE();
  }
  size_t n = (size_t)snprintf(entry, size, "TAI_PRELOAD_ADOPT=");
  int count = 0;
  for (int fd = 0; fd < kExclusiveMax && count < kAdoptMax; ++fd) {
    if (!is_exclusive(fd)) continue;
    const int fl = REAL(fcntl)(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC)) continue;
    const int w = snprintf(entry + n, size - n, count ? ",%d" : "%d", fd);
    if (w < 0 || (size_t)w >= size - n) break;
    n += (size_t)w;
    ++count;
  }
  if (count == 0) entry[0] = '\0';
  say("exec: every routed file written back, the layer shut down%s%s", count ? "; the next program routes " : "",
      count ? entry + strlen("TAI_PRELOAD_ADOPT=") : "");
}

/* envp with `entry` in place of any TAI_PRELOAD_ADOPT (a new array on the stack of the caller:
 * exec either replaces the image or fails and returns, and then the array is dropped). */
#define WITH_ADOPT(envp, entry, out)                                                        \
  size_t env_n = 0;                                                                         \
  while ((envp) && (envp)[env_n]) ++env_n;                                                  \
  char* out[env_n + 2];                                                                     \
  {                                                                                         \
    size_t k = 0;                                                                           \
    for (size_t i = 0; i < env_n; ++i)                                                      \
      if (strncmp((envp)[i], "TAI_PRELOAD_ADOPT=", 18) != 0) out[k++] = (envp)[i];          \
    if ((entry)[0]) out[k++] = (entry);                                                     \
    out[k] = NULL;                                                                          \
  }

extern char** environ;
EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  char entry[kAdoptMax * 8 + 32];
  before_exec(entry, sizeof entry);
  WITH_ADOPT(envp, entry, env)
  return REAL(execve)(path, argv, env);
}
EXPORT int execv(const char* path, char* const argv[]) {
  char entry[kAdoptMax * 8 + 32];
  before_exec(entry, sizeof entry);
  WITH_ADOPT(environ, entry, env)
  return REAL(execve)(path, argv, env);
}
EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  char entry[kAdoptMax * 8 + 32];
  before_exec(entry, sizeof entry);
  WITH_ADOPT(envp, entry, env)
  return REAL(execvpe)(file, argv, env);
}
EXPORT int execvp(const char* file, char* const argv[]) {
  char entry[kAdoptMax * 8 + 32];
  before_exec(entry, sizeof entry);
  WITH_ADOPT(environ, entry, env)
  return REAL(execvpe)(file, argv, env);
}
EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  char entry[kAdoptMax * 8 + 32];
  before_exec(entry, sizeof entry);
  WITH_ADOPT(envp, entry, env)
  return REAL(fexecve)(fd, argv, env);
}
/* execl, execlp, execle: glibc builds the vector and calls execve internally (not through the
 * interposed name), so they are done here the same way. */
#define COLLECT_ARGS(first, ap, argv, envp_out)                            \
  size_t argc = 1;                                                         \
  {                                                                        \
    va_list count;                                                         \
    va_copy(count, ap);                                                    \
    while (va_arg(count, const char*) != NULL) ++argc;                     \
    va_end(count);                                                         \
  }                                                                        \
  char* argv[argc + 1];                                                    \
  argv[0] = (char*)(first);                                                \
  for (size_t i = 1; i <= argc; ++i) argv[i] = va_arg(ap, char*);          \
  if (envp_out) *(envp_out) = va_arg(ap, char* const*);
EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char* const** no_envp = NULL;
  COLLECT_ARGS(arg, ap, argv, no_envp)
  va_end(ap);
  return execv(path, argv);
}
EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char* const** no_envp = NULL;
  COLLECT_ARGS(arg, ap, argv, no_envp)
  va_end(ap);
  return execvp(file, argv);
}
EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char* const* envp = NULL;
  char* const** envp_at = &envp;
  COLLECT_ARGS(arg, ap, argv, envp_at)
  va_end(ap);
  return execve(path, argv, envp);
}

/* ------------------------------------------------------------------------------------------ */
/* stdio                                                                                      */

static ssize_t cookie_read(void* c, char* buf, size_t n) {
  ENTER();
  const ssize_t r = tai_bridge_read((int)(intptr_t)c, buf, n);
  LEAVE();
  return r;
}
static ssize_t cookie_write(void* c, const char* buf, size_t n) {
  ENTER();
  const ssize_t r = tai_bridge_write((int)(intptr_t)c, buf, n);
  LEAVE();
  /* fopencookie: a write function returns what it wrote, 0 on error */
  return r < 0 ? 0 : r;
}
static int cookie_seek(void* c, off64_t* pos, int whence) {
  ENTER();
  const off_t r = tai_bridge_lseek((int)(intptr_t)c, (off_t)*pos, whence);
  LEAVE();
  if (r < 0) return -1;
  *pos = r;
  return 0;
}
static int cookie_close(void* c) {
  ENTER();
  const int r = tai_bridge_close((int)(intptr_t)c);
  LEAVE();
  return r;
}

/* A FILE over routed fd, or NULL (errno) when fopencookie fails. */
static FILE* cookie_stream(int fd, const char* mode) {
  cookie_io_functions_t io = {cookie_read, cookie_write, cookie_seek, cookie_close};
  char m[8];
  size_t k = 0;
  for (const char* p = mode; *p && k < sizeof m - 1; ++p)
    if (*p == 'r' || *p == 'w' || *p == 'a' || *p == '+') m[k++] = *p;
  m[k] = '\0';
  FILE* f = fopencookie((void*)(intptr_t)fd, m, io);
  if (f) f->_fileno = fd; /* fileno() answers the descriptor (see the file comment) */
  return f;
}

/* fopen's mode as open flags; -1 for a mode fopen would refuse (then fopen itself answers). */
static int mode_flags(const char* mode) {
  int flags;
  switch (mode[0]) {
    case 'r': flags = O_RDONLY; break;
    case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
    case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
    default: return -1;
  }
  for (const char* p = mode + 1; *p && *p != ','; ++p) {
    if (*p == '+') flags = (flags & ~O_ACCMODE) | O_RDWR;
    else if (*p == 'x') flags |= O_EXCL;
    else if (*p == 'e') flags |= O_CLOEXEC;
  }
  return flags;
}

static FILE* fopen_impl(const char* path, const char* mode, FILE* (*real)(const char*, const char*)) {
  if (!path || !mode || !engaged()) return real(path, mode);
  const int flags = mode_flags(mode);
  if (flags < 0) return real(path, mode);
  const int fd = REAL(open)(path, flags, 0666);
  if (fd < 0) return NULL;
  after_open(fd, flags);
  if (!tai_bridge_routed(fd)) {
    FILE* f = REAL(fdopen)(fd, mode);
    if (!f) {
      const int saved = errno;
      REAL(close)(fd);
      errno = saved;
    }
    return f;
  }
  FILE* f = cookie_stream(fd, mode);
  if (!f) {
    const int saved = errno;
    close(fd);
    errno = saved;
  }
  return f;
}
EXPORT FILE* fopen(const char* path, const char* mode) { return fopen_impl(path, mode, REAL(fopen)); }
EXPORT FILE* fopen64(const char* path, const char* mode) { return fopen_impl(path, mode, REAL(fopen64)); }
/* fclose of a standard stream that adopt_std_stream replaced, through a pointer the program
 * saved before (mawk's output table): glibc closes the descriptor inside fclose, behind the
 * layer, while the program's output sits in the replacement's buffer, which exit would flush
 * only after the layer's own exit handler, into a closed descriptor. So the replacement is
 * flushed into the layer and the descriptor's routing released (its file written back) first,
 * as the program's own close of the stream would have done. */
EXPORT int fclose(FILE* f) {
  for (int fd = 0; f && fd < 3; ++fd) {
    FILE* orig = atomic_load_explicit(&g_std_original[fd], memory_order_acquire);
    if (f != orig) continue;
    atomic_store_explicit(&g_std_original[fd], NULL, memory_order_relaxed);
    FILE* c = atomic_load_explicit(&g_std_replacement[fd], memory_order_acquire);
    if (c && fd != 0) fflush(c);
    if (routed(fd)) {
      const int saved = errno;
      ENTER();
      const int err = tai_bridge_forget(fd);
      LEAVE();
      say("fclose of the original stream of fd %d: its replacement flushed, the file written back%s%s", fd,
          err ? "; a write-back failed: " : "", err ? strerror(err) : "");
      errno = saved;
    }
    break;
  }
  return REAL(fclose)(f);
}

EXPORT FILE* fdopen(int fd, const char* mode) {
  if (!routed(fd) || !mode) return REAL(fdopen)(fd, mode);
  return cookie_stream(fd, mode);
}

/* ------------------------------------------------------------------------------------------ */
/* the ends of a program                                                                      */
/*
 * What write() acknowledged must reach the kernel however the program ends (SIGKILL aside).
 * exit() and a return from main run the layer's atexit handler; exec is before_exec. The other
 * ends skip both, so each gets the write-back here, on the layer's keeper thread, the caller
 * waiting at most kEndWaitMs (see tai_bridge_write_back_for_end): no fsync, the page cache is
 * what libc would have left too.
 *  * _exit, _Exit and syscall(SYS_exit_group): interposed. quick_exit: an at_quick_exit handler
 *    registered at activation (so that it runs after the program's, which may still write).
 *  * abort: interposed (the program's SIGABRT handler may return, and glibc then kills with the
 *    default action without another look at ours); glibc's own aborts (a corrupted heap) raise
 *    SIGABRT, which the signal handler below catches when the program left it at SIG_DFL.
 *  * The fatal signals whose default action ends the process (kEndSignals): at activation,
 *    every one still at SIG_DFL gets end_signal_handler, which writes back, restores SIG_DFL,
 *    and raises the signal again with it unblocked, so that the exit status and the core dump
 *    are the kernel's. sigaction, signal and their relatives are virtualised for every
 *    catchable signal: the program sees SIG_DFL where ours is installed, and its own handler
 *    where program_trampoline runs it; SIG_IGN it sets is installed for real; SIG_DFL it sets on
 *    an end signal keeps ours. Our handler, like the program's, runs on a program thread
 *    outside the layer (a signal that finds the thread inside waits until it leaves), so the
 *    thread it interrupted holds no lock of the layer; it may hold the allocator's or a stdio
 *    lock, which the keeper could need: hence the bounded wait. TAI's threads block every
 *    signal, so none runs there. Synchronous faults inside the layer (a bug) are the kernel's:
 *    the default action at once, with no write-back.
 * A forked child (which passes everything through) inherits the handlers: they find nothing to
 * write back and re-raise. exec resets caught signals to SIG_DFL, and the next image installs
 * its own. SIGKILL cannot be caught: the keeper's write-behind deadline (TAI_WRITE_BEHIND_MS)
 * bounds what it takes.
 */
enum { kEndWaitMs = 5000 };

/* What a timed-out end write-back leaves behind, for its message. */
static void end_age(char* buf, size_t n) {
  const long long age = tai_bridge_unwritten_age_ms();
  if (age >= 0) snprintf(buf, n, "the oldest acknowledged %lld ms ago", age);
  else snprintf(buf, n, "of an age not tracked (TAI_WRITE_BEHIND_MS=0)");
}

static void end_write_back(const char* how) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) != kActive) return;
  if (t_depth > 0 || tai_bridge_on_tai_thread()) return; /* the layer itself ends the process */
  if (!atomic_load_explicit(&g_routed_ever, memory_order_relaxed) &&
      !atomic_load_explicit(&g_adopt_pending, memory_order_relaxed))
    return;
  const int saved = errno;
  ENTER();
  const int err = tai_bridge_write_back_for_end(kEndWaitMs);
  LEAVE();
  if (err) {
    char age[96];
    end_age(age, sizeof age);
    say("%s: the write-back did not finish within %d ms: lost are the routed writes not yet handed to the "
        "kernel, %s (at most the cache's strict quota)", how, kEndWaitMs, age);
  }
  else say("%s: every routed file's cache handed to the kernel", how);
  errno = saved;
}

EXPORT void _exit(int status) {
  end_write_back("_exit");
  REAL(_exit)(status);
  __builtin_unreachable();
}
EXPORT void _Exit(int status) {
  end_write_back("_Exit");
  REAL(_Exit)(status);
  __builtin_unreachable();
}
EXPORT void abort(void) {
  end_write_back("abort");
  REAL(abort)();
  __builtin_unreachable();
}
static void at_quick_exit_handler(void) { end_write_back("quick_exit"); }

static long raw_rt_sigaction(long sig, long act, long oldact, long a3, long a4, long a5);

/* syscall(2): SYS_exit_group ends the process without the exit handler; SYS_rt_sigaction is the
 * kernel's sigaction without glibc (raw_rt_sigaction below keeps the end handlers in place);
 * every other number passes through with its arguments (six words, as glibc's own syscall()
 * reads them: the unused ones are whatever the registers held, which the kernel ignores). */
EXPORT long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_exit_group) end_write_back("syscall(SYS_exit_group)");
  if (number == SYS_rt_sigaction) return raw_rt_sigaction(a[0], a[1], a[2], a[3], a[4], a[5]);
  return REAL(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* The signals whose default action ends the process (all but SIGKILL and SIGSTOP, which
 * cannot be caught, and SIGTRAP, which debuggers use). */
static const int kEndSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGABRT,   SIGBUS,  SIGFPE,
                                  SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE, SIGALRM,   SIGTERM, SIGSTKFLT,
                                  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSYS};
#define kSigMax 65
/* g_mode[sig], what is installed for real for a virtualised signal (every catchable one):
 *  kPass: what the program set, SIG_IGN or (for a signal that does not end the process) SIG_DFL;
 *  kOurs: end_signal_handler, and the program believes SIG_DFL (with the flags and mask in
 *         g_program_act[sig], which sigaction's oldact reports);
 *  kWrapped: program_trampoline, for a program handler (in g_program_act[sig]): the trampoline
 *         defers the signal while its thread is inside the layer and otherwise runs the handler
 *         with the mask the kernel would have given it;
 *  kOneShot: the same for a handler with SA_RESETHAND: the kernel would reset the disposition to
 *         SIG_DFL at its first delivery, which would drop the trampoline (and, for an end signal,
 *         ours) for good; the trampoline does the reset itself (to ours for an end signal) and
 *         then runs the program's handler once.
 * Both change under g_sig_lock only; the handlers read g_mode without it where informational. */
enum { kPass = 0, kOurs = 1, kWrapped = 2, kOneShot = 3 };
static _Atomic int g_mode[kSigMax];
static struct sigaction g_program_act[kSigMax];
static _Atomic int g_end_handlers = 0; /* installed (release by install_end_handlers) */
static atomic_flag g_sig_lock = ATOMIC_FLAG_INIT;

static int is_end_signal(int sig) {
  for (size_t i = 0; i < sizeof kEndSignals / sizeof kEndSignals[0]; ++i)
    if (kEndSignals[i] == sig) return 1;
  return 0;
}

/* The signals a program may catch: all but SIGKILL and SIGSTOP, and the real-time signals glibc
 * keeps for itself (thread cancellation, set*id broadcasts), which its sigaction refuses. */
static int is_virtualised(int sig) {
  if (sig <= 0 || sig >= kSigMax || sig >= _NSIG || sig == SIGKILL || sig == SIGSTOP) return 0;
  return sig < __SIGRTMIN || sig >= SIGRTMIN;
}

/* Signals that cannot wait until their thread leaves the layer:
 *  kFatalHere: a fault of the thread's own instruction (returning from its handler runs the
 *    instruction again), or a SIGABRT the process sent itself (abort() of the layer or of the
 *    C++ runtime under it: glibc's abort blocks nothing and raises again). Inside the layer it
 *    is the kernel's default action at once, with no handler and no write-back, as when the
 *    layer blocked every signal: a program handler that ran there (or longjmp'ed out of it)
 *    would hold the layer's locks for good, and the layer's state is not to be trusted.
 *  kRunHere: SIGSYS of a seccomp filter: the handler emulates the system call the thread made,
 *    through the context it is given, so it runs there, inside the layer too.
 * A machine-check SIGBUS that is only advisory (BUS_MCEERR_AO) is an ordinary signal. */
enum { kDeferrable = 0, kFatalHere = 1, kRunHere = 2 };
#ifndef SYS_SECCOMP
#define SYS_SECCOMP 1 /* si_code of a seccomp filter's SIGSYS (the kernel's siginfo.h) */
#endif
static int undeferrable(int sig, const siginfo_t* info) {
  if (!info) return kDeferrable;
  if ((sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP) && info->si_code > 0)
    return sig == SIGBUS && info->si_code == BUS_MCEERR_AO ? kDeferrable : kFatalHere;
  if (sig == SIGABRT && info->si_code == SI_TKILL && info->si_pid == getpid()) return kFatalHere;
  if (sig == SIGSYS && info->si_code == SYS_SECCOMP) return kRunHere;
  return kDeferrable;
}
static int inside_program_layer(void) { return t_depth > 0 && !tai_bridge_on_tai_thread(); }

/* g_libc_syscall and g_libc_sigaction (declared at the top) are found by init_once before any
 * handler is installed: a handler must not be the first to look them up (dlsym is not
 * async-signal-safe). */

/* The default action, now: the disposition becomes SIG_DFL, and the caller returns into the
 * faulting instruction or the abort that raises again. */
static void default_action_now(int sig);

/* Counts for TAI_PRELOAD_LOG's line at the end of the process (relaxed: counts, lock-free, so
 * that a handler may add to them). */
static _Atomic unsigned long g_signals_deferred = 0;
static _Atomic unsigned long g_signals_lost = 0;
__attribute__((destructor)) static void report_deferred_signals(void) {
  const unsigned long deferred = atomic_load_explicit(&g_signals_deferred, memory_order_relaxed);
  const unsigned long lost = atomic_load_explicit(&g_signals_lost, memory_order_relaxed);
  if (deferred == 0 && lost == 0) return;
  say("signals that found their thread inside the layer and waited until it left: %lu; of them sent again "
      "without their siginfo (the signal queue was full): %lu",
      deferred, lost);
}

/* In a trampoline (every signal blocked, by its sa_mask): when the interrupted thread is inside
 * the layer (the lazy mask), the signal is queued again for this thread with its own siginfo and
 * the layer resumes with every signal blocked, the program's mask kept in t_saved_mask;
 * leave_layer restores it and the kernel delivers the signal then, outside the layer. Returns
 * whether it deferred. TAI's own threads block every signal; one that reaches them anyway (a
 * fault) is not deferred. The kernel's ucontext holds a kernel sigset (_NSIG bits), a prefix of
 * glibc's sigset_t: only that prefix is read and written, the frame's siginfo follows it. */
static int defer_inside_layer(int sig, siginfo_t* info, void* ucv) {
  if (!inside_program_layer()) return 0;
  ucontext_t* uc = (ucontext_t*)ucv;
  const size_t kernel_set = (_NSIG - 1) / 8;
  if (!t_masked) {
    sigemptyset(&t_saved_mask);
    memcpy(&t_saved_mask, &uc->uc_sigmask, kernel_set);
    t_masked = 1;
  }
  /* The kernel accepts any si_code for a signal a thread queues to itself. A full queue of
   * signals (RLIMIT_SIGPENDING reached again between the delivery and this call) refuses it: a
   * standard signal is then sent plainly (its siginfo lost), a real-time one is lost, as the
   * kernel would have refused it a moment earlier; g_signals_lost counts both, and
   * TAI_PRELOAD_LOG=1 prints the count at the end. */
  if (!info || g_libc_syscall(SYS_rt_tgsigqueueinfo, (long)getpid(), (long)gettid(), (long)sig, (long)info) != 0) {
    atomic_fetch_add_explicit(&g_signals_lost, 1, memory_order_relaxed);
    (void)g_libc_syscall(SYS_tgkill, (long)getpid(), (long)gettid(), (long)sig);
  }
  atomic_fetch_add_explicit(&g_signals_deferred, 1, memory_order_relaxed);
  sigset_t all;
  sigfillset(&all); /* glibc's leaves out its own two signals */
  memcpy(&uc->uc_sigmask, &all, kernel_set);
  return 1;
}

/* A spin lock with every signal blocked: sigaction may be called from a signal handler, and a
 * handler on this thread must never spin on a lock its own thread holds. */
static void sig_lock(sigset_t* saved) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, saved);
  /* acquire: pairs with sig_unlock's release (the tables above) */
  while (atomic_flag_test_and_set_explicit(&g_sig_lock, memory_order_acquire)) sched_yield();
}
static void sig_unlock(const sigset_t* saved) {
  atomic_flag_clear_explicit(&g_sig_lock, memory_order_release);
  pthread_sigmask(SIG_SETMASK, saved, NULL);
}

static const char* signal_name(int sig) {
  const char* n = sigabbrev_np(sig);
  return n ? n : "?";
}

static void default_action_now(int sig) {
  sigset_t saved;
  sig_lock(&saved);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  g_libc_sigaction(sig, &dfl, NULL);
  atomic_store_explicit(&g_mode[sig], kPass, memory_order_relaxed);
  sig_unlock(&saved);
}

/* The first step of every handler of this library: a signal whose thread is inside the layer is
 * deferred, or, for a fault or an abort there (a bug, or a program buffer the layer cannot
 * read), made the kernel's default action with no handler and no write-back (see
 * undeferrable). Returns whether it dealt with the signal; errno is kept. */
static int held_off_by_layer(int sig, siginfo_t* info, void* uc) {
  const int saved = errno;
  const int kind = undeferrable(sig, info);
  int done = 0;
  if (kind == kDeferrable) {
    done = defer_inside_layer(sig, info, uc);
  } else if (kind == kFatalHere && inside_program_layer()) {
    default_action_now(sig);
    done = 1;
  }
  errno = saved;
  return done;
}

static void end_signal_handler(int sig, siginfo_t* info, void* uc) {
  if (held_off_by_layer(sig, info, uc)) return;
  const int saved = errno;
  if (!tai_bridge_on_tai_thread()) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int err = tai_bridge_write_back_for_end(kEndWaitMs);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const long ms = (t1.tv_sec - t0.tv_sec) * 1000L + (t1.tv_nsec - t0.tv_nsec) / 1000000L;
    /* A stuck write-back (a frozen or hung file system, a lock the interrupted thread holds)
     * must not keep the process from ending: say so and take the default action anyway. */
    if (err) {
      char age[96];
      end_age(age, sizeof age);
      say("SIG%s: the write-back did not finish within %d ms (waited %ld ms): lost are the routed "
          "writes not yet handed to the kernel, %s (at most the cache's strict quota)",
          signal_name(sig), kEndWaitMs, ms, age);
    } else
      say("SIG%s: every routed file's cache handed to the kernel (%ld ms)", signal_name(sig), ms);
  }
  /* The kernel's default action, with the kernel's exit status and core dump. */
  default_action_now(sig);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  (void)raise(sig);                           /* pending: this handler's mask blocks it */
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);   /* delivered here: the process ends */
  errno = saved;                              /* not reached, unless the program raced us */
}

static struct sigaction our_action(void) {
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_sigaction = end_signal_handler;
  sigfillset(&a.sa_mask);  /* nothing else runs on this thread while it writes back */
  a.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  return a;
}

/* Every program handler runs through here (kWrapped, kOneShot), installed with every signal
 * blocked: a signal whose thread is inside the layer is deferred (defer_inside_layer); otherwise
 * the program's handler runs with the mask the kernel would have given it (the interrupted
 * thread's, its sa_mask, and the signal itself unless SA_NODEFER), and with the same siginfo and
 * context. A fault or a self-sent SIGABRT is never deferred: outside the layer the program's
 * handler runs at once, inside it the default action does (held_off_by_layer). For
 * SA_RESETHAND, the first delivery does what the kernel does (the disposition becomes SIG_DFL
 * before the handler runs, so that the same signal during or after it takes the default
 * action), except that for an end signal "SIG_DFL" is ours, so that the default action still
 * writes back. A delivery that finds the program changed the disposition meanwhile is
 * delivered again to what is there now. */
static void program_trampoline(int sig, siginfo_t* info, void* uc) {
  if (held_off_by_layer(sig, info, uc)) return;
  const int saved_errno = errno;
  sigset_t saved;
  sig_lock(&saved);
  const int mode = atomic_load_explicit(&g_mode[sig], memory_order_relaxed);
  struct sigaction prog;
  memset(&prog, 0, sizeof prog);
  if (mode == kWrapped || mode == kOneShot) prog = g_program_act[sig];
  if (mode == kOneShot) {
    struct sigaction reset;
    memset(&reset, 0, sizeof reset);
    reset.sa_handler = SIG_DFL;
    sigemptyset(&reset.sa_mask);
    const int end = is_end_signal(sig);
    if (end) reset = our_action();
    if (g_libc_sigaction(sig, &reset, NULL) == 0) {
      g_program_act[sig].sa_handler = SIG_DFL; /* the kernel keeps flags and mask on a reset */
      atomic_store_explicit(&g_mode[sig], end ? kOurs : kPass, memory_order_relaxed);
    }
  }
  sig_unlock(&saved);
  errno = saved_errno;
  if (mode == kWrapped || mode == kOneShot) {
    sigset_t mask;
    sigemptyset(&mask);
    memcpy(&mask, &((ucontext_t*)uc)->uc_sigmask, (_NSIG - 1) / 8);
    sigorset(&mask, &mask, &prog.sa_mask);
    if (!(prog.sa_flags & SA_NODEFER)) sigaddset(&mask, sig);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    if (prog.sa_flags & SA_SIGINFO) prog.sa_sigaction(sig, info, uc);
    else prog.sa_handler(sig);
  } else if (mode == kOurs) {
    end_signal_handler(sig, info, uc);
  } else {
    (void)raise(sig);
  }
}

/* What is installed for a program handler: its flags but SA_RESETHAND (the trampoline resets)
 * and SA_NODEFER (every signal is blocked while the trampoline decides), so SA_RESTART,
 * SA_ONSTACK and SIGCHLD's flags stay the program's. */
static struct sigaction wrapped_action(const struct sigaction* prog) {
  struct sigaction a = *prog;
  a.sa_sigaction = program_trampoline;
  a.sa_flags = (prog->sa_flags & ~(SA_RESETHAND | SA_NODEFER)) | SA_SIGINFO;
  sigfillset(&a.sa_mask);
  return a;
}

/* What the kernel would answer for the program's own action: its handler, the three flags the
 * trampoline changes as the program set them, the others as the kernel kept them from the
 * installed one (SA_RESTORER added by glibc, flags the kernel does not know cleared), and its
 * mask without SIGKILL and SIGSTOP. */
static struct sigaction as_the_kernel_keeps(const struct sigaction* want, const struct sigaction* installed) {
  const int changed = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  struct sigaction b = *installed;
  if (want->sa_flags & SA_SIGINFO) b.sa_sigaction = want->sa_sigaction;
  else b.sa_handler = want->sa_handler;
  b.sa_flags = (installed->sa_flags & ~changed) | (want->sa_flags & changed);
  b.sa_mask = want->sa_mask;
  sigdelset(&b.sa_mask, SIGKILL);
  sigdelset(&b.sa_mask, SIGSTOP);
  return b;
}

static int sets_handler(const struct sigaction* act) {
  return act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
}
static int wrapped_mode(const struct sigaction* act) {
  return (act->sa_flags & SA_RESETHAND) ? kOneShot : kWrapped;
}

static void install_end_handlers(void) {
  sigset_t saved;
  sig_lock(&saved);
  const struct sigaction ours = our_action();
  for (int sig = 1; sig < kSigMax; ++sig) {
    if (!is_virtualised(sig)) continue;
    struct sigaction cur;
    if (REAL(sigaction)(sig, NULL, &cur) != 0) continue;
    if (is_end_signal(sig) && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
      g_program_act[sig] = cur;
      if (REAL(sigaction)(sig, &ours, NULL) == 0) atomic_store_explicit(&g_mode[sig], kOurs, memory_order_relaxed);
    } else if (sets_handler(&cur)) {
      /* installed before this library was: a sanitizer's runtime, another library's constructor */
      const struct sigaction wrapped = wrapped_action(&cur);
      g_program_act[sig] = cur;
      if (REAL(sigaction)(sig, &wrapped, NULL) == 0)
        atomic_store_explicit(&g_mode[sig], wrapped_mode(&cur), memory_order_relaxed);
    }
  }
  atomic_store_explicit(&g_end_handlers, 1, memory_order_release);
  sig_unlock(&saved);
  (void)at_quick_exit(at_quick_exit_handler);
}

static int sets_default(const struct sigaction* act) { return act->sa_handler == SIG_DFL; }

/* Under g_sig_lock: the table agrees with the kernel. A disposition changed behind this library
 * (an inline system call, glibc's sigset/sigignore internals in another libc, a library that
 * calls the kernel itself) makes the entry plain kPass again, so that the program's next call
 * acts on what is really there; its SIG_DFL then gets ours back. */
static void resync(int sig) {
  const int mode = atomic_load_explicit(&g_mode[sig], memory_order_relaxed);
  if (mode == kPass) return;
  struct sigaction cur;
  if (REAL(sigaction)(sig, NULL, &cur) != 0) return;
  void (*want)(int, siginfo_t*, void*) = mode == kOurs ? end_signal_handler : program_trampoline;
  if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != want)
    atomic_store_explicit(&g_mode[sig], kPass, memory_order_relaxed);
}

static int sigaction_impl(int sig, const struct sigaction* act, struct sigaction* oldact,
                          int (*real)(int, const struct sigaction*, struct sigaction*)) {
  if (!is_virtualised(sig) || !atomic_load_explicit(&g_end_handlers, memory_order_acquire))
    return real(sig, act, oldact);
  struct sigaction want;
  if (act) want = *act; /* act and oldact may be one struct */
  sigset_t saved;
  sig_lock(&saved);
  resync(sig);
  const int mode = atomic_load_explicit(&g_mode[sig], memory_order_relaxed);
  struct sigaction prev;
  memset(&prev, 0, sizeof prev);
  int rc = 0;
  if (!act) {
    rc = mode == kPass ? real(sig, NULL, &prev) : 0;
  } else {
    struct sigaction install = want;
    int next = kPass;
    if (is_end_signal(sig) && sets_default(&want)) {
      install = our_action();
      next = kOurs;
    } else if (sets_handler(&want)) {
      install = wrapped_action(&want);
      next = wrapped_mode(&want);
    }
    if (mode == kOurs && next == kOurs) {
      rc = 0; /* SIG_DFL again: ours stays */
    } else {
      rc = real(sig, &install, &prev);
    }
    if (rc == 0) {
      const struct sigaction believed = g_program_act[sig];
      if (next != kPass) g_program_act[sig] = want;
      struct sigaction now;
      if ((next == kWrapped || next == kOneShot) && real(sig, NULL, &now) == 0)
        g_program_act[sig] = as_the_kernel_keeps(&want, &now);
      atomic_store_explicit(&g_mode[sig], next, memory_order_relaxed);
      if (mode != kPass) prev = believed;
    }
  }
  if (mode != kPass && !act) prev = g_program_act[sig];
  if (rc == 0 && oldact) *oldact = prev;
  const int err = errno;
  sig_unlock(&saved);
  errno = err;
  return rc;
}

/* syscall(SYS_rt_sigaction, sig, act, oldact, sigsetsize): the kernel's own struct, passed
 * through unchanged; then the table follows what the kernel now has (a SIG_DFL set this way
 * gets ours back, as sigaction's would), and the old action the kernel reported in place of ours
 * becomes what the program believes: its handler word everywhere, and on x86-64 and AArch64
 * (whose kernel struct is handler, flags, restorer, mask) its flags and mask too. An inline
 * system call instruction is not seen at all: resync finds it at the program's next sigaction. */
static long raw_rt_sigaction(long sig, long act, long oldact, long a3, long a4, long a5) {
  if (!is_virtualised((int)sig) || !atomic_load_explicit(&g_end_handlers, memory_order_acquire))
    return REAL(syscall)(SYS_rt_sigaction, sig, act, oldact, a3, a4, a5);
  sigset_t saved;
  sig_lock(&saved);
  resync((int)sig);
  const int mode = atomic_load_explicit(&g_mode[sig], memory_order_relaxed);
  const struct sigaction believed = g_program_act[sig];
  const long rc = REAL(syscall)(SYS_rt_sigaction, sig, act, oldact, a3, a4, a5);
  const int err = errno;
  if (rc == 0) {
    if (oldact && mode != kPass) {
      unsigned long* words = (unsigned long*)oldact;
      words[0] = (unsigned long)(uintptr_t)believed.sa_handler;
#if defined(__x86_64__) || defined(__aarch64__)
      words[1] = (unsigned long)believed.sa_flags;
      memcpy(&words[3], &believed.sa_mask, sizeof(unsigned long));
#endif
    }
    if (act) {
      struct sigaction now;
      if (REAL(sigaction)((int)sig, NULL, &now) == 0) {
        atomic_store_explicit(&g_mode[sig], kPass, memory_order_relaxed);
        if (is_end_signal((int)sig) && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL) {
          const struct sigaction ours = our_action();
          if (REAL(sigaction)((int)sig, &ours, NULL) == 0) {
            g_program_act[sig] = now;
            atomic_store_explicit(&g_mode[sig], kOurs, memory_order_relaxed);
          }
        } else if (sets_handler(&now)) {
          const struct sigaction wrapped = wrapped_action(&now);
          if (REAL(sigaction)((int)sig, &wrapped, NULL) == 0) {
            g_program_act[sig] = now;
            atomic_store_explicit(&g_mode[sig], wrapped_mode(&now), memory_order_relaxed);
          }
        }
      }
    }
  }
  sig_unlock(&saved);
  errno = err;
  return rc;
}

/* A sanitizer runtime preloaded before this library (the sanitizer presets' tests) installs its
 * own handlers for SIGSEGV and the like while it initialises, before any instrumented code may
 * run, and its REAL(sigaction) is this library's: under ThreadSanitizer the instrumented entry
 * of this function then crashed in TSan's not yet made thread state (every preloaded probe died
 * of SIGSEGV at start). So the entry points are not instrumented, and until the end handlers are
 * installed (the constructor; nothing is virtualised before that) they go straight to libc,
 * which is what sigaction_impl would do then. */
#if defined(__SANITIZE_THREAD__)
#define NO_TSAN __attribute__((no_sanitize_thread, noinline))
#else
#define NO_TSAN
#endif
/* A macro: a function of its own would be instrumented (and, at -O1, not inlined). */
#define end_handlers_installed() atomic_load_explicit(&g_end_handlers, memory_order_acquire)

EXPORT NO_TSAN int sigaction(int sig, const struct sigaction* act, struct sigaction* oldact) {
  if (!end_handlers_installed()) return REAL(sigaction)(sig, act, oldact);
  return sigaction_impl(sig, act, oldact, REAL(sigaction));
}
extern int __sigaction(int, const struct sigaction*, struct sigaction*);
EXPORT NO_TSAN int __sigaction(int sig, const struct sigaction* act, struct sigaction* oldact) {
  if (!end_handlers_installed()) return REAL(sigaction)(sig, act, oldact);
  return sigaction_impl(sig, act, oldact, REAL(sigaction));
}

/* signal and its relatives, for the virtualised signals, through sigaction_impl with glibc's
 * flags: BSD semantics (signal, bsd_signal, ssignal: SA_RESTART, the signal blocked in its
 * handler) and System V's (sysv_signal: SA_RESETHAND | SA_NODEFER). */
typedef void (*handler_t)(int);
static handler_t signal_like(int sig, handler_t h, int sysv, handler_t (*real)(int, handler_t)) {
  if (!is_virtualised(sig) || !atomic_load_explicit(&g_end_handlers, memory_order_acquire) || h == SIG_ERR)
    return real(sig, h);
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = h;
  sigemptyset(&act.sa_mask);
  if (sysv) {
    act.sa_flags = SA_RESETHAND | SA_NODEFER;
  } else {
    sigaddset(&act.sa_mask, sig);
    act.sa_flags = SA_RESTART;
  }
  if (sigaction_impl(sig, &act, &old, REAL(sigaction)) != 0) return SIG_ERR;
  return old.sa_handler;
}
EXPORT NO_TSAN handler_t signal(int sig, handler_t h) {
  if (!end_handlers_installed()) return REAL(signal)(sig, h);
  return signal_like(sig, h, 0, REAL(signal));
}
EXPORT NO_TSAN handler_t bsd_signal(int sig, handler_t h) {
  if (!end_handlers_installed()) return REAL(bsd_signal)(sig, h);
  return signal_like(sig, h, 0, REAL(bsd_signal));
}
EXPORT NO_TSAN handler_t ssignal(int sig, handler_t h) {
  if (!end_handlers_installed()) return REAL(ssignal)(sig, h);
  return signal_like(sig, h, 0, REAL(ssignal));
}
EXPORT NO_TSAN handler_t sysv_signal(int sig, handler_t h) {
  if (!end_handlers_installed()) return REAL(sysv_signal)(sig, h);
  return signal_like(sig, h, 1, REAL(sysv_signal));
}
extern handler_t __sysv_signal(int, handler_t);
EXPORT NO_TSAN handler_t __sysv_signal(int sig, handler_t h) {
  if (!end_handlers_installed()) return REAL(__sysv_signal)(sig, h);
  return signal_like(sig, h, 1, REAL(__sysv_signal));
}

/* glibc marks both deprecated; programs still call them, so they are interposed all the same. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* System V's sigset and sigignore: glibc sets the disposition with its internal sigaction,
 * which no preload sees, so that sigset(sig, h) would leave the table believing ours is there and
 * a later sigset(sig, SIG_DFL) would install the kernel's SIG_DFL for real, dropping the
 * write-back at that signal. Both are done here through sigaction_impl as glibc does them
 * (sigset: no flags, an empty mask, the signal unblocked, or only blocked for SIG_HOLD; the
 * result is SIG_HOLD when the signal was blocked before). */
EXPORT NO_TSAN handler_t sigset(int sig, handler_t disp) {
  if (!end_handlers_installed() || !is_virtualised(sig) || disp == SIG_ERR) return REAL(sigset)(sig, disp);
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, sig);
  struct sigaction prev;
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &one, &old) != 0) return SIG_ERR;
    if (sigaction_impl(sig, NULL, &prev, REAL(sigaction)) != 0) return SIG_ERR;
  } else {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = disp;
    sigemptyset(&act.sa_mask);
    if (sigaction_impl(sig, &act, &prev, REAL(sigaction)) != 0) return SIG_ERR;
    if (sigprocmask(SIG_UNBLOCK, &one, &old) != 0) return SIG_ERR;
  }
  return sigismember(&old, sig) ? SIG_HOLD : prev.sa_handler;
}
EXPORT NO_TSAN int sigignore(int sig) {
  if (!end_handlers_installed()) return REAL(sigignore)(sig);
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = SIG_IGN;
  sigemptyset(&act.sa_mask);
  return sigaction_impl(sig, &act, NULL, REAL(sigaction));
}
#pragma GCC diagnostic pop

/* ------------------------------------------------------------------------------------------ */
/* metadata: after the routed writes made before it                                           */
/*
 * A write-back after a metadata call would undo it: the kernel sets mtime (tar's and cp -p's
 * futimens, touch -r) and clears set-user-ID bits (chmod, chown) and file capabilities
 * (setxattr of security.capability, as setcap does) on every write. And rename
 * and link publish the file to other processes. So each call that names a routed file, by
 * descriptor or by a path that resolves to a routed inode, first hands that file's cached
 * writes to the kernel (tai_bridge_write_back_fd / _inode: after every earlier write of any
 * thread, no fsync), and then goes to libc. ftruncate is the layer's own (through the cache).
 * A path that names no routed file costs one fstatat, and none before the first routed open.
 */
static int anything_routed(void) {
  return atomic_load_explicit(&g_routed_ever, memory_order_relaxed) ||
         atomic_load_explicit(&g_adopt_pending, memory_order_relaxed);
}

static void write_back_fd_before(int fd, const char* call) {
  if (!anything_routed() || !routed(fd) || tai_bridge_nothing_cached()) return;
  const int saved = errno;
  ENTER();
  const int err = tai_bridge_write_back_fd(fd);
  LEAVE();
  if (err) say("write-back before %s (fd %d) failed: %s", call, fd, strerror(err));
  errno = saved;
}

/* flags: AT_SYMLINK_NOFOLLOW and AT_EMPTY_PATH as the call gives them (a path "" with
 * AT_EMPTY_PATH, or a null path for utimensat, names dirfd itself). */
static void write_back_path_before(int dirfd, const char* path, int flags, const char* call) {
  if (!anything_routed() || !engaged() || tai_bridge_nothing_cached()) return;
  if (!path || (path[0] == '\0' && (flags & AT_EMPTY_PATH))) {
    write_back_fd_before(dirfd, call);
    return;
  }
  const int saved = errno;
  struct stat st;
  if (REAL(fstatat)(dirfd, path, &st, flags & AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
    ENTER();
    const int err = tai_bridge_write_back_inode(st.st_dev, st.st_ino);
    LEAVE();
    if (err) say("write-back before %s (%s) failed: %s", call, path, strerror(err));
  }
  errno = saved;
}

EXPORT int utimensat(int dirfd, const char* path, const struct timespec times[2], int flags) {
  write_back_path_before(dirfd, path, flags, "utimensat");
  return REAL(utimensat)(dirfd, path, times, flags);
}
EXPORT int futimens(int fd, const struct timespec times[2]) {
  write_back_fd_before(fd, "futimens");
  return REAL(futimens)(fd, times);
}
EXPORT int utimes(const char* path, const struct timeval times[2]) {
  write_back_path_before(AT_FDCWD, path, 0, "utimes");
  return REAL(utimes)(path, times);
}
EXPORT int lutimes(const char* path, const struct timeval times[2]) {
  write_back_path_before(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, "lutimes");
  return REAL(lutimes)(path, times);
}
EXPORT int futimes(int fd, const struct timeval times[2]) {
  write_back_fd_before(fd, "futimes");
  return REAL(futimes)(fd, times);
}
EXPORT int futimesat(int dirfd, const char* path, const struct timeval times[2]) {
  write_back_path_before(dirfd, path, 0, "futimesat");
  return REAL(futimesat)(dirfd, path, times);
}
EXPORT int utime(const char* path, const struct utimbuf* times) {
  write_back_path_before(AT_FDCWD, path, 0, "utime");
  return REAL(utime)(path, times);
}
EXPORT int fchmod(int fd, mode_t mode) {
  write_back_fd_before(fd, "fchmod");
  return REAL(fchmod)(fd, mode);
}
EXPORT int fchmodat(int dirfd, const char* path, mode_t mode, int flags) {
  write_back_path_before(dirfd, path, flags, "fchmodat");
  return REAL(fchmodat)(dirfd, path, mode, flags);
}
EXPORT int chmod(const char* path, mode_t mode) {
  write_back_path_before(AT_FDCWD, path, 0, "chmod");
  return REAL(chmod)(path, mode);
}
EXPORT int fchown(int fd, uid_t uid, gid_t gid) {
  write_back_fd_before(fd, "fchown");
  return REAL(fchown)(fd, uid, gid);
}
EXPORT int fchownat(int dirfd, const char* path, uid_t uid, gid_t gid, int flags) {
  write_back_path_before(dirfd, path, flags, "fchownat");
  return REAL(fchownat)(dirfd, path, uid, gid, flags);
}
EXPORT int chown(const char* path, uid_t uid, gid_t gid) {
  write_back_path_before(AT_FDCWD, path, 0, "chown");
  return REAL(chown)(path, uid, gid);
}
EXPORT int lchown(const char* path, uid_t uid, gid_t gid) {
  write_back_path_before(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, "lchown");
  return REAL(lchown)(path, uid, gid);
}
EXPORT int rename(const char* from, const char* to) {
  order_point();
  write_back_path_before(AT_FDCWD, from, AT_SYMLINK_NOFOLLOW, "rename");
  struct name_call c = {NC_RENAMEAT2, AT_FDCWD, AT_FDCWD, from, to, 0};
  return ordered_name_call(&c, AT_FDCWD, from, AT_FDCWD, to);
}
EXPORT int renameat(int fromdir, const char* from, int todir, const char* to) {
  order_point();
  write_back_path_before(fromdir, from, AT_SYMLINK_NOFOLLOW, "renameat");
  struct name_call c = {NC_RENAMEAT2, fromdir, todir, from, to, 0};
  return ordered_name_call(&c, fromdir, from, todir, to);
}
EXPORT int renameat2(int fromdir, const char* from, int todir, const char* to, unsigned flags) {
  order_point();
  write_back_path_before(fromdir, from, AT_SYMLINK_NOFOLLOW, "renameat2");
  if (flags & RENAME_EXCHANGE) write_back_path_before(todir, to, AT_SYMLINK_NOFOLLOW, "renameat2");
  struct name_call c = {NC_RENAMEAT2, fromdir, todir, from, to, (int)flags};
  return ordered_name_call(&c, fromdir, from, todir, to);
}
EXPORT int link(const char* from, const char* to) {
  order_point();
  write_back_path_before(AT_FDCWD, from, AT_SYMLINK_NOFOLLOW, "link");
  struct name_call c = {NC_LINKAT, AT_FDCWD, AT_FDCWD, from, to, 0};
  return ordered_name_call(&c, AT_FDCWD, to, AT_FDCWD, NULL);
}
EXPORT int linkat(int fromdir, const char* from, int todir, const char* to, int flags) {
  order_point();
  write_back_path_before(fromdir, from, (flags & AT_EMPTY_PATH) | ((flags & AT_SYMLINK_FOLLOW) ? 0 : AT_SYMLINK_NOFOLLOW),
                         "linkat");
  struct name_call c = {NC_LINKAT, fromdir, todir, from, to, flags};
  return ordered_name_call(&c, todir, to, AT_FDCWD, NULL);
}
EXPORT int setxattr(const char* path, const char* name, const void* value, size_t size, int flags) {
  write_back_path_before(AT_FDCWD, path, 0, "setxattr");
  return REAL(setxattr)(path, name, value, size, flags);
}
EXPORT int lsetxattr(const char* path, const char* name, const void* value, size_t size, int flags) {
  write_back_path_before(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, "lsetxattr");
  return REAL(lsetxattr)(path, name, value, size, flags);
}
EXPORT int fsetxattr(int fd, const char* name, const void* value, size_t size, int flags) {
  write_back_fd_before(fd, "fsetxattr");
  return REAL(fsetxattr)(fd, name, value, size, flags);
}

/* ------------------------------------------------------------------------------------------ */
/* removing a name: after the epochs before it (TAI_FSYNC=order)                                */
/* SQLite's rollback journal is committed by its unlink: it must not reach the kernel before the
 * database writes of the epoch before it are durable. */
EXPORT int unlink(const char* path) {
  order_point();
  struct name_call c = {NC_UNLINKAT, AT_FDCWD, AT_FDCWD, path, NULL, 0};
  return ordered_name_call(&c, AT_FDCWD, path, AT_FDCWD, NULL);
}
EXPORT int unlinkat(int dirfd, const char* path, int flags) {
  order_point();
  struct name_call c = {NC_UNLINKAT, dirfd, AT_FDCWD, path, NULL, flags};
  return ordered_name_call(&c, dirfd, path, AT_FDCWD, NULL);
}
EXPORT int remove(const char* path) {
  order_point();
  struct name_call c = {NC_REMOVE, AT_FDCWD, AT_FDCWD, path, NULL, 0};
  return ordered_name_call(&c, AT_FDCWD, path, AT_FDCWD, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* making a name, removing a directory (TAI_FSYNC=order)                                      */
/* A directory the program makes and then makes files in: the files are synced with their epoch
 * (their directory is noted at their creation), and the new directory's own entry must be durable
 * with them, or a crash could lose the files, by their paths, while a later epoch's writes are on
 * the disk. Under TAI_PRELOAD_PATHS only; no wait elsewhere (nothing there is the order mode's). */
EXPORT int mkdir(const char* path, mode_t mode) {
  struct name_call c = {NC_MKDIRAT, AT_FDCWD, AT_FDCWD, path, NULL, (int)mode};
  return ordered_name_call(&c, AT_FDCWD, path, AT_FDCWD, NULL);
}
EXPORT int mkdirat(int dirfd, const char* path, mode_t mode) {
  struct name_call c = {NC_MKDIRAT, dirfd, AT_FDCWD, path, NULL, (int)mode};
  return ordered_name_call(&c, dirfd, path, AT_FDCWD, NULL);
}
EXPORT int rmdir(const char* path) {
  struct name_call c = {NC_RMDIR, AT_FDCWD, AT_FDCWD, path, NULL, 0};
  return ordered_name_call(&c, AT_FDCWD, path, AT_FDCWD, NULL);
}
EXPORT int symlink(const char* target, const char* linkpath) {
  struct name_call c = {NC_SYMLINKAT, AT_FDCWD, AT_FDCWD, linkpath, target, 0};
  return ordered_name_call(&c, AT_FDCWD, linkpath, AT_FDCWD, NULL);
}
EXPORT int symlinkat(const char* target, int newdirfd, const char* linkpath) {
  struct name_call c = {NC_SYMLINKAT, newdirfd, AT_FDCWD, linkpath, target, 0};
  return ordered_name_call(&c, newdirfd, linkpath, AT_FDCWD, NULL);
}

/* tai_preload_probe: a small unmodified C program for the preload tests (run_program_case.sh).
 * It exercises the POSIX behaviours a preload library must keep while it routes a file through
 * a cache: descriptors shared across fork, mmap over written data, O_APPEND from two descriptors,
 * a routed descriptor as stdout, stdio, write() from a signal handler, and close_range().
 *
 * Usage: tai_preload_probe <subcommand> <directory>
 * Every subcommand creates its files in <directory>, reads them back and prints what it read
 * (sizes, counts, FNV-1a digests) on stdout and never prints a path, so that the plain run and
 * the preloaded run print identical text. Any failed call or unexpected content prints a
 * message on stderr and exits 1. Plain C and libc only: it must know nothing about TAI. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *g_dir;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tai_preload_probe: ");
  vfprintf(stderr, fmt, ap);
  if (errno) fprintf(stderr, " (errno %d: %s)", errno, strerror(errno));
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static char *path_of(const char *name) {
  static char buf[4][4096];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
  return p;
}

static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* Deterministic bytes of every value (not only text), so that a byte lost or shifted shows. */
static void fill_pattern(unsigned char *buf, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (unsigned char)x;
  }
}

static void write_all(int fd, const void *buf, size_t n, const char *what) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write (%s)", what);
    p += w;
    n -= (size_t)w;
  }
}

static void pwrite_all(int fd, const void *buf, size_t n, off_t off, const char *what) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("pwrite (%s)", what);
    p += w;
    off += w;
    n -= (size_t)w;
  }
}

/* Reads the whole file through a fresh descriptor: what any other program would see. */
static unsigned char *slurp(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open %s for reading", path);
  struct stat st;
  if (fstat(fd, &st) != 0) die("fstat");
  size_t cap = (size_t)st.st_size + 1, n = 0;
  unsigned char *buf = malloc(cap);
  if (!buf) die("malloc");
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (!buf) die("realloc");
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("read");
    if (r == 0) break;
    n += (size_t)r;
  }
  if (n != (size_t)st.st_size) {
    errno = 0;
    die("read %zu bytes but fstat said %lld", n, (long long)st.st_size);
  }
  close(fd);
  *size = n;
  return buf;
}

static void print_file(const char *label, const char *path) {
  size_t n;
  unsigned char *buf = slurp(path, &n);
  printf("%s: size %zu fnv1a %016llx\n", label, n, (unsigned long long)fnv1a(buf, n));
  free(buf);
}

/* ---- fork: one open file description shared by parent and child --------------------------- */
enum { FORK_HEADER = 4096, FORK_REC = 128, FORK_RECS = 64, FORK_APPENDS = 16 };

static void fork_record(char *rec, char who, int i) {
  memset(rec, who, FORK_REC);
  snprintf(rec, FORK_REC, "%c record %04d", who, i);
  rec[FORK_REC - 1] = '\n';
}

static int cmd_fork(void) {
  const char *path = path_of("fork.dat");
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  unsigned char header[FORK_HEADER];
  fill_pattern(header, sizeof header, 1);
  write_all(fd, header, sizeof header, "header");
  /* Flush stdio before fork so that nothing buffered is printed twice. */
  fflush(stdout);
  /* Regions for the pwrites, far beyond what the write()s reach. */
  const off_t child_region = 1 << 20, parent_region = 2 << 20;
  pid_t pid = fork();
  if (pid < 0) die("fork");
  char rec[FORK_REC];
  if (pid == 0) {
    for (int i = 0; i < FORK_RECS; ++i) {
      fork_record(rec, 'c', i);
      pwrite_all(fd, rec, sizeof rec, child_region + (off_t)i * FORK_REC, "child pwrite");
    }
    /* write() moves the offset of the description the parent shares: the parent's write()s
     * below must land after these, as they do without the preload library. */
    for (int i = 0; i < FORK_APPENDS; ++i) {
      fork_record(rec, 'C', i);
      write_all(fd, rec, sizeof rec, "child write");
    }
    /* _exit, as most forking programs do (no atexit handlers, no destructors): a write() that
     * has returned is visible to every process whatever the writer does next. */
    _exit(0);
  }
  /* The parent writes its own region while the child runs. */
  for (int i = 0; i < FORK_RECS; ++i) {
    fork_record(rec, 'p', i);
    pwrite_all(fd, rec, sizeof rec, parent_region + (off_t)i * FORK_REC, "parent pwrite");
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) die("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    errno = 0;
    die("child failed (status %d)", status);
  }
  off_t pos = lseek(fd, 0, SEEK_CUR);
  printf("offset after the child: %lld\n", (long long)pos);
  for (int i = 0; i < FORK_APPENDS; ++i) {
    fork_record(rec, 'P', i);
    write_all(fd, rec, sizeof rec, "parent write");
  }
  printf("offset after the parent: %lld\n", (long long)lseek(fd, 0, SEEK_CUR));
  /* Read back through the same descriptor, then through a new one. */
  struct stat st;
  if (fstat(fd, &st) != 0) die("fstat");
  unsigned char *buf = malloc((size_t)st.st_size);
  if (!buf) die("malloc");
  if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) die("pread");
  printf("same descriptor: size %lld fnv1a %016llx\n", (long long)st.st_size,
         (unsigned long long)fnv1a(buf, (size_t)st.st_size));
  int bad = memcmp(buf, header, FORK_HEADER) != 0;
  for (int i = 0; i < FORK_APPENDS; ++i) {
    fork_record(rec, 'C', i);
    bad |= memcmp(buf + FORK_HEADER + i * FORK_REC, rec, FORK_REC) != 0;
    fork_record(rec, 'P', i);
    bad |= memcmp(buf + FORK_HEADER + (FORK_APPENDS + i) * FORK_REC, rec, FORK_REC) != 0;
  }
  for (int i = 0; i < FORK_RECS; ++i) {
    fork_record(rec, 'c', i);
    bad |= memcmp(buf + child_region + i * FORK_REC, rec, FORK_REC) != 0;
    fork_record(rec, 'p', i);
    bad |= memcmp(buf + parent_region + i * FORK_REC, rec, FORK_REC) != 0;
  }
  printf("records where expected: %s\n", bad ? "NO" : "yes");
  free(buf);
  if (close(fd) != 0) die("close");
  print_file("new descriptor", path);
  return bad;
}

/* ---- mmap: mapped bytes equal written bytes, and read() sees stores through a mapping ------ */
static int cmd_mmap(void) {
  const char *path = path_of("mmap.dat");
  const size_t n = 256 * 1024 + 100; /* not a multiple of the page size */
  unsigned char *data = malloc(n);
  if (!data) die("malloc");
  fill_pattern(data, n, 2);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  /* Several write()s and no fsync before the mapping: the mapping must show them anyway. */
  for (size_t off = 0; off < n; off += 10000) write_all(fd, data + off, n - off < 10000 ? n - off : 10000, "data");
  unsigned char *map = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("mmap PROT_READ");
  printf("read-only mapping: fnv1a %016llx equal to written: %s\n",
         (unsigned long long)fnv1a(map, n), memcmp(map, data, n) == 0 ? "yes" : "NO");
  int bad = memcmp(map, data, n) != 0;
  if (munmap(map, n) != 0) die("munmap");

  map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("mmap PROT_WRITE");
  for (size_t off = 0; off < n; off += 4096 + 17) {
    map[off] ^= 0xff;
    data[off] ^= 0xff;
  }
  memcpy(map + n - 5, "tail!", 5);
  memcpy(data + n - 5, "tail!", 5);
  if (msync(map, n, MS_SYNC) != 0) die("msync");
  if (munmap(map, n) != 0) die("munmap");
  unsigned char *back = malloc(n);
  if (!back) die("malloc");
  if (pread(fd, back, n, 0) != (ssize_t)n) die("pread after msync");
  bad |= memcmp(back, data, n) != 0;
  printf("read() after a shared writable mapping: fnv1a %016llx equal to stores: %s\n",
         (unsigned long long)fnv1a(back, n), memcmp(back, data, n) == 0 ? "yes" : "NO");
  /* A write() after the mapping is gone, then a last read of the whole file. */
  if (lseek(fd, 0, SEEK_END) != (off_t)n) die("lseek end");
  write_all(fd, "after the mapping\n", 18, "tail");
  if (close(fd) != 0) die("close");
  print_file("file", path);
  free(back);
  free(data);
  return bad;
}

/* ---- append: two O_APPEND descriptors, interleaved fixed-size records ---------------------- */
enum { APPEND_REC = 100, APPEND_RECS = 2000 };

static void append_record(char *rec, char who, int i) {
  memset(rec, '.', APPEND_REC);
  int k = snprintf(rec, APPEND_REC, "%c%06d:", who, i);
  rec[k] = '.';
  rec[APPEND_REC - 2] = who;
  rec[APPEND_REC - 1] = '\n';
}

static int cmd_append(void) {
  const char *path = path_of("append.dat");
  int a = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  int b = open(path, O_WRONLY | O_APPEND);
  if (a < 0 || b < 0) die("open");
  char rec[APPEND_REC];
  for (int i = 0; i < APPEND_RECS; ++i) {
    append_record(rec, 'a', i);
    write_all(a, rec, sizeof rec, "a");
    /* b writes two records for every one of a's in the first half, so the pattern is not a
     * plain alternation. */
    if (i < APPEND_RECS / 2) {
      append_record(rec, 'b', 2 * i);
      write_all(b, rec, sizeof rec, "b");
      append_record(rec, 'b', 2 * i + 1);
      write_all(b, rec, sizeof rec, "b");
    }
  }
  if (close(a) != 0 || close(b) != 0) die("close");
  size_t n;
  unsigned char *buf = slurp(path, &n);
  int count_a = 0, count_b = 0, bad = n % APPEND_REC != 0;
  for (size_t off = 0; off + APPEND_REC <= n; off += APPEND_REC) {
    char who = (char)buf[off];
    int *count = who == 'a' ? &count_a : who == 'b' ? &count_b : NULL;
    if (!count) {
      bad = 1;
      continue;
    }
    append_record(rec, who, *count);
    if (memcmp(buf + off, rec, APPEND_REC) != 0) bad = 1;
    ++*count;
  }
  printf("records a %d b %d, every record intact and in order: %s\n", count_a, count_b, bad ? "NO" : "yes");
  printf("size %zu fnv1a %016llx\n", n, (unsigned long long)fnv1a(buf, n));
  free(buf);
  return bad || count_a != APPEND_RECS || count_b != APPEND_RECS;
}

/* ---- dup2stdout: a routed file as fd 1, written by stdio and by write(1) ------------------ */
static int cmd_dup2stdout(void) {
  const char *path = path_of("stdout.txt");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  fflush(stdout);
  int saved = dup(1);
  if (saved < 0) die("dup");
  if (dup2(fd, 1) != 1) die("dup2");
  for (int i = 0; i < 100; ++i) printf("printf line %d\n", i);
  fflush(stdout);
  write_all(1, "write(1) line\n", 14, "fd 1");
  /* fd and 1 share one offset: this lands after the line above. */
  write_all(fd, "write(fd) line\n", 15, "fd");
  printf("printf after write\n");
  fflush(stdout);
  /* dup2 onto fd 1 closes the routed duplicate; then the original goes too. */
  if (dup2(saved, 1) != 1) die("dup2 back");
  close(saved);
  if (close(fd) != 0) die("close");
  print_file("stdout file", path);
  size_t n;
  unsigned char *buf = slurp(path, &n);
  int lines = 0;
  for (size_t i = 0; i < n; ++i) lines += buf[i] == '\n';
  const char *tail = "write(1) line\nwrite(fd) line\nprintf after write\n";
  int ok = n > strlen(tail) && memcmp(buf + n - strlen(tail), tail, strlen(tail)) == 0;
  printf("lines %d, order kept: %s\n", lines, ok ? "yes" : "NO");
  free(buf);
  return !ok || lines != 103;
}

/* ---- stdio: fopen/fwrite/fprintf/fflush/fsync/fseek/fread on a routed path ---------------- */
static int cmd_stdio(void) {
  const char *path = path_of("stdio.dat");
  FILE *f = fopen(path, "w+");
  if (!f) die("fopen");
  const size_t n = 100000;
  unsigned char *data = malloc(n);
  if (!data) die("malloc");
  fill_pattern(data, n, 3);
  if (fwrite(data, 1, n, f) != n) die("fwrite");
  for (int i = 0; i < 1000; ++i) fprintf(f, "fprintf line %d %x\n", i, i * 7919);
  if (fflush(f) != 0) die("fflush");
  if (fsync(fileno(f)) != 0) die("fsync");
  long end = ftell(f);
  if (fseek(f, 0, SEEK_SET) != 0) die("fseek");
  unsigned char *back = malloc(n);
  if (!back) die("malloc");
  if (fread(back, 1, n, f) != n) die("fread");
  int bad = memcmp(back, data, n) != 0;
  char line[100];
  if (!fgets(line, sizeof line, f)) die("fgets");
  bad |= strcmp(line, "fprintf line 0 0\n") != 0;
  /* Overwrite in the middle through stdio, then read the whole file with open/read. */
  if (fseek(f, 5000, SEEK_SET) != 0) die("fseek 5000");
  fputs("OVERWRITTEN BY STDIO", f);
  if (fclose(f) != 0) die("fclose");
  printf("stdio: end offset %ld, fread equal to fwrite: %s\n", end, bad ? "NO" : "yes");
  memcpy(data + 5000, "OVERWRITTEN BY STDIO", 20);
  size_t got;
  unsigned char *all = slurp(path, &got);
  bad |= got != (size_t)end || memcmp(all, data, n) != 0;
  printf("open/read: size %zu fnv1a %016llx, prefix as written: %s\n", got,
         (unsigned long long)fnv1a(all, got), memcmp(all, data, n) == 0 ? "yes" : "NO");
  /* Append mode through stdio. */
  f = fopen(path, "a");
  if (!f) die("fopen a");
  fprintf(f, "appended by stdio\n");
  if (fclose(f) != 0) die("fclose a");
  print_file("after append", path);
  free(all);
  free(back);
  free(data);
  return bad;
}

/* ---- signal: write() from a SIGALRM handler while the main loop writes the same file ------ */
enum { SIG_REC = 64, SIG_HANDLER_RECS = 100, SIG_MIN_MAIN_RECS = 1000 };
static int g_sig_fd = -1;
static volatile sig_atomic_t g_handler_recs;

static void sig_record(char *rec, char who, int i) {
  /* Only async-signal-safe work: no snprintf in the handler. */
  memset(rec, who, SIG_REC);
  for (int k = 8; k >= 1; --k, i /= 10) rec[k] = (char)('0' + i % 10);
  rec[SIG_REC - 1] = '\n';
}

/* What a handler may rely on, whether or not the signal had to wait for the layer: the siginfo
 * the kernel made (the interval timer's SIGALRM comes with SI_KERNEL, not the SI_TKILL of a
 * signal a thread sent itself), and the mask the kernel gives a handler (the signal itself and
 * the handler's sa_mask blocked). */
static volatile sig_atomic_t g_handler_odd;

static void on_alarm(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  int saved = errno;
  sigset_t cur;
  if (info->si_code != SI_KERNEL || sigprocmask(SIG_BLOCK, NULL, &cur) != 0 || !sigismember(&cur, sig) ||
      !sigismember(&cur, SIGUSR2) || sigismember(&cur, SIGUSR1))
    ++g_handler_odd;
  if (g_handler_recs < SIG_HANDLER_RECS) {
    char rec[SIG_REC];
    sig_record(rec, 'H', g_handler_recs);
    /* Like a program that logs from a handler: a plain write() on the shared descriptor. */
    if (write(g_sig_fd, rec, SIG_REC) != SIG_REC) _exit(3);
    ++g_handler_recs;
  }
  errno = saved;
}

static int cmd_signal(void) {
  const char *path = path_of("signal.dat");
  g_sig_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (g_sig_fd < 0) die("open");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_alarm;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR2);
  if (sigaction(SIGALRM, &sa, NULL) != 0) die("sigaction");
  struct sigaction back;
  if (sigaction(SIGALRM, NULL, &back) != 0) die("sigaction query");
  printf("SIGALRM's disposition reads back as set: %s\n",
         back.sa_sigaction == on_alarm && (back.sa_flags & (SA_RESTART | SA_SIGINFO)) == (SA_RESTART | SA_SIGINFO) &&
                 sigismember(&back.sa_mask, SIGUSR2) && !sigismember(&back.sa_mask, SIGUSR1)
             ? "yes"
             : "NO");
  struct itimerval it = {{0, 500}, {0, 500}};
  if (setitimer(ITIMER_REAL, &it, NULL) != 0) die("setitimer");
  char rec[SIG_REC];
  int main_recs = 0;
  while (g_handler_recs < SIG_HANDLER_RECS || main_recs < SIG_MIN_MAIN_RECS) {
    sig_record(rec, 'M', main_recs);
    write_all(g_sig_fd, rec, SIG_REC, "main");
    ++main_recs;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  if (setitimer(ITIMER_REAL, &off, NULL) != 0) die("setitimer off");
  signal(SIGALRM, SIG_IGN);
  if (fsync(g_sig_fd) != 0) die("fsync");
  if (close(g_sig_fd) != 0) die("close");
  /* Whatever interleaving the timer gave: the file holds exactly the records written, each
   * whole, and each writer's records in its own order. */
  size_t n;
  unsigned char *buf = slurp(path, &n);
  int m = 0, h = 0, bad = n != (size_t)(main_recs + SIG_HANDLER_RECS) * SIG_REC;
  for (size_t off2 = 0; off2 + SIG_REC <= n; off2 += SIG_REC) {
    char who = (char)buf[off2];
    int *count = who == 'M' ? &m : who == 'H' ? &h : NULL;
    if (!count) {
      bad = 1;
      continue;
    }
    sig_record(rec, who, *count);
    if (memcmp(buf + off2, rec, SIG_REC) != 0) bad = 1;
    ++*count;
  }
  printf("handler records %d, main records >= %d: %s, size = records x %d: %s, records intact: %s\n", h,
         SIG_MIN_MAIN_RECS, m >= SIG_MIN_MAIN_RECS ? "yes" : "NO",
         SIG_REC, n == (size_t)(main_recs + SIG_HANDLER_RECS) * SIG_REC ? "yes" : "NO",
         bad ? "NO" : "yes");
  printf("every handler call saw the timer's siginfo and the handler's mask: %s\n", g_handler_odd ? "NO" : "yes");
  if (bad) fprintf(stderr, "signal: size %zu, main wrote %d, read back main %d handler %d\n", n, main_recs, m, h);
  if (g_handler_odd) fprintf(stderr, "signal: %d handler calls saw another siginfo or mask\n", (int)g_handler_odd);
  free(buf);
  return bad || m != main_recs || h != SIG_HANDLER_RECS || g_handler_odd;
}

/* ---- fault: a write whose buffer the program cannot read, with a SIGSEGV handler ----------
 * The kernel answers EFAULT. The preload library copies the buffer inside the layer, where the
 * copy faults: the program's handler must not run there (it would leave the layer's locks held
 * for good when it jumps out), so the process ends by SIGSEGV. Either way it must end, and a
 * signal after it must still reach its handler: fault_in_layer.sh checks that, not this
 * program's output alone. */
static sigjmp_buf g_fault_jmp;
static volatile sig_atomic_t g_usr1_runs;
static void on_segv_jump(int sig) {
  (void)sig;
  siglongjmp(g_fault_jmp, 1);
}
static void on_usr1_count(int sig) {
  (void)sig;
  ++g_usr1_runs;
}
static int cmd_fault(void) {
  const char *path = path_of("fault.dat");
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  write_all(fd, "first record\n", 13, "first");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv_jump;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, NULL) != 0) die("sigaction SIGSEGV");
  sa.sa_handler = on_usr1_count;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) die("sigaction SIGUSR1");
  if (sigsetjmp(g_fault_jmp, 1) == 0) {
    const ssize_t n = write(fd, (const void *)16, 4096);
    printf("write of an unreadable buffer: %s\n", n < 0 && errno == EFAULT ? "EFAULT" : "another answer");
  } else {
    printf("write of an unreadable buffer: the SIGSEGV handler ran\n");
  }
  fflush(stdout);
  raise(SIGUSR1);
  printf("SIGUSR1 handler ran after it: %s\n", g_usr1_runs == 1 ? "yes" : "NO");
  write_all(fd, "last record\n", 12, "last");
  if (close(fd) != 0) die("close");
  return g_usr1_runs == 1 ? 0 : 1;
}

/* ---- closerange: close_range(3, ~0U, 0) closes every descriptor the program did not name --- */
static int my_close_range(unsigned first, unsigned last) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  return close_range(first, last, 0); /* the libc wrapper, which a preload library can see */
#else
  return (int)syscall(SYS_close_range, first, last, 0);
#endif
}

static int cmd_closerange(void) {
  const char *path = path_of("closerange.dat");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  unsigned char block[8192];
  fill_pattern(block, sizeof block, 4);
  for (int i = 0; i < 16; ++i) write_all(fd, block, sizeof block, "before close_range");
  /* What daemons and subprocess launchers do: close everything above stderr. Descriptors a
   * preload library opened for itself go too; the program must not notice. */
  if (my_close_range(3, ~0U) != 0) die("close_range");
  fd = open(path, O_WRONLY | O_APPEND);
  if (fd < 0) die("open after close_range");
  for (int i = 0; i < 16; ++i) write_all(fd, block, sizeof block / 2, "after close_range");
  if (fsync(fd) != 0) die("fsync after close_range");
  if (close(fd) != 0) die("close after close_range");
  size_t n;
  unsigned char *buf = slurp(path, &n);
  int bad = n != 16 * sizeof block + 16 * (sizeof block / 2);
  for (int i = 0; i < 16 && !bad; ++i) bad |= memcmp(buf + i * sizeof block, block, sizeof block) != 0;
  for (int i = 0; i < 16 && !bad; ++i)
    bad |= memcmp(buf + 16 * sizeof block + i * (sizeof block / 2), block, sizeof block / 2) != 0;
  printf("after close_range: size %zu fnv1a %016llx, content as written: %s\n", n,
         (unsigned long long)fnv1a(buf, n), bad ? "NO" : "yes");
  free(buf);
  return bad;
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*run)(void);
  } cmds[] = {{"fork", cmd_fork},   {"mmap", cmd_mmap},     {"append", cmd_append}, {"dup2stdout", cmd_dup2stdout},
              {"stdio", cmd_stdio}, {"signal", cmd_signal}, {"closerange", cmd_closerange},
              {"fault", cmd_fault}};
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    puts("tai_preload_probe");
    return 0;
  }
  if (argc != 3) {
    fprintf(stderr, "usage: %s fork|mmap|append|dup2stdout|stdio|signal|closerange <directory>\n", argv[0]);
    return 2;
  }
  g_dir = argv[2];
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; ++i) {
    if (strcmp(argv[1], cmds[i].name) == 0) {
      errno = 0;
      int bad = cmds[i].run();
      if (fflush(stdout) != 0) die("fflush stdout");
      if (bad) fprintf(stderr, "tai_preload_probe %s: the content read back is not what was written\n", argv[1]);
      return bad ? 1 : 0;
    }
  }
  fprintf(stderr, "tai_preload_probe: unknown subcommand %s\n", argv[1]);
  return 2;
}

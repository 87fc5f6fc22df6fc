/* tai_preload_ends: writes files and then ends in one chosen way, for the preload tests
 * (run_program_case.sh, the end_* cases). What write() acknowledged must be in the files
 * afterwards however the program ended (SIGKILL aside, which only the write-behind deadline
 * covers): the harness runs this once plain and once preloaded and byte-compares the files.
 *
 * Usage: tai_preload_ends <way> <directory>
 * Ways: exit return _exit _Exit exit_group quick_exit abort exec thread_exit sync_exit vfork spawn
 *       sigterm sigint sighup sigquit sigpipe sigsegv sigbus sigfpe sigabrt sigxfsz
 *       virtual (the program's own view of its signal dispositions, then SIGTERM)
 *       resethand (a SIGTERM handler with SA_RESETHAND: runs once, then the default action)
 *       sysv_signal, bsd_signal, sigset (the same through those APIs), raw_sigaction
 *       (syscall(SYS_rt_sigaction)), inline_sigaction (the system call instruction itself)
 *       wait (writes, says "waiting for a signal", and waits: end_bound.sh signals it)
 *       sigkill (a child writes, waits past the write-behind deadline, SIGKILLs itself)
 * Every way writes end.dat (records through write(), one overwritten with pwrite) and
 * stream.dat (fwrite + fflush: acknowledged by the flush) and leaves both open. stdout gets
 * one line per step, written with write(2) so that no stdio buffer is lost with the process.
 * Plain C and libc only: it knows nothing about TAI. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;
static const char* g_dir;

static void say(const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  (void)!write(1, line, (size_t)n);
}

static void die(const char* what) {
  fprintf(stderr, "tai_preload_ends: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Per thread: the thread_exit and sync_exit cases open their busy files from two threads at
 * once, and a shared ring of buffers gave one of them the other's half-written path (ENOENT). */
static const char* path_of(const char* name) {
  static __thread char buf[4][4096];
  static __thread int next;
  char* p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
  return p;
}

/* 300 records of 1000 bytes (not a multiple of any block size), record 17 overwritten. */
static void write_records(const char* name, int records, char tag) {
  const int fd = open(path_of(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open");
  char rec[1000];
  for (int i = 0; i < records; ++i) {
    memset(rec, 'a' + i % 26, sizeof rec);
    snprintf(rec, sizeof rec, "%c record %d\n", tag, i);
    rec[sizeof rec - 1] = '\n';
    if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec) die("write");
  }
  memset(rec, '#', 100);
  if (pwrite(fd, rec, 100, 17 * 1000 + 10) != 100) die("pwrite");
  /* left open on purpose: the end of the program is what must keep it */
}

static void write_all(void) {
  write_records("end.dat", 300, 'E');
  FILE* f = fopen(path_of("stream.dat"), "w");
  if (!f) die("fopen");
  for (int i = 0; i < 5000; ++i) fprintf(f, "stream line %d\n", i);
  if (fflush(f) != 0) die("fflush");
  say("wrote end.dat and stream.dat");
}

/* thread_exit: two threads keep writing their own busy files while a third calls exit(). */
static volatile int g_ready;
static void* busy(void* arg) {
  const char* name = arg;
  const int fd = open(path_of(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open busy");
  __atomic_add_fetch(&g_ready, 1, __ATOMIC_SEQ_CST);
  char buf[333];
  memset(buf, 'b', sizeof buf);
  for (;;)
    if (write(fd, buf, sizeof buf) < 0) break;
  return NULL;
}
/* sync_exit: the same with an fdatasync after every write (under TAI_FSYNC=order each closes an
 * epoch, which the exit handler's last epoch must not wait behind for ever). */
static void* busy_sync(void* arg) {
  const char* name = arg;
  const int fd = open(path_of(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open busy");
  __atomic_add_fetch(&g_ready, 1, __ATOMIC_SEQ_CST);
  char buf[333];
  memset(buf, 'b', sizeof buf);
  for (;;)
    if (write(fd, buf, sizeof buf) < 0 || fdatasync(fd) != 0) break;
  return NULL;
}
static void* exiter(void* arg) {
  (void)arg;
  while (__atomic_load_n(&g_ready, __ATOMIC_SEQ_CST) < 2) usleep(1000);
  usleep(20000);
  say("exit from a thread while two others write");
  exit(0);
}

static void on_usr1(int sig) {
  (void)sig;
  say("SIGUSR1 handler ran");
}

static const char* disposition(int sig) {
  struct sigaction cur;
  if (sigaction(sig, NULL, &cur) != 0) return "error";
  if (cur.sa_handler == SIG_DFL) return "SIG_DFL";
  if (cur.sa_handler == SIG_IGN) return "SIG_IGN";
  return "handler";
}

/* Signals that do not end the process get their handlers wrapped by the preload (the layer
 * holds a signal off while its thread is inside it): the program must see its own handler,
 * flags and mask, and the handler the kernel's siginfo and mask. */
static volatile sig_atomic_t g_chld_code, g_chld_status, g_rt_value, g_winch_runs, g_mask_ok = 1;
static void on_chld(int sig, siginfo_t* info, void* uc) {
  (void)uc;
  sigset_t cur;
  if (sigprocmask(SIG_BLOCK, NULL, &cur) != 0 || !sigismember(&cur, sig) || !sigismember(&cur, SIGUSR2)) g_mask_ok = 0;
  g_chld_code = info->si_code;
  g_chld_status = info->si_status;
}
static void on_rt(int sig, siginfo_t* info, void* uc) {
  (void)uc;
  sigset_t cur;
  /* SA_NODEFER: the signal itself is not blocked in its handler */
  if (sigprocmask(SIG_BLOCK, NULL, &cur) != 0 || sigismember(&cur, sig)) g_mask_ok = 0;
  g_rt_value = info->si_code == SI_QUEUE ? info->si_value.sival_int : -1;
}
static void on_winch(int sig) {
  ++g_winch_runs;
  say("SIGWINCH handler ran; SIGWINCH now %s", disposition(sig));
}
static void other_dispositions(void) {
  struct sigaction a, back;
  memset(&a, 0, sizeof a);
  a.sa_sigaction = on_chld;
  a.sa_flags = SA_SIGINFO | SA_NOCLDSTOP | SA_RESTART;
  sigemptyset(&a.sa_mask);
  sigaddset(&a.sa_mask, SIGUSR2);
  if (sigaction(SIGCHLD, &a, NULL) != 0) die("sigaction SIGCHLD");
  if (sigaction(SIGCHLD, NULL, &back) != 0) die("sigaction SIGCHLD query");
  say("SIGCHLD reads back: handler %s, flags %s, mask %s", back.sa_sigaction == on_chld ? "h" : "other",
      (back.sa_flags & (SA_SIGINFO | SA_NOCLDSTOP | SA_RESTART)) == (SA_SIGINFO | SA_NOCLDSTOP | SA_RESTART) &&
              !(back.sa_flags & SA_RESETHAND)
          ? "as set"
          : "other",
      sigismember(&back.sa_mask, SIGUSR2) && !sigismember(&back.sa_mask, SIGUSR1) ? "as set" : "other");
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) _exit(7);
  while (g_chld_code == 0) sigsuspend(&old);
  sigprocmask(SIG_SETMASK, &old, NULL);
  (void)waitpid(pid, NULL, 0);
  say("SIGCHLD handler: %s, status %d", g_chld_code == CLD_EXITED ? "CLD_EXITED" : "other", (int)g_chld_status);
  const int rt = SIGRTMIN + 2;
  memset(&a, 0, sizeof a);
  a.sa_sigaction = on_rt;
  a.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&a.sa_mask);
  if (sigaction(rt, &a, NULL) != 0) die("sigaction SIGRTMIN+2");
  union sigval v = {.sival_int = 42};
  if (sigqueue(getpid(), rt, v) != 0) die("sigqueue");
  say("SIGRTMIN+2 handler saw the queued value %d", (int)g_rt_value);
  void (*prev)(int) = signal(SIGWINCH, on_winch);
  say("signal(SIGWINCH, h) returned %s", prev == SIG_DFL ? "SIG_DFL" : "other");
  memset(&a, 0, sizeof a);
  a.sa_handler = on_winch;
  a.sa_flags = SA_RESETHAND;
  sigemptyset(&a.sa_mask);
  if (sigaction(SIGWINCH, &a, &back) != 0) die("sigaction SIGWINCH");
  say("SIGWINCH was %s", back.sa_handler == on_winch ? "h" : "other");
  raise(SIGWINCH);
  raise(SIGWINCH); /* after the reset: the default action, which for SIGWINCH is to ignore it */
  say("SIGWINCH handler ran %d time(s); now %s; handler masks as the kernel gives them: %s", (int)g_winch_runs,
      disposition(SIGWINCH), g_mask_ok ? "yes" : "NO");
}

/* What the program sees of its dispositions must not change under the preload. */
static void virtual_dispositions(void) {
  say("SIGTERM at start: %s", disposition(SIGTERM));
  void (*old)(int) = signal(SIGTERM, on_usr1);
  say("signal(SIGTERM, h) returned %s; now %s", old == SIG_DFL ? "SIG_DFL" : "other", disposition(SIGTERM));
  old = signal(SIGTERM, SIG_DFL);
  say("signal(SIGTERM, SIG_DFL) returned %s; now %s", old == on_usr1 ? "h" : "other", disposition(SIGTERM));
  struct sigaction ign, prev;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  if (sigaction(SIGINT, &ign, &prev) != 0) die("sigaction");
  say("SIGINT was %s; now %s", prev.sa_handler == SIG_DFL ? "SIG_DFL" : "other", disposition(SIGINT));
  raise(SIGINT);
  say("raised SIGINT while ignored: still running");
  struct sigaction h;
  memset(&h, 0, sizeof h);
  h.sa_handler = on_usr1;
  sigemptyset(&h.sa_mask);
  if (sigaction(SIGUSR1, &h, NULL) != 0) die("sigaction");
  raise(SIGUSR1);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  if (sigaction(SIGUSR1, &dfl, &prev) != 0) die("sigaction");
  say("SIGUSR1 was %s; now %s", prev.sa_handler == on_usr1 ? "h" : "other", disposition(SIGUSR1));
  other_dispositions();
}

/* Disposition changes outside sigaction and signal. Each says what it saw (the transcripts of
 * the plain and the preloaded run are compared), writes the files, and ends by SIGTERM. */
static void on_term_once(int sig) {
  say("SIGTERM handler ran; SIGTERM now %s", disposition(sig));
  raise(sig); /* the reset made it the default action: pending now, or at once with SA_NODEFER */
}
static void on_term_info(int sig, siginfo_t* info, void* uc) {
  (void)uc;
  say("SIGTERM handler (siginfo, code %s) ran; SIGTERM now %s", info->si_code == SI_TKILL ? "SI_TKILL" : "other",
      disposition(sig));
  raise(sig);
}
static void on_term_bsd(int sig) {
  say("SIGTERM handler ran; SIGTERM now %s", disposition(sig));
  signal(sig, SIG_DFL);
  raise(sig);
}
static const char* name_of(void (*h)(int)) {
  if (h == SIG_DFL) return "SIG_DFL";
  if (h == SIG_IGN) return "SIG_IGN";
  if (h == SIG_ERR) return "SIG_ERR";
  if (h == SIG_HOLD) return "SIG_HOLD";
  if (h == on_term_once || h == on_term_bsd) return "h";
  return "other";
}

/* The kernel's struct for rt_sigaction on x86-64 and AArch64: handler, flags, restorer, mask. */
struct kernel_act {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  unsigned long mask;
};

/* rt_sigaction by the system call instruction itself: what a static or assembly runtime does,
 * which no symbol interposition sees. Elsewhere than x86-64 and AArch64, through syscall(). */
static long inline_rt_sigaction(int sig, const struct kernel_act* act, struct kernel_act* old) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = 8;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "0"((long)SYS_rt_sigaction), "D"((long)sig), "S"(act), "d"(old), "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = SYS_rt_sigaction;
  register long x0 __asm__("x0") = sig;
  register long x1 __asm__("x1") = (long)act;
  register long x2 __asm__("x2") = (long)old;
  register long x3 __asm__("x3") = 8;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  return x0;
#else
  return syscall(SYS_rt_sigaction, sig, act, old, 8);
#endif
}

/* sigset and sigignore are deprecated in glibc, and still what some programs call. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void other_apis(const char* way) {
  if (strcmp(way, "resethand") == 0) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_term_info;
    a.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&a.sa_mask);
    if (sigaction(SIGTERM, &a, NULL) != 0) die("sigaction");
    struct sigaction cur;
    if (sigaction(SIGTERM, NULL, &cur) != 0) die("sigaction");
    say("SIGTERM handler installed with SA_RESETHAND: %s, flags kept %s", disposition(SIGTERM),
        (cur.sa_flags & SA_RESETHAND) && cur.sa_sigaction == on_term_info ? "yes" : "no");
  } else if (strcmp(way, "sysv_signal") == 0) {
    void (*old)(int) = sysv_signal(SIGTERM, on_term_once);
    say("sysv_signal(SIGTERM, h) returned %s; now %s", name_of(old), disposition(SIGTERM));
  } else if (strcmp(way, "bsd_signal") == 0) {
    void (*(*bsd)(int, void (*)(int)))(int) = (void (*(*)(int, void (*)(int)))(int))dlsym(RTLD_DEFAULT, "bsd_signal");
    if (!bsd) {
      say("bsd_signal is not exported: signal instead");
      bsd = signal;
    }
    void (*old)(int) = bsd(SIGTERM, on_term_bsd);
    say("bsd_signal(SIGTERM, h) returned %s; now %s", name_of(old), disposition(SIGTERM));
  } else if (strcmp(way, "sigset") == 0) {
    void (*old)(int) = sigset(SIGTERM, SIG_HOLD);
    say("sigset(SIGTERM, SIG_HOLD) returned %s", name_of(old));
    old = sigset(SIGTERM, on_term_bsd);
    say("sigset(SIGTERM, h) returned %s; now %s", name_of(old), disposition(SIGTERM));
    old = sigset(SIGTERM, SIG_DFL);
    say("sigset(SIGTERM, SIG_DFL) returned %s; now %s", name_of(old), disposition(SIGTERM));
    old = sigset(SIGINT, SIG_IGN);
    if (sigignore(SIGINT) != 0) die("sigignore");
    say("sigset(SIGINT, SIG_IGN) returned %s; after sigignore SIGINT is %s", name_of(old), disposition(SIGINT));
  } else if (strcmp(way, "raw_sigaction") == 0) {
    struct kernel_act k, old;
    memset(&old, 0, sizeof old);
    if (syscall(SYS_rt_sigaction, SIGTERM, NULL, &old, 8) != 0) die("rt_sigaction");
    say("rt_sigaction: SIGTERM at start %s", name_of(old.handler));
    if (signal(SIGTERM, on_term_bsd) == SIG_ERR) die("signal");
    memset(&k, 0, sizeof k);
    k.handler = SIG_DFL;
    if (syscall(SYS_rt_sigaction, SIGTERM, &k, &old, 8) != 0) die("rt_sigaction");
    say("rt_sigaction(SIGTERM, SIG_DFL) saw %s; now %s", name_of(old.handler), disposition(SIGTERM));
  } else if (strcmp(way, "inline_sigaction") == 0) {
    struct kernel_act k;
    memset(&k, 0, sizeof k);
    k.handler = SIG_IGN;
    if (inline_rt_sigaction(SIGTERM, &k, NULL) != 0) die("inline rt_sigaction");
    raise(SIGTERM);
    say("SIGTERM ignored by an inline rt_sigaction: still running");
    void (*old)(int) = signal(SIGTERM, SIG_DFL);
    say("signal(SIGTERM, SIG_DFL) returned %s; now %s", name_of(old), disposition(SIGTERM));
  }
}
#pragma GCC diagnostic pop

/* SIG_DFL first: a shell may have started this with some signals ignored (a background job's
 * SIGINT and SIGQUIT). */
static void default_action(int sig) {
  if (signal(sig, SIG_DFL) == SIG_ERR) die("signal");
}

static void end_by_signal(int sig) {
  default_action(sig);
  say("ending by signal %d", sig);
  raise(sig);
  say("still alive after signal %d", sig);
  exit(2);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <way> <directory>\n", argv[0]);
    return 2;
  }
  const char* way = argv[1];
  g_dir = argv[2];

  if (strcmp(way, "sigkill") == 0) {
    /* In a fresh image (fork+exec), so that the child routes its files itself. */
    const pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      /* Without TAI's early write-back every 8 MiB (which the busy loop would trigger), only
       * the write-behind deadline is left to hand end.dat over (no meaning without TAI). */
      setenv("TAI_START_WRITEBACK", "0", 1);
      execl("/proc/self/exe", argv[0], "sigkill_child", g_dir, (char*)NULL);
      _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) die("waitpid");
    if (WIFSIGNALED(status)) say("child killed by signal %d", WTERMSIG(status));
    else say("child exited with %d", WEXITSTATUS(status));
    return 0;
  }

  if (strcmp(way, "virtual") == 0) virtual_dispositions();
  other_apis(way);
  write_all();

  if (strcmp(way, "wait") == 0) {
    say("waiting for a signal");
    for (;;) pause();
  }
  if (strcmp(way, "resethand") == 0 || strcmp(way, "sysv_signal") == 0 || strcmp(way, "bsd_signal") == 0) {
    say("raising SIGTERM");
    raise(SIGTERM);
    say("still alive after SIGTERM");
    return 2;
  }
  if (strcmp(way, "sigset") == 0 || strcmp(way, "raw_sigaction") == 0 || strcmp(way, "inline_sigaction") == 0) {
    say("raising SIGTERM");
    raise(SIGTERM);
    say("still alive after SIGTERM");
    return 2;
  }

  if (strcmp(way, "exit") == 0) exit(0);
  if (strcmp(way, "return") == 0) return 0;
  if (strcmp(way, "_exit") == 0) _exit(0);
  if (strcmp(way, "_Exit") == 0) _Exit(0);
  if (strcmp(way, "exit_group") == 0) {
    syscall(SYS_exit_group, 0);
    return 3;
  }
  if (strcmp(way, "quick_exit") == 0) quick_exit(0);
  if (strcmp(way, "abort") == 0) abort();
  if (strcmp(way, "exec") == 0) {
    execl("/bin/true", "true", (char*)NULL);
    die("execl");
  }
  if (strcmp(way, "thread_exit") == 0 || strcmp(way, "sync_exit") == 0) {
    void* (*const body)(void*) = strcmp(way, "sync_exit") == 0 ? busy_sync : busy;
    pthread_t t[3];
    pthread_create(&t[0], NULL, body, (void*)"busy-1.dat");
    pthread_create(&t[1], NULL, body, (void*)"busy-2.dat");
    pthread_create(&t[2], NULL, exiter, NULL);
    for (;;) pause();
  }
  if (strcmp(way, "vfork") == 0 || strcmp(way, "spawn") == 0) {
    pid_t pid;
    char* args[] = {(char*)"true", NULL};
    if (strcmp(way, "vfork") == 0) {
      pid = vfork();
      if (pid == 0) {
        execv("/bin/true", args);
        _exit(127);
      }
    } else if (posix_spawn(&pid, "/bin/true", NULL, NULL, args, environ) != 0) {
      die("posix_spawn");
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) die("waitpid");
    say("child exited with %d", WEXITSTATUS(status));
    write_records("after-child.dat", 77, 'A');
    _exit(0);
  }
  if (strcmp(way, "sigterm") == 0 || strcmp(way, "virtual") == 0) end_by_signal(SIGTERM);
  if (strcmp(way, "sigint") == 0) end_by_signal(SIGINT);
  if (strcmp(way, "sighup") == 0) end_by_signal(SIGHUP);
  if (strcmp(way, "sigquit") == 0) end_by_signal(SIGQUIT);
  if (strcmp(way, "sigfpe") == 0) end_by_signal(SIGFPE);
  if (strcmp(way, "sigbus") == 0) end_by_signal(SIGBUS);
  if (strcmp(way, "sigabrt") == 0) end_by_signal(SIGABRT);
  if (strcmp(way, "sigxfsz") == 0) end_by_signal(SIGXFSZ);
  if (strcmp(way, "sigpipe") == 0) {
    int p[2];
    default_action(SIGPIPE);
    if (pipe(p) != 0) die("pipe");
    close(p[0]);
    say("writing into a pipe without a reader");
    (void)!write(p[1], "x", 1);
    say("still alive after the write");
    return 2;
  }
  if (strcmp(way, "sigsegv") == 0) {
    default_action(SIGSEGV);
    say("dereferencing a null pointer");
    volatile int* volatile nowhere = NULL; /* volatile: the compiler cannot see it is null */
    *nowhere = 1;
    return 2;
  }
  if (strcmp(way, "sigkill_child") == 0) {
    /* Busy past the write-behind deadline (TAI_WRITE_BEHIND_MS, 200 by default): one block
     * rewritten in a loop for a second, so that the cache never idles long enough for the
     * controller's own idle write-back, and nothing but the deadline hands end.dat over. */
    const int fd = open(path_of("busy.dat"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open busy");
    char block[4096];
    memset(block, 'k', sizeof block);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      if (pwrite(fd, block, sizeof block, 0) != (ssize_t)sizeof block) die("pwrite busy");
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000000L);
    kill(getpid(), SIGKILL);
    return 2;
  }
  fprintf(stderr, "tai_preload_ends: unknown way '%s'\n", way);
  return 2;
}

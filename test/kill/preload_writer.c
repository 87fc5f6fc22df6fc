/* The writer of the preload kill test (preload_kill_test.cpp): an ordinary C program, libc only,
 * that the test runs under LD_PRELOAD=libtai-preload.so with its output file in a routed
 * directory and SIGKILLs mid-run.
 *
 *   tai_kill_preload_writer <file> <seed> <run-ms> <max-fsync-gap-ms>
 *
 * It appends records of 64..2000 bytes (one in eight of 4096..65536) to <file> with write(2) (the byte at position p is
 * preload_content_byte(seed, p), never 0), about one every 200 us, and calls fsync(2) at random
 * moments 20..<max-fsync-gap-ms> ms apart. The long fsync gaps leave acknowledged writes in the cache for
 * longer than the write-behind deadline unless something hands them to the kernel: the deadline,
 * or (when the test leaves it on) the controller's idle flush, whenever the writer pauses 2 ms.
 *
 * After every write that returned and every fsync that returned 0 it tells the test on
 * descriptor 3 (a pipe: not a file under the routed directory, so libc's own) in one write of
 * 24 bytes: the kind, the file's acknowledged end, and CLOCK_MONOTONIC in ns (the test's clock
 * too). After <run-ms> it exits normally. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test/kill/preload_kill_protocol.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void report(uint32_t kind, uint64_t end) {
  struct preload_kill_event e;
  e.kind = kind;
  e.pad = 0;
  e.end = end;
  e.ns = now_ns();
  for (;;) {
    const ssize_t n = write(PRELOAD_KILL_EVENT_FD, &e, sizeof e);
    if (n == (ssize_t)sizeof e) return;
    if (n < 0 && errno == EINTR) continue;
    _exit(3); /* the test is gone: nothing to tell anyone */
  }
}

static uint64_t g_rng;
static uint64_t next_random(void) {
  g_rng = preload_kill_mix64(g_rng);
  return g_rng;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s <file> <seed> <run-ms> <max-fsync-gap-ms>\n", argv[0]);
    return 2;
  }
  const uint64_t seed = strtoull(argv[2], NULL, 0);
  const uint64_t run_ns = strtoull(argv[3], NULL, 0) * 1000000u;
  const uint64_t max_gap = strtoull(argv[4], NULL, 0);
  if (max_gap < 20) {
    fprintf(stderr, "%s: the fsync gap is at least 20 ms\n", argv[0]);
    return 2;
  }
  g_rng = seed;
  const int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "open %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  static unsigned char record[65536];
  uint64_t end = 0;
  const uint64_t start = now_ns();
  uint64_t next_sync = start + (20 + next_random() % (max_gap - 19)) * 1000000u;
  report(PRELOAD_KILL_STARTED, 0);
  for (;;) {
    const uint64_t t = now_ns();
    if (t - start >= run_ns) break;
    if (t >= next_sync) {
      if (fsync(fd) != 0) {
        fprintf(stderr, "fsync: %s\n", strerror(errno));
        return 1;
      }
      report(PRELOAD_KILL_SYNCED, end);
      next_sync = now_ns() + (20 + next_random() % (max_gap - 19)) * 1000000u;
    }
    /* Mostly log-line sizes, which the cache keeps; one in eight of a page or more, which
     * TAI's write-around may send on uncached (all but the partial pages at its ends). */
    const uint64_t r = next_random();
    const size_t length = r % 8 == 0 ? 4096 + (size_t)(r / 8 % (sizeof record - 4095)) : 64 + (size_t)(r / 8 % 1937);
    for (size_t i = 0; i < length; ++i) record[i] = preload_content_byte(seed, end + i);
    size_t done = 0;
    while (done < length) {
      const ssize_t n = write(fd, record + done, length - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fprintf(stderr, "write: %s\n", n < 0 ? strerror(errno) : "returned 0");
        return 1;
      }
      done += (size_t)n;
    }
    end += length;
    report(PRELOAD_KILL_WRITTEN, end);
    const struct timespec pause = {0, 200000};
    nanosleep(&pause, NULL);
  }
  if (close(fd) != 0) {
    fprintf(stderr, "close: %s\n", strerror(errno));
    return 1;
  }
  return 0;
}

/* What the preload kill test (preload_kill_test.cpp) and its writer (preload_writer.c, plain C
 * like any program the preload library goes into) share: the events on the pipe and the bytes
 * the writer writes. */
#ifndef TAI_TEST_KILL_PRELOAD_KILL_PROTOCOL_H
#define TAI_TEST_KILL_PRELOAD_KILL_PROTOCOL_H

#include <stdint.h>

/* The descriptor the writer reports on (the test puts a pipe's write end there). */
#define PRELOAD_KILL_EVENT_FD 3

enum {
  PRELOAD_KILL_STARTED = 1, /* the file is open, nothing written */
  PRELOAD_KILL_WRITTEN = 2, /* write(2) returned for every byte below `end` */
  PRELOAD_KILL_SYNCED = 3   /* fsync(2) returned 0, after every write below `end` had returned */
};

/* 24 bytes, one write(2) each: whole on the pipe (PIPE_BUF). */
struct preload_kill_event {
  uint32_t kind;
  uint32_t pad;
  uint64_t end; /* the file's acknowledged end when the event was sent */
  uint64_t ns;  /* CLOCK_MONOTONIC, after the call returned */
};

static inline uint64_t preload_kill_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* The byte at `position` of the writer's file: never 0, so a hole (zeros the kernel fills in
 * where a later range reached it first) is never taken for written data. */
static inline unsigned char preload_content_byte(uint64_t seed, uint64_t position) {
  const uint64_t word = preload_kill_mix64(seed ^ (position >> 3) * 0xD6E8FEB86659FD93ull);
  return (unsigned char)(((word >> ((position & 7) * 8)) & 0xFF) % 255 + 1);
}

#endif

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc, char** argv) {
  const long n = atol(argv[2]);
  double t0 = now();
  const int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char buf[4096];
  for (long i = 0; i < n; ++i) {
    memset(buf, (int)(i % 251) + 1, sizeof buf);
    if (pwrite(fd, buf, sizeof buf, (off_t)i * 4096) != (ssize_t)sizeof buf) { perror("pwrite"); return 1; }
    if (fdatasync(fd) != 0) { perror("fdatasync"); return 1; }
  }
  double t1 = now();
  int r = close(fd);
  double t2 = now();
  fprintf(stderr, "loop %.4f s close %.4f s\n", t1 - t0, t2 - t1);
  return r;
}

/* tai_preload_atexit_audit: a shim preloaded in front of the preload library by
 * exit_destructors.sh. It interposes __cxa_atexit (what atexit, static objects with a destructor
 * and function-local statics register through) and, for every function registered from the
 * library under test, appends the function's offset in that library to $TAI_ATEXIT_AUDIT_LOG,
 * one hexadecimal number a line. The script names them from the library's symbol table: the
 * library may register its exit handler and nothing whose destruction another thread could
 * still see (exit() runs them while the program's other threads go on calling into it).
 * Plain C and libc only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*cxa_atexit_fn)(void (*)(void*), void*, void*);
typedef int (*open_fn)(const char*, int, ...);
typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef int (*close_fn)(int);

/* libc's own open, write and close: the library under test interposes them, and this runs
 * during its static initialisation too. */
static void log_offset(const char* log, unsigned long offset) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) return;
  open_fn libc_open = (open_fn)dlsym(libc, "open");
  write_fn libc_write = (write_fn)dlsym(libc, "write");
  close_fn libc_close = (close_fn)dlsym(libc, "close");
  if (libc_open && libc_write && libc_close) {
    char line[64];
    const int n = snprintf(line, sizeof line, "%lx\n", offset);
    const int fd = libc_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)!libc_write(fd, line, (size_t)n);
      libc_close(fd);
    }
  }
  dlclose(libc);
}

int __cxa_atexit(void (*func)(void*), void* arg, void* dso) {
  static cxa_atexit_fn real;
  if (!real) real = (cxa_atexit_fn)dlsym(RTLD_NEXT, "__cxa_atexit");
  const char* log = getenv("TAI_ATEXIT_AUDIT_LOG");
  const char* lib = getenv("TAI_ATEXIT_AUDIT_LIB");
  Dl_info info;
  if (log && lib && dladdr((void*)func, &info) && info.dli_fname && strcmp(info.dli_fname, lib) == 0)
    log_offset(log, (unsigned long)((const char*)(void*)func - (const char*)info.dli_fbase));
  return real ? real(func, arg, dso) : -1;
}

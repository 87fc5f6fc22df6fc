// The preload library's bridge into the drop-in layer (see bridge.h): thin, so that every rule
// lives in one place, the drop-in layer (src/posix/).
#include "src/preload/bridge.h"

#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engines/common/own_descriptors.hpp"
#include "src/posix/layer.hpp"
#include "tai/posix.hpp"

namespace {
// preadv/pwritev at an offset, piece by piece (the layer's own vector calls use the description's
// offset). The pieces of one pwritev are not atomic against another thread's writes to the same
// bytes, which POSIX does not promise for regular files either. stop_short: a short piece ends the
// call (end of file on a read).
template <class Piece>
ssize_t vector_at(const struct iovec* iov, int iovcnt, off_t off, bool stop_short, Piece piece) {
  if (iovcnt < 0 || iovcnt > IOV_MAX || off < 0) {
    errno = EINVAL;
    return -1;
  }
  ssize_t done = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (iov[i].iov_len == 0) continue;
    const ssize_t r = piece(iov[i], off + done);
    if (r < 0) return done > 0 ? done : -1;
    done += r;
    if (stop_short && static_cast<size_t>(r) < iov[i].iov_len) break;
  }
  return done;
}
}  // namespace

extern "C" {

int tai_bridge_on_tai_thread(void) { return tai::detail::this_thread_is_tai() ? 1 : 0; }
int tai_bridge_is_own_fd(int fd) { return tai::detail::is_own_descriptor(fd) ? 1 : 0; }
int tai_bridge_next_own_fd(int from) {
  constexpr int kLimit = 1 << 20;  // the range own_descriptors.cpp records
  for (int fd = from < 0 ? 0 : from; fd < kLimit; ++fd)
    if (tai::detail::is_own_descriptor(fd)) return fd;
  return -1;
}
int tai_bridge_routed(int fd) { return tai::posix::routed(fd) ? 1 : 0; }

int tai_bridge_route(int fd, int flags, const char* path, const char** why) {
  const int saved = errno;
  const char* reason = tai::posix::detail::route_descriptor(fd, flags, path);
  errno = saved;
  if (why) *why = reason;
  return reason == nullptr ? 1 : 0;
}

int tai_bridge_route_at(int fd, int flags, const char* path, int64_t offset, const char** why) {
  const int saved = errno;
  const char* reason =
      tai::posix::detail::route_descriptor(fd, flags, path, offset < 0 ? 0 : static_cast<std::uint64_t>(offset));
  errno = saved;
  if (why) *why = reason;
  return reason == nullptr ? 1 : 0;
}

int tai_bridge_route_stat(int fd, int flags, const char* path, const struct stat* st, const char** why) {
  const int saved = errno;
  const char* reason = tai::posix::detail::route_descriptor(fd, flags, path, 0, st);
  errno = saved;
  if (why) *why = reason;
  return reason == nullptr ? 1 : 0;
}

ssize_t tai_bridge_read(int fd, void* buf, size_t n) { return tai::posix::read(fd, buf, n); }
ssize_t tai_bridge_write(int fd, const void* buf, size_t n) { return tai::posix::write(fd, buf, n); }
ssize_t tai_bridge_pread(int fd, void* buf, size_t n, off_t off) { return tai::posix::pread(fd, buf, n, off); }
ssize_t tai_bridge_pwrite(int fd, const void* buf, size_t n, off_t off) { return tai::posix::pwrite(fd, buf, n, off); }
ssize_t tai_bridge_readv(int fd, const struct iovec* iov, int iovcnt) { return tai::posix::readv(fd, iov, iovcnt); }
ssize_t tai_bridge_writev(int fd, const struct iovec* iov, int iovcnt) { return tai::posix::writev(fd, iov, iovcnt); }

ssize_t tai_bridge_preadv(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  return vector_at(iov, iovcnt, off, /*stop_short=*/true, [fd](const iovec& v, off_t at) {
    return tai::posix::pread(fd, v.iov_base, v.iov_len, at);
  });
}
ssize_t tai_bridge_pwritev(int fd, const struct iovec* iov, int iovcnt, off_t off) {
  return vector_at(iov, iovcnt, off, /*stop_short=*/false, [fd](const iovec& v, off_t at) {
    return tai::posix::pwrite(fd, v.iov_base, v.iov_len, at);
  });
}

off_t tai_bridge_lseek(int fd, off_t off, int whence) { return tai::posix::lseek(fd, off, whence); }
int tai_bridge_fsync(int fd) { return tai::posix::fsync(fd); }
int tai_bridge_fdatasync(int fd) { return tai::posix::fdatasync(fd); }
int tai_bridge_ftruncate(int fd, off_t length) { return tai::posix::ftruncate(fd, length); }
int tai_bridge_fstat(int fd, struct stat* st) { return tai::posix::fstat(fd, st); }
int tai_bridge_close(int fd) { return tai::posix::close(fd); }

int tai_bridge_alias(int oldfd, int newfd) {
  const int saved = errno;
  const int err = tai::posix::detail::alias_descriptor(oldfd, newfd);
  errno = saved;
  return err < 0 ? 0 : err;
}
int tai_bridge_forget(int fd) {
  const int saved = errno;
  const int err = tai::posix::detail::forget_descriptor(fd);
  errno = saved;
  return err;
}
int tai_bridge_forget_range(unsigned first, unsigned last) {
  const int saved = errno;
  const int err = tai::posix::detail::forget_range(first, last);
  errno = saved;
  return err;
}
int tai_bridge_unroute_file(int fd) {
  const int saved = errno;
  const int err = tai::posix::detail::unroute_file(fd);
  errno = saved;
  return err;
}
int tai_bridge_unroute_all(int inheritable_only) {
  const int saved = errno;
  const int err = tai::posix::detail::unroute_all(inheritable_only != 0);
  errno = saved;
  return err;
}
int tai_bridge_unroute_inode(dev_t dev, ino_t ino) {
  const int saved = errno;
  std::uint64_t size = 0;
  int err = 0;
  if (tai::posix::detail::cached_size(dev, ino, &size)) err = tai::posix::detail::unroute_inode(dev, ino);
  errno = saved;
  return err;
}
int tai_bridge_write_back_all(void) {
  const int saved = errno;
  const int err = tai::posix::detail::write_back_all();
  errno = saved;
  return err;
}
int tai_bridge_write_back_for_end(int timeout_ms) {
  const int saved = errno;
  const int err = tai::posix::detail::write_back_for_end(timeout_ms);
  errno = saved;
  return err;
}
long long tai_bridge_unwritten_age_ms(void) { return static_cast<long long>(tai::posix::detail::unwritten_age_ms()); }
int tai_bridge_write_back_inode(dev_t dev, ino_t ino) {
  const int saved = errno;
  const int err = tai::posix::detail::write_back_inode(dev, ino);
  errno = saved;
  return err;
}
int tai_bridge_write_back_fd(int fd) {
  const int saved = errno;
  const int err = tai::posix::detail::write_back_fd(fd);
  errno = saved;
  return err;
}
void tai_bridge_order_point(void) {
  const int saved = errno;
  (void)tai::posix::detail::order_point();  // a failed epoch is the next fsync's to report
  errno = saved;
}
int tai_bridge_order_name_change(int (*call)(void*), void* arg, int dirfd, const char* path, int dirfd2,
                                 const char* path2) {
  return tai::posix::detail::order_name_change(call, arg, dirfd, path, dirfd2, path2);
}
unsigned long long tai_bridge_order_names_ticket(void) { return tai::posix::detail::order_names_ticket(); }
void tai_bridge_order_directory_synced(int fd, unsigned long long ticket) {
  const int saved = errno;
  tai::posix::detail::order_directory_synced(fd, ticket);
  errno = saved;
}
int tai_bridge_fsync_order(void) { return tai::posix::fsync_mode() == tai::posix::FsyncMode::order ? 1 : 0; }
int tai_bridge_nothing_cached(void) { return tai::posix::detail::nothing_cached() ? 1 : 0; }
int tai_bridge_fsync_noop(void) { return tai::posix::detail::fsync_is_noop() ? 1 : 0; }
int tai_bridge_sync_now(void) {
  const int saved = errno;
  const int err = tai::posix::fsync_mode() == tai::posix::FsyncMode::order ? tai::posix::detail::sync_all()
                                                                            : tai::posix::detail::write_back_all();
  errno = saved;
  return err;
}
void tai_bridge_forked_child(void) { tai::posix::detail::disable_in_forked_child(); }
void tai_bridge_before_exec(void) {
  const int saved = errno;
  const std::vector<std::string> failures = tai::posix::detail::shutdown_for_exec();
  for (const auto& f : failures) std::fprintf(stderr, "tai-preload: before exec: %s\n", f.c_str());
  errno = saved;
}
void tai_bridge_fix_size(dev_t dev, ino_t ino, int64_t* size) {
  const int saved = errno;
  std::uint64_t cached = 0;
  if (tai::posix::detail::cached_size(dev, ino, &cached) && cached <= static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()) &&
      static_cast<int64_t>(cached) > *size)
    *size = static_cast<int64_t>(cached);
  errno = saved;
}

}  // extern "C"

// tai/posix.hpp's public functions: POSIX calls over the layer (-1 and errno).
#include "src/posix/layer_internal.hpp"

// =============================================================================================
// The public functions

namespace tai::posix {

using detail::Description;
using detail::finish;
using detail::Ref;

int open(const char* path, int flags, mode_t mode) { return detail::open_impl(AT_FDCWD, path, flags, mode); }
int openat(int dirfd, const char* path, int flags, mode_t mode) { return detail::open_impl(dirfd, path, flags, mode); }
int creat(const char* path, mode_t mode) { return detail::open_impl(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

namespace {
// Under `order`: after the earlier epochs, the kernel's call with the epochs' gate held open, and
// the directories of the names it changed on the open epoch's list (order_name_change). The
// system calls themselves: libc's names may be the preload library's, which would wait for the
// gate this holds.
template <class Call>
int name_change(Call call, int dir1, const char* name1, int dir2 = AT_FDCWD, const char* name2 = nullptr) {
  const auto trampoline = [](void* p) { return (*static_cast<Call*>(p))(); };
  return detail::order_name_change(trampoline, &call, dir1, name1, dir2, name2);
}
}  // namespace

int rename(const char* from, const char* to) { return renameat(AT_FDCWD, from, AT_FDCWD, to); }
int renameat(int fromdir, const char* from, int todir, const char* to) {
  return name_change([&] { return static_cast<int>(::syscall(SYS_renameat2, fromdir, from, todir, to, 0)); }, fromdir,
                     from, todir, to);
}
int link(const char* from, const char* to) {
  return name_change([&] { return static_cast<int>(::syscall(SYS_linkat, AT_FDCWD, from, AT_FDCWD, to, 0)); }, AT_FDCWD,
                     to);
}
int unlink(const char* path) { return unlinkat(AT_FDCWD, path, 0); }
int unlinkat(int dirfd, const char* path, int flags) {
  return name_change([&] { return static_cast<int>(::syscall(SYS_unlinkat, dirfd, path, flags)); }, dirfd, path);
}

namespace {
// Under `order`, a name that exists already: the kernel's answer to mkdir or symlink is EEXIST,
// which changes nothing; given without waiting for the earlier epochs (`mkdir -p` and its kind
// make every directory on the way, and most exist).
bool name_exists(int dirfd, const char* path) {
  if (!detail::order_mode() || path == nullptr) return false;
  struct stat st {};
  if (::fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  errno = EEXIST;
  return true;
}
}  // namespace

int mkdir(const char* path, mode_t mode) { return mkdirat(AT_FDCWD, path, mode); }
int mkdirat(int dirfd, const char* path, mode_t mode) {
  const int saved = errno;
  if (name_exists(dirfd, path)) return -1;
  errno = saved;
  return name_change([&] { return static_cast<int>(::syscall(SYS_mkdirat, dirfd, path, mode)); }, dirfd, path);
}
int rmdir(const char* path) { return unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }
int symlink(const char* target, const char* linkpath) { return symlinkat(target, AT_FDCWD, linkpath); }
int symlinkat(const char* target, int newdirfd, const char* linkpath) {
  const int saved = errno;
  if (name_exists(newdirfd, linkpath)) return -1;
  errno = saved;
  return name_change([&] { return static_cast<int>(::syscall(SYS_symlinkat, target, newdirfd, linkpath)); }, newdirfd,
                     linkpath);
}

int close(int fd) {
  const int saved = errno;
  int err = 0;
  if (detail::order_mode()) {
    // Order mode: close waits until every fsync the program made before it is durable, as under
    // `full` (order_close). Counted for the exit handler (see OrderedCall); one that waited for
    // it finds the layer `full`.
    Ref d(fd);
    if (d && detail::writable(*d.d) && !d->handed) {
      const detail::OrderedCall counted;
      if (counted.ordered()) err = detail::order_close(*d->inode);
    }
  }
  std::atomic<Description*>* s = detail::slot_of(fd, false);
  Description* d = s ? s->exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  if (const int e = d ? detail::release(d) : 0; e && err == 0) err = e;
  if (::close(fd) != 0) {
    if (err == 0) err = errno;
  }
  return finish(err ? -err : 0, saved);
}

ssize_t write(int fd, const void* buf, std::size_t count) {
  Ref d(fd);
  if (!d) return ::write(fd, buf, count);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::write(fd, buf, count);
  std::uint64_t pos = d->offset;
  const ssize_t r = detail::do_write(*d.d, fd, buf, count, pos, d->append, false);
  if (r > 0) d->offset = pos + static_cast<std::uint64_t>(r);
  return finish(r, saved);
}

ssize_t pwrite(int fd, const void* buf, std::size_t count, off_t offset) {
  const int saved = errno;
  if (offset < 0) return finish<ssize_t>(-EINVAL, saved);  // before the descriptor, as the kernel
  Ref d(fd);
  if (!d) return ::pwrite(fd, buf, count, offset);
  std::uint64_t pos = static_cast<std::uint64_t>(offset);
  return finish(detail::do_write(*d.d, fd, buf, count, pos, d->append, true), saved);  // Linux: O_APPEND appends
}

ssize_t read(int fd, void* buf, std::size_t count) {
  Ref d(fd);
  if (!d) return ::read(fd, buf, count);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::read(fd, buf, count);
  const ssize_t r = detail::do_read(*d.d, fd, buf, count, d->offset);
  if (r > 0) d->offset += static_cast<std::uint64_t>(r);
  return finish(r, saved);
}

ssize_t pread(int fd, void* buf, std::size_t count, off_t offset) {
  const int saved = errno;
  if (offset < 0) return finish<ssize_t>(-EINVAL, saved);
  Ref d(fd);
  if (!d) return ::pread(fd, buf, count, offset);
  return finish(detail::do_read(*d.d, fd, buf, count, static_cast<std::uint64_t>(offset)), saved);
}

namespace {
// The checks of the kernel's import_iovec: -errno, or 0 with the total (clamped to MAX_RW_COUNT
// as the kernel does, by trimming the vector's use).
ssize_t check_iov(const struct iovec* iov, int iovcnt, std::size_t& total) {
  total = 0;
  if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
  if (iovcnt > 0 && iov == nullptr) return -EFAULT;
  for (int i = 0; i < iovcnt; ++i) {
    if (static_cast<ssize_t>(iov[i].iov_len) < 0) return -EINVAL;
    if (iov[i].iov_len > static_cast<std::size_t>(std::numeric_limits<ssize_t>::max()) - total) return -EINVAL;
    total += iov[i].iov_len;
  }
  return 0;
}
}  // namespace

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  Ref d(fd);
  if (!d) return ::writev(fd, iov, iovcnt);
  const int saved = errno;
  std::size_t total;
  if (const ssize_t e = check_iov(iov, iovcnt, total)) return finish(e, saved);
  if (!detail::writable(*d.d)) return finish<ssize_t>(-EBADF, saved);
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::writev(fd, iov, iovcnt);
  if (detail::order_mode()) {
    // One write of the gathered bytes: the order path (held back or cached, see do_write)
    // takes a buffer, and the pieces stay together as the kernel's writev keeps them.
    std::vector<char> all;
    std::size_t left = std::min(total, detail::kMaxRw);
    try {
      all.reserve(left);
    } catch (const std::bad_alloc&) {
      return finish<ssize_t>(-ENOMEM, saved);
    }
    for (int i = 0; i < iovcnt && left > 0; ++i) {
      const std::size_t n = std::min(iov[i].iov_len, left);
      if (n == 0) continue;
      if (iov[i].iov_base == nullptr) {
        if (all.empty()) return finish<ssize_t>(-EFAULT, saved);
        break;
      }
      const char* p = static_cast<const char*>(iov[i].iov_base);
      all.insert(all.end(), p, p + n);
      left -= n;
    }
    if (all.empty()) return finish<ssize_t>(0, saved);
    std::uint64_t pos = d->offset;
    const ssize_t r = detail::do_write(*d.d, fd, all.data(), all.size(), pos, d->append, false);
    if (r > 0) d->offset = pos + static_cast<std::uint64_t>(r);
    return finish(r, saved);
  }
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> il(ino.mu);  // the pieces go in together: no other write between
  detail::order(ino);
  if (d->append) {  // through to the kernel: see append_through_locked
    std::uint64_t end = d->offset;
    const ssize_t r = detail::append_through_locked(ino, fd, end, true, iov, iovcnt, [&] { return ::writev(fd, iov, iovcnt); });
    if (r >= 0) d->offset = end;
    return finish(r, saved);
  }
  std::uint64_t pos = d->offset;
  if (pos > detail::kOffMax || total > detail::kOffMax - pos) return finish<ssize_t>(-EINVAL, saved);
  detail::count_write_locked(ino, fd, std::min(total, detail::kMaxRw));
  if (detail::kernel_locked(ino)) {  // write-through, or see shut_down_locked
    ssize_t r;
    do {
      r = ::pwritev(fd, iov, iovcnt, static_cast<off_t>(pos));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return finish<ssize_t>(-errno, saved);
    d->offset = pos + static_cast<std::uint64_t>(r);
    return finish(r, saved);
  }
  ssize_t done = 0;
  std::size_t left = std::min(total, detail::kMaxRw);
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const std::size_t n = std::min(iov[i].iov_len, left);
    if (n == 0) continue;
    if (iov[i].iov_base == nullptr) {
      if (done == 0) return finish<ssize_t>(-EFAULT, saved);
      break;  // the kernel stops at the fault and reports what it copied
    }
    std::uint64_t at = pos + static_cast<std::uint64_t>(done);
    const ssize_t r = detail::submit_write_locked(ino, iov[i].iov_base, n, at, false);
    if (r < 0) {
      if (done == 0) return finish(r, saved);
      break;
    }
    done += r;
    left -= n;
  }
  d->offset = pos + static_cast<std::uint64_t>(done);
  return finish(done, saved);
}

ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  Ref d(fd);
  if (!d) return ::readv(fd, iov, iovcnt);
  const int saved = errno;
  std::size_t total;
  if (const ssize_t e = check_iov(iov, iovcnt, total)) return finish(e, saved);
  if (!detail::readable(*d.d)) return finish<ssize_t>(-EBADF, saved);
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::readv(fd, iov, iovcnt);
  const std::uint64_t pos = d->offset;
  if (pos > detail::kOffMax || total > detail::kOffMax - pos) return finish<ssize_t>(-EINVAL, saved);
  ssize_t done = 0;
  std::size_t left = std::min(total, detail::kMaxRw);
  for (int i = 0; i < iovcnt && left > 0; ++i) {
    const std::size_t n = std::min(iov[i].iov_len, left);
    if (n == 0) continue;
    const ssize_t r = detail::do_read(*d.d, fd, iov[i].iov_base, n, pos + static_cast<std::uint64_t>(done));
    if (r < 0) {
      if (done == 0) return finish(r, saved);
      break;
    }
    done += r;
    left -= n;
    if (static_cast<std::size_t>(r) < n) break;  // end of file
  }
  d->offset = pos + static_cast<std::uint64_t>(done);
  return finish(done, saved);
}

off_t lseek(int fd, off_t offset, int whence) {
  Ref d(fd);
  if (!d) return ::lseek(fd, offset, whence);
  const int saved = errno;
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->handed) return ::lseek(fd, offset, whence);
  const off_t cur = static_cast<off_t>(d->offset);
  off_t next = 0;
  switch (whence) {
    case SEEK_SET:
      next = offset;
      break;
    case SEEK_CUR:
      if (__builtin_add_overflow(cur, offset, &next)) return finish<off_t>(-EINVAL, saved);
      break;
    case SEEK_END: {
      const off_t size = static_cast<off_t>(detail::current_size(*d->inode, fd));
      if (__builtin_add_overflow(size, offset, &next)) return finish<off_t>(-EINVAL, saved);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      // The whole file counts as data (allowed by POSIX, and true of what is cached): SEEK_DATA
      // stays, SEEK_HOLE goes to the end; both fail with ENXIO at or past the end.
      const off_t size = static_cast<off_t>(detail::current_size(*d->inode, fd));
      if (offset < 0 || offset >= size) return finish<off_t>(-ENXIO, saved);
      next = whence == SEEK_DATA ? offset : size;
      break;
    }
    default:
      return finish<off_t>(-EINVAL, saved);
  }
  if (next < 0) return finish<off_t>(-EINVAL, saved);
  d->offset = static_cast<std::uint64_t>(next);
  return finish(next, saved);
}

int fsync(int fd) {
  Ref d(fd);
  if (!d) {
    // Not routed: the kernel's. A directory's fsync under `order` also spares the open epoch its
    // own sync of that directory (order_directory_synced).
    const std::uint64_t ticket = detail::order_names_ticket();
    if (::fsync(fd) != 0) return -1;
    if (detail::order_mode()) {
      const int saved = errno;
      detail::order_directory_synced(fd, ticket);
      errno = saved;
    }
    return 0;
  }
  const int saved = errno;
  return finish(detail::sync_routed(*d.d, fd, false), saved);
}

int fdatasync(int fd) {
  Ref d(fd);
  if (!d) return ::fdatasync(fd);
  const int saved = errno;
  return finish(detail::sync_routed(*d.d, fd, true), saved);
}

int ftruncate(int fd, off_t length) {
  Ref d(fd);
  if (!d || !detail::writable(*d.d)) return ::ftruncate(fd, length);  // the kernel's checks and errno
  const int saved = errno;
  if (length < 0) return finish(-EINVAL, saved);
  detail::Inode& ino = *d->inode;
  if (const int same = detail::truncate_to_own_size(ino, fd, static_cast<std::uint64_t>(length)); same != 1)
    return finish(same, saved);
  if (detail::order_mode()) {
    // The truncation goes to the kernel: after every closed epoch is durable, with the gate
    // held open (see detail::order_gate_locked).
    for (;;) {
      detail::order_drain();
      std::lock_guard<std::mutex> lock(ino.mu);
      std::unique_lock<std::mutex> gate;
      const int g = detail::order_gate_locked(ino, gate);
      if (g == 1) continue;
      if (g < 0) return finish(g, saved);
      return finish(detail::truncate_locked(ino, fd, static_cast<std::uint64_t>(length)), saved);
    }
  }
  std::lock_guard<std::mutex> lock(ino.mu);
  return finish(detail::truncate_locked(ino, fd, static_cast<std::uint64_t>(length)), saved);
}

int fstat(int fd, struct stat* st) {
  Ref d(fd);
  // glibc declares fstat's buffer nonnull; the system call answers a null one (EBADF first,
  // else EFAULT), so that is what a null buffer gets.
  const int rc = st ? ::fstat(fd, st) : static_cast<int>(::syscall(SYS_fstat, fd, st));
  if (rc != 0 || !d) return rc;
  const std::uint64_t size = d->inode->size.load(std::memory_order_acquire);
  if (static_cast<std::uint64_t>(st->st_size) < size) st->st_size = static_cast<off_t>(size);
  return 0;
}

Receipt fsync_async(int fd) {
  Ref d(fd);
  if (!d) {
    const int saved = errno;  // the answer is on the receipt: errno stays as it was
    const bool open = ::fcntl(fd, F_GETFD) >= 0;
    Controller* c = open ? detail::controller() : nullptr;
    errno = saved;
    if (!c) return File().fsync();  // rejected: EBADF
    return c->submit([fd] {
      if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category(), "fsync");
    });
  }
  const detail::OrderedCall counted;  // order mode: the exit handler waits for it (see there)
  if (detail::order_mode()) {
    // Held-back writes are not in the file's cache, so the file's own sync would not cover
    // them: every epoch durable here (waits), and the receipt carries the outcome.
    const int err = detail::order_sync_all();
    Controller* c = detail::make_controller();
    if (!c) return File().fsync();  // no controller (the layer is down, or it cannot be made): rejected (EBADF)
    return c->submit([err] {
      if (err != 0) throw std::system_error(err, std::generic_category(), "fsync");
    });
  }
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> lock(ino.mu);
  detail::order(ino);
  // A receipt is the controller's: the file goes back to the cache (write-through is for the
  // synchronous fsync; the kernel has every byte written through so far, and this sync, an
  // engine sync of the same inode, covers them).
  if (!detail::leave_through_locked(ino, fd)) {
    Controller* c = detail::make_controller();  // a leaf lock: fine under ino.mu
    if (!c) return File().fsync();  // no controller (the layer is down, or it cannot be made): rejected (EBADF)
    return c->submit([fd] {
      if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category(), "fsync");
    });
  }
  ino.bytes_since_sync = 0;
  Receipt r = ino.file.fsync();
  ino.last = r;
  ino.last_sync = r;
  ino.last_tid = std::this_thread::get_id();
  return r;
}

int barrier(int fd) {
  Ref d(fd);
  if (!d) return ::fdatasync(fd);
  const int saved = errno;
  const detail::OrderedCall counted;  // order mode: the exit handler waits for it (see there)
  if (detail::order_mode()) return finish(detail::order_fsync(true), saved);  // an epoch is a barrier across files
  detail::Inode& ino = *d->inode;
  std::lock_guard<std::mutex> lock(ino.mu);
  detail::order(ino);
  // The barrier is the controller's (see fsync_async); a file that cannot leave write-through
  // gets the kernel's sync, which orders as much.
  if (!detail::leave_through_locked(ino, fd)) return finish(::fdatasync(fd) < 0 ? -errno : 0, saved);
  Receipt r = ino.file.barrier();
  if (r.finished() && !r.ok()) return finish(-detail::error_of(r), saved);
  ino.last = r;
  ino.last_sync = r;
  ino.last_tid = std::this_thread::get_id();
  return finish(0, saved);
}

int wait(int fd) {
  Ref d(fd);
  const int saved = errno;
  if (!d) return ::fcntl(fd, F_GETFD) < 0 ? -1 : 0;
  detail::Inode& ino = *d->inode;
  Receipt last, sync;
  std::uint64_t target;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    last = ino.last;
    sync = ino.last_sync;
    target = ino.writes_submitted.load(std::memory_order_relaxed);
  }
  last.wait();
  sync.wait();
  detail::settle(ino, target);
  if (sync.valid() && !sync.ok()) return finish(-detail::error_of(sync), saved);
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return finish(-w, saved);
  return finish(0, saved);
}

bool routed(int fd) noexcept {
  Ref d(fd);
  return static_cast<bool>(d);
}

int set_fsync_mode(FsyncMode mode) {
  const int saved = errno;
  int err = 0;
  const bool now_order = detail::order_mode();
  if (mode == FsyncMode::order && !now_order) {
    // What the cache holds was written under `full`, outside any epoch's list: durable first.
    err = detail::sync_all();
  } else if (mode == FsyncMode::full && now_order) {
    err = detail::sync_all();
  }
  detail::g_fsync_mode_set.store(true, std::memory_order_release);
  detail::g_fsync_mode.store(static_cast<int>(mode), std::memory_order_release);
  return finish(err ? -err : 0, saved);
}

FsyncMode fsync_mode() noexcept { return detail::order_mode() ? FsyncMode::order : FsyncMode::full; }

int sync_now() {
  const int saved = errno;
  const int err = detail::sync_all();
  return finish(err ? -err : 0, saved);
}

FsyncOrderStats fsync_order_stats() noexcept {
  FsyncOrderStats s;
  s.epochs_closed = detail::g_stat_closed.load(std::memory_order_relaxed);
  s.epochs_durable = detail::g_stat_durable.load(std::memory_order_relaxed);
  s.deferred_writes = detail::g_stat_deferred.load(std::memory_order_relaxed);
  s.backpressure = detail::g_stat_backpressure.load(std::memory_order_relaxed);
  s.max_queued_bytes = detail::g_stat_max_queued.load(std::memory_order_relaxed);
  s.epochs_logged = detail::g_stat_logged.load(std::memory_order_relaxed);
  s.log_batches = detail::g_stat_log_batches.load(std::memory_order_relaxed);
  s.log_checkpoints = detail::g_stat_checkpoints.load(std::memory_order_relaxed);
  s.copy_blocks_allocated = detail::HeldCopyPool::instance().allocations();
  s.copy_blocks_reused = detail::HeldCopyPool::instance().reuses();
  s.epochs_inline = detail::g_stat_inline.load(std::memory_order_relaxed);
  s.through_writes = detail::g_stat_through_writes.load(std::memory_order_relaxed);
  s.max_lag_ns = detail::g_stat_max_lag_ns.load(std::memory_order_relaxed);
  s.max_early_lag_ns = detail::g_stat_max_early_lag_ns.load(std::memory_order_relaxed);
  return s;
}

}  // namespace tai::posix

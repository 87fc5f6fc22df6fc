// tai/posix.hpp's layer: opening and routing descriptors, and unrouting them.
#include "src/posix/layer_internal.hpp"

namespace tai::posix::detail {

// Whether /proc/self/fd exists, asked once: /proc is mounted for the life of a process, and
// SQLite routes a new journal per transaction (an access() each before).
bool proc_fd_available() noexcept {
  static const bool available = ::access("/proc/self/fd", F_OK) == 0;
  return available;
}

// Decides whether `fd` (just opened by the program's call with `flags`) is routed, and routes
// it. Never fails the open: a file that cannot be routed passes through. Returns nullptr when
// routed, else why not (a static string, for logs).
const char* maybe_route(int fd, int flags, const char* path, std::uint64_t offset,
                        const struct stat* known) {
  if (g_down.load(std::memory_order_acquire)) return "the layer is shut down (exit, exec or a forked child)";
  if (flags & O_PATH) return "O_PATH";
  if (flags & O_DIRECT) return "O_DIRECT (the program asked to bypass caches)";
  if (flags & O_DSYNC) return "O_SYNC/O_DSYNC (every write must be durable when it returns)";  // O_SYNC includes O_DSYNC's bit
  if (fd >= kMaxFd) return "descriptor number too high";
  struct stat st {};
  if (known)
    st = *known;  // the caller's fstat of fd, made just now
  else if (::fstat(fd, &st) != 0)
    return "not a regular file";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const int acc = flags & O_ACCMODE;
  const bool wants_write = acc == O_WRONLY || acc == O_RDWR;
  bool setting_through = false;  // the settings' answer for this file: starts write-through
  if (wants_write) {
    // Configured here, before g_reg_mu (lock order: init, reg, inode).
    if (!configure()) return "the layer is shut down (exit, exec or a forked child)";
    // A file that starts write-through (see below) needs no controller: a process whose files
    // all stay so (git, a shell appending a line) never pays for the workers and engines. The
    // others have it made here, outside the locks (a file that goes back to the cache later, or
    // whose order-mode descriptor cannot be opened, has it made by open_engine_file).
    setting_through = g_start_through.load(std::memory_order_relaxed) || (order_mode() && st.st_size == 0);
    const bool may_start_through = g_sync_through.load(std::memory_order_relaxed) != 0 &&
                                   (setting_through || through_path_known(path));
    if (!may_start_through && !make_controller()) return "no controller";
  }
  // A reader makes no controller: the logs of epochs a dead process left are replayed here first.
  if (!wants_write && !g_configured.load(std::memory_order_acquire))
    if (const char* d = std::getenv("TAI_FSYNC_LOG_DIR"); d && d[0] == '/') recover_order_logs_once(d);
  Inode* ino = nullptr;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    auto it = registry().find(InodeKey{st.st_dev, st.st_ino});
    if (it != registry().end()) {
      ino = it->second;
    } else if (wants_write) {
      auto owned = std::make_unique<Inode>();
      owned->dev = st.st_dev;
      owned->ino = st.st_ino;
      owned->name = path;
      owned->log_path = absolute_path_of(fd, path);
      owned->via_proc = proc_fd_available();  // else the path (no /proc)
      const bool through_allowed = g_sync_through.load(std::memory_order_relaxed) != 0;
      if (through_allowed && order_mode() && owned->via_proc) {
        // The order thread's own way to the file while it is write-through (see Inode).
        const std::string self = "/proc/self/fd/" + std::to_string(fd);
        owned->direct_fd = tai::detail::adopt_own_descriptor(::open(self.c_str(), O_WRONLY | O_CLOEXEC));
      }
      // Made again under the name of a file that went write-through, or any file (the setting),
      // or under order an empty one: it starts so, and gets its engine file only if it goes
      // back to the cache (more than sync_through_bytes between two syncs: leave_through_locked).
      // Most files a short process writes are small ones synced at once or appended to (a lock
      // file, git's objects and logs, a journal), whose every sync would otherwise be a worker's
      // hand-off (under order an order thread's too); a large output goes back to the cache
      // after its first sync_through_bytes (Settings::files_start_through).
      const bool starts_through = through_path_known(owned->name) || setting_through;
      if (through_allowed && (!order_mode() || owned->direct_fd >= 0) && starts_through) {
        owned->through = true;
      } else {
        const std::string how = owned->via_proc ? "/proc/self/fd/" + std::to_string(fd) : owned->name;
        auto f = open_engine_file(how, true);
        if (!f && f.error().code == std::errc::permission_denied) {
          owned->engine_readable = false;
          f = open_engine_file(how, false);
        }
        if (!f) {
          logf("%s (fd %d) not routed: %s", path, fd, f.error().message.c_str());
          return "TAI's engine cannot open it (TAI_LOG=1 says why)";
        }
        owned->file = std::move(f.value());
      }
      if (g_start_writeback.load(std::memory_order_relaxed) != 0) {
        owned->writeback_fd = tai::detail::dup_own_descriptor(fd);
      }
      owned->size.store(static_cast<std::uint64_t>(st.st_size), std::memory_order_relaxed);
      if (!owned->through) count_cached_locked(*owned, true);  // not published yet: no lock needed
      ino = owned.release();
      registry()[InodeKey{st.st_dev, st.st_ino}] = ino;
      fresh = true;
    } else {
      return "opened read-only and nothing of the file is cached";
    }
    ++ino->opens;
  }
  Description* d = new_description();
  d->inode = ino;
  d->accmode = acc;
  d->append = (flags & O_APPEND) != 0;
  d->offset = offset;
  d->handed = false;
  d->refs.store(1, std::memory_order_relaxed);
  if (!fresh && (flags & O_TRUNC) && wants_write) {
    // The program's ::open truncated the file, but this process's cache may hold bytes of it
    // that a write-back would bring back: truncate through the cache as ftruncate(fd, 0) does.
    std::lock_guard<std::mutex> lock(ino->mu);
    (void)truncate_locked(*ino, fd, 0);
  }
  install(fd, d);  // release: the description's fields above happen-before its users
  if (order_mode() && wants_write && (flags & (O_CREAT | O_TRUNC))) {
    // The open may have made or truncated the file in the kernel: the next fsync syncs it.
    {
      OrderState& o = ord();
      std::lock_guard<std::mutex> lk(o.mu);
      try {
        note_open_dirty_locked(o, *ino);
      } catch (const std::bad_alloc&) {
        // Then only a write to the file puts it on the epoch's list.
      }
    }
    // And its name, when the open may have made it (new to the layer and empty): a file synced
    // in an epoch must be found under its name once a later epoch's writes are on the device.
    // (The name may appear earlier than that epoch: the creation is not held back.)
    if (fresh && (flags & O_CREAT) && st.st_size == 0 && !ino->log_path.empty())
      order_name_changed(AT_FDCWD, ino->log_path.c_str());
  }
  logf("%s (fd %d) routed%s", path, fd, fresh ? "" : " (file already routed: shares its cache)");
  return nullptr;
}

int open_impl(int dirfd, const char* path, int flags, mode_t mode) {
  if (path == nullptr) {  // glibc declares it nonnull; the kernel answers EFAULT
    errno = EFAULT;
    return -1;
  }
  const int saved = errno;
  if (flags & O_TRUNC) (void)order_point_impl();  // order mode: the truncation after the epochs before it
  int fd;
  do {
    fd = ::openat(dirfd, path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;  // the kernel's errno
  (void)maybe_route(fd, flags, path);
  errno = saved;
  return fd;
}

int alias_descriptor(int oldfd, int newfd) {
  Description* d = g_down.load(std::memory_order_acquire) ? nullptr : acquire(oldfd);
  if (!d) return -1;
  if (oldfd == newfd) {
    release(d);
    return 0;
  }
  std::atomic<Description*>* s = slot_of(newfd, true);
  if (!s) {
    release(d);
    return -1;
  }
  // The reference taken by acquire() becomes the new slot's.
  Description* old = s->exchange(d, std::memory_order_acq_rel);
  return old ? release(old) : 0;
}

int forget_descriptor(int fd) {
  std::atomic<Description*>* s = slot_of(fd, false);
  Description* d = s ? s->exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  return d ? release(d) : 0;
}

const char* route_descriptor(int fd, int flags, const char* path, std::uint64_t offset, const struct stat* st) {
  return maybe_route(fd, flags, path, offset, st);
}

// Hands fd's offset to the kernel and forgets the slot if it still holds `d`. The release's
// error (the file's write-back, when this was its last description) is returned (errno).
int unroute_slot(int fd, Description* d) {
  {
    std::lock_guard<std::mutex> lock(d->mu);
    kernel_seek(fd, d->offset);
  }
  std::atomic<Description*>* s = slot_of(fd, false);
  Description* expected = d;
  if (s && s->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return release(d);
  return 0;
}

int unroute_file(int fd) {
  Ref ref(fd);
  if (!ref) return 0;
  // Order mode: the kernel gets the file from now on (mmap, fork, exec): every epoch durable
  // and every held write in the cache first, so that nothing of the file is left behind.
  if (order_mode()) {
    if (const int err = order_sync_all()) logf("unrouting %s: an epoch failed: %s", ref->inode->name.c_str(), std::strerror(err));
  }
  Inode* ino = ref->inode;
  int err = 0;
  {
    // Everything the cache holds goes to the kernel first, so that the kernel's view (the
    // mapping, the other process, the pass-through calls from now on) is the program's.
    std::lock_guard<std::mutex> lock(ino->mu);
    err = close_file_locked(*ino);
  }
  for_each_slot([&](int slot_fd, Description* d) {
    if (d->inode != ino) return;
    const int e = unroute_slot(slot_fd, d);
    if (err == 0) err = e;
  });
  if (err) logf("unrouting %s: write-back failed: %s", ino->name.c_str(), std::strerror(err));
  return err;
}

int unroute_inode(dev_t dev, ino_t ino) {
  int fd = -1;
  for_each_slot([&](int slot_fd, Description*) {
    if (fd >= 0) return;
    Description* d = acquire(slot_fd);  // a reference: the inode cannot go while we look at it
    if (!d) return;
    if (d->inode && d->inode->dev == dev && d->inode->ino == ino) fd = slot_fd;
    release(d);
  });
  return fd < 0 ? 0 : unroute_file(fd);
}

int unroute_all(bool inheritable_only) {
  if (!layer_active()) return 0;
  std::vector<int> fds;
  for_each_slot([&](int fd, Description*) {
    if (inheritable_only) {
      const int fl = ::fcntl(fd, F_GETFD);
      if (fl >= 0 && (fl & FD_CLOEXEC)) return;  // stays in this process: keeps its routing
    }
    fds.push_back(fd);
  });
  int err = 0;
  for (const int fd : fds) {
    const int e = unroute_file(fd);
    if (err == 0) err = e;
  }
  return err;
}

}  // namespace tai::posix::detail

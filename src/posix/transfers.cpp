// tai/posix.hpp's layer: transfers of routed descriptors: writes, reads, syncs.
#include "src/posix/layer_internal.hpp"
#include "src/posix/order_log.hpp"

namespace tai::posix::detail {

// ---------------------------------------------------------------------------------------------
// Transfers (routed descriptors). All return -errno or bytes.

bool readable(const Description& d) { return d.accmode == O_RDONLY || d.accmode == O_RDWR; }
bool writable(const Description& d) { return d.accmode == O_WRONLY || d.accmode == O_RDWR; }

std::uint64_t current_size(const Inode& ino, int fd) {
  std::uint64_t size = ino.size.load(std::memory_order_acquire);
  struct stat st {};
  if (::fstat(fd, &st) == 0) size = std::max<std::uint64_t>(size, static_cast<std::uint64_t>(st.st_size));
  return size;
}

void grow_size(Inode& ino, std::uint64_t end) noexcept {
  std::uint64_t cur = ino.size.load(std::memory_order_relaxed);
  while (cur < end && !ino.size.compare_exchange_weak(cur, end, std::memory_order_acq_rel)) {
  }
}

// Under ino.mu, after a write of n bytes: every start_writeback_bytes, the controller writes its
// dirty cache back to the kernel (Controller::flush: every file, not synced) and then a worker
// asks the kernel to start writing the file's dirty pages to the device. A program that computes
// between writes without pausing long enough for the controller's idle flush would otherwise
// leave everything in the cache until its fsync, and the kernel would start the device write only
// at that fsync (or after its 30 s dirty timeout): the fsync would wait for all of it. Started
// early, the device works while the program computes. Overwrites inside one interval still meet
// in the cache. The continuation holds a reference so that the descriptor outlives it.
// Each range of the file is started once, from the end of the last start to the file's size:
// writes below it (random overwrites, a header rewritten) stay in the cache, which is there to
// absorb them, until the fsync, the quota or the write-behind deadline, as a plain program's
// pages wait for the kernel's timer. Starting the whole file every interval sent pages that
// random overwrites keep dirtying to the device again after every interval.
void start_writeback_every(Inode& ino, std::size_t n) {
  const std::uint64_t every = g_start_writeback.load(std::memory_order_relaxed);
  if (every == 0 || ino.writeback_fd < 0) return;
  ino.unstarted_bytes += n;
  if (ino.unstarted_bytes < every) return;
  ino.unstarted_bytes = 0;
  const std::uint64_t from = ino.writeback_started;
  const std::uint64_t to = ino.size.load(std::memory_order_relaxed);
  if (to <= from) return;
  ino.writeback_started = to;
  Controller* c = g_ctl.load(std::memory_order_acquire);
  if (!c) return;
  ino.refs.fetch_add(1, std::memory_order_relaxed);
  Inode* ip = &ino;
  Receipt r = c->flush();
  r.then([ip, c, from, to](const Receipt&) {
    // A failed flush leaves its data dirty in the cache; the next fsync writes it again and
    // reports the error. The system call goes to a task of its own: a continuation runs inside a
    // round and must not block, and sync_file_range may (while the device's queue is full).
    Receipt start = c->submit([ip, from, to] {
      // No WAIT flags: start the device write and return.
      (void)::sync_file_range(ip->writeback_fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                              SYNC_FILE_RANGE_WRITE);
    });
    start.then([ip](const Receipt&) { inode_unref(ip); });
  });
}

// Submits one write under ino.mu at `pos` (or at the end of file when `append`: pos is set).
// Returns -errno or the bytes (all of them: the cache takes everything).
ssize_t submit_write_locked(Inode& ino, const void* buf, std::size_t n, std::uint64_t& pos, bool append) {
  if (append) pos = ino.size.load(std::memory_order_acquire);
  if (pos > kOffMax || n > kOffMax - pos) return append ? -EFBIG : -EINVAL;
  return note_submitted_write_locked(ino, ino.file.write(pos, buf, n), n, pos);
}

// The same with the bytes moved in (File::write(offset, Buffer&&): no copy); `data` is the
// controller's from here, whatever the result.
ssize_t submit_buffer_locked(Inode& ino, Buffer&& data, std::uint64_t pos) {
  const std::size_t n = data.size();
  if (pos > kOffMax || n > kOffMax - pos) return -EINVAL;
  return note_submitted_write_locked(ino, ino.file.write(pos, std::move(data)), n, pos);
}

// Under ino.mu: the bookkeeping of a write just given to the file's cache (its receipt `r`).
ssize_t note_submitted_write_locked(Inode& ino, Receipt r, std::size_t n, std::uint64_t pos) {
  if (r.finished() && !r.ok()) return -error_of(r);
  grow_size(ino, pos + n);
  start_writeback_every(ino, n);
  ino.writes_submitted.fetch_add(1, std::memory_order_relaxed);
  ino.refs.fetch_add(1, std::memory_order_relaxed);
  Inode* ip = &ino;
  r.then([ip](const Receipt& done) {
    if (!done.ok()) note_error(*ip, error_of(done));
    ip->writes_settled.fetch_add(1, std::memory_order_release);
    inode_unref(ip);
  });
  ino.last = std::move(r);
  ino.last_tid = std::this_thread::get_id();
  ino.cache_used = true;
  note_dirty();
  return static_cast<ssize_t>(n);
}

// The kernel's order after the access-mode check: access_ok (a range whose end passes the top
// of the user address space is EFAULT: 2^56 - 4096 covers 5-level paging, and a count above
// SSIZE_MAX always passes it), then rw_verify_area (EINVAL), then the clamp to MAX_RW_COUNT.
ssize_t clamp_count(const void* buf, std::size_t& n) {
  constexpr std::uintptr_t kUserTop = (std::uintptr_t{1} << 56) - 4096;
  const auto at = reinterpret_cast<std::uintptr_t>(buf);
  if (n > kUserTop || at > kUserTop - n) return -EFAULT;
  if (static_cast<ssize_t>(n) < 0) return -EINVAL;
  if (n > kMaxRw) n = kMaxRw;
  return 0;
}

// Under ino.mu: the layer is shutting down (exit in another thread, exec) and this inode's File
// is closed already (written back): the kernel has the file, and a call that still holds the
// description (g_handed_back not yet set, or set after it took its reference) goes there, at the
// description's offset (the kernel's calls succeed during exit too; failing them would be a
// change the program can see).
bool shut_down_locked(const Inode& ino) noexcept {
  return !ino.file.is_open() && g_down.load(std::memory_order_acquire);
}

bool kernel_locked(const Inode& ino) noexcept { return ino.through || shut_down_locked(ino); }

std::atomic<KernelObserver*> g_kernel_observer{nullptr};

ssize_t kernel_write_locked(Inode& ino, int fd, const void* buf, std::size_t n, std::uint64_t pos) {
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  const std::uint64_t t = seen ? seen->before() : 0;
  ssize_t r;
  do {
    r = ::pwrite(fd, buf, n, static_cast<off_t>(pos));
  } while (r < 0 && errno == EINTR);
  const int err = r < 0 ? errno : 0;
  if (seen) {
    struct iovec one = {const_cast<void*>(buf), n};
    seen->wrote(ino.dev, ino.ino, pos, &one, 1, r < 0 ? -err : r, t);
  }
  if (r < 0) return -err;
  grow_size(ino, pos + static_cast<std::uint64_t>(r));
  return r;
}

int kernel_pwritev_file(const Inode& ino, int fd, struct iovec* iov, int count, std::uint64_t pos) noexcept {
  // One segment: a plain pwrite, the system call the run would have made without the observer.
  const auto write = [&] {
    return count == 1 ? pwrite_all(fd, static_cast<const char*>(iov[0].iov_base), iov[0].iov_len, pos)
                      : pwritev_all(fd, iov, count, pos);
  };
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  if (!seen) return write();
  // pwritev_all advances the iovecs it is given: the observer gets a copy as it was (on the
  // stack, as apply_writes keeps its run of at most 256: no allocation on this path).
  constexpr int kAskedMax = 256;
  struct iovec asked[kAskedMax];
  const int kept = count < kAskedMax ? count : kAskedMax;
  std::int64_t total = 0;
  for (int i = 0; i < kept; ++i) {
    asked[i] = iov[i];
    total += static_cast<std::int64_t>(iov[i].iov_len);
  }
  const std::uint64_t t = seen->before();
  const int e = write();
  // Neither call reports a count on failure: a failed write may have moved any part of its range.
  seen->wrote(ino.dev, ino.ino, pos, asked, kept, e ? -e : total, t);
  return e;
}

int kernel_pwrite_file(const Inode& ino, int fd, const char* p, std::size_t n, std::uint64_t pos) noexcept {
  struct iovec one = {const_cast<char*>(p), n};
  return kernel_pwritev_file(ino, fd, &one, 1, pos);
}

// Successful kernel syncs made by the layer, for tests: a write-through file's fsync reaches no
// engine, so only this tells that it reached the kernel (relaxed: a count, beside a system call).
static std::atomic<std::uint64_t> g_kernel_syncs{0};

std::uint64_t kernel_syncs_for_testing() noexcept { return g_kernel_syncs.load(std::memory_order_relaxed); }

static std::atomic<std::uint64_t> g_kernel_syncfs{0};
std::uint64_t kernel_syncfs_for_testing() noexcept { return g_kernel_syncfs.load(std::memory_order_relaxed); }
static std::atomic<std::uint64_t> g_kernel_dir_syncs{0};
std::uint64_t kernel_directory_syncs_for_testing() noexcept { return g_kernel_dir_syncs.load(std::memory_order_relaxed); }

// The system call itself, not libc's wrapper: the preload library interposes fsync and syncfs,
// and a caller outside its depth count would come back into the layer and wait for the order
// state it is working for. EINTR retried; errno or 0, `done` counted on success.
static int sync_syscall(long nr, int fd, std::atomic<std::uint64_t>& done) noexcept {
  long rc;
  do {
    rc = ::syscall(nr, fd);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return errno;
  done.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

int kernel_syncfs(const Inode& ino, int fd) noexcept {
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  const std::uint64_t t = seen ? seen->before() : 0;
  const int e = sync_syscall(SYS_syncfs, fd, g_kernel_syncfs);
  if (seen) seen->synced_fs(ino.dev, e, t);
  return e;
}

int kernel_sync(int fd, bool data_only) noexcept {
  return sync_syscall(data_only ? SYS_fdatasync : SYS_fsync, fd, g_kernel_syncs);
}

int kernel_sync_file(const Inode& ino, int fd, bool data_only) noexcept {
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  const std::uint64_t t = seen ? seen->before() : 0;
  const int e = kernel_sync(fd, data_only);
  if (seen) seen->synced(ino.dev, ino.ino, data_only, e, t);
  return e;
}

int kernel_sync_directory(dev_t dev, ino_t ino, int fd, bool whole_fs) noexcept {
  KernelObserver* const seen = g_kernel_observer.load(std::memory_order_acquire);
  const std::uint64_t t = seen ? seen->before() : 0;
  const int e = whole_fs ? sync_syscall(SYS_syncfs, fd, g_kernel_syncfs) : sync_syscall(SYS_fsync, fd, g_kernel_dir_syncs);
  if (seen) {
    if (whole_fs)
      seen->synced_fs(dev, e, t);
    else
      seen->synced(dev, ino, false, e, t);
  }
  return e;
}

bool order_through_locked(const Inode& ino) noexcept {
  return ino.through && ino.direct_fd >= 0 && !g_down.load(std::memory_order_acquire);
}

// Under ino.mu, before a write of n bytes: a write-through file that has had more than
// sync_through_bytes written since its last sync goes back to the cache (this write included).
void count_write_locked(Inode& ino, int fd, std::size_t n) noexcept {
  ino.bytes_since_sync += n;
  // Under order a write-through file's writes pass the epoch gate as cached ones do
  // (order_write_locked) when the order thread has its own descriptor of it; one without (made
  // write-through in `full`) goes back to the cache.
  if (ino.through && ((order_mode() && ino.direct_fd < 0) || ino.bytes_since_sync > g_sync_through.load(std::memory_order_relaxed)))
    (void)leave_through_locked(ino, fd);
}

// count is clamped here. pos: the explicit offset, or the description's (then
// `append` decides; on return pos is where the bytes went, for the description's offset).
// Returns bytes or -errno.
ssize_t do_write(Description& d, int fd, const void* buf, std::size_t n, std::uint64_t& pos, bool append,
                 bool explicit_offset) {
  if (!writable(d)) return -EBADF;
  if (const ssize_t e = clamp_count(buf, n)) return e;
  if (n == 0) return 0;
  if (!append && (pos > kOffMax || n > kOffMax - pos)) return -EINVAL;
  if (buf == nullptr) return -EFAULT;
  Inode& ino = *d.inode;
  const OrderedCall counted;  // order mode: the exit handler in another thread waits for it
  const bool ordered = counted.ordered();
  if (ordered && !append) {
    if (const ssize_t held = order_hold_write(ino, buf, n, pos); held != kNotHeld) return held;
  }
  for (;;) {
  if (ordered && append) order_drain();
  std::unique_lock<std::mutex> lock(ino.mu);
  // Order mode: order_write_locked calls it when the write is not held back.
  if (!ordered || append) order(ino);
  std::unique_lock<std::mutex> gate;  // order mode, O_APPEND: the gate held open (order_gate_locked)
  if (ordered && append) {
    const int g = order_gate_locked(ino, gate);
    if (g == 1) continue;
    if (g < 0) return g;
  }
  if (append) {
    std::uint64_t end = pos;
    const std::uint64_t at = pos;
    const struct iovec bytes = {const_cast<void*>(buf), n};
    const ssize_t r = append_through_locked(ino, fd, end, !explicit_offset, &bytes, 1, [&] {
      // pwrite on an O_APPEND descriptor appends on Linux (the offset is ignored) and leaves
      // the descriptor's offset alone.
      return explicit_offset ? ::pwrite(fd, buf, n, static_cast<off_t>(at)) : ::write(fd, buf, n);
    });
    if (r > 0) pos = end >= static_cast<std::uint64_t>(r) ? end - static_cast<std::uint64_t>(r) : 0;
    return r;
  }
  count_write_locked(ino, fd, n);
  if (ordered && order_through_locked(ino)) return order_write_locked(ino, fd, buf, n, pos);
  if (kernel_locked(ino)) {  // write-through, or see shut_down_locked
    if (ordered) order(ino);
    return kernel_write_locked(ino, fd, buf, n, pos);
  }
  if (ordered) return order_write_locked(ino, fd, buf, n, pos);
  return submit_write_locked(ino, buf, n, pos, false);
  }
}

ssize_t start_read_locked(Inode& ino, int fd, void* buf, std::size_t n, std::uint64_t pos, Receipt& r) {
  if (kernel_locked(ino)) {  // write-through (the kernel has every byte), or see shut_down_locked
    if (ino.through) order(ino);
    ssize_t k;
    do {
      k = ::pread(fd, buf, n, static_cast<off_t>(pos));
    } while (k < 0 && errno == EINTR);
    return k < 0 ? -errno : k;
  }
  order(ino);
  ino.cache_used = true;
  r = ino.file.read(pos, buf, n);
  return kCacheRead;
}

ssize_t do_read(Description& d, int fd, void* buf, std::size_t n, std::uint64_t pos) {
  if (!readable(d)) return -EBADF;
  if (const ssize_t e = clamp_count(buf, n)) return e;
  if (n == 0) return 0;
  if (pos > kOffMax || n > kOffMax - pos) return -EINVAL;
  Inode& ino = *d.inode;
  if (buf == nullptr) return pos >= current_size(ino, fd) ? 0 : -EFAULT;
  // Order mode: writes of this file are held back behind an epoch; the read lays them over what
  // the cache has.
  if (ino.deferred.load(std::memory_order_acquire) != 0) return read_held_through(ino, fd, buf, n, pos);
  Receipt r;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (const ssize_t k = start_read_locked(ino, fd, buf, n, pos, r); k != kCacheRead) return k;
  }
  if (!r.ok()) return -error_of(r);
  return static_cast<ssize_t>(r.bytes());
}

int sync_routed(Description& d, int fd, bool data_only) {
  Inode& ino = *d.inode;
  if (g_fsync_none.load(std::memory_order_relaxed)) return 0;  // benchmark only: see Settings
  // Order mode: an fsync closes an epoch; the exit handler waits for it (see OrderedCall), and
  // one that comes during the handler's last epoch waits and then goes the full way.
  const OrderedCall counted;
  if (order_mode() && !g_down.load(std::memory_order_acquire) && (!ino.through || ino.direct_fd >= 0)) {
    // The order mode's fsync, without the inode's mutex (the order thread takes it for every
    // held write it gives to the cache: see order_hold_write). The write-through rule (a file
    // synced after little data) counts from the program's fsync, not from the device's sync of
    // its epoch: with the log that sync comes only at a checkpoint, and SQLite's WAL, synced
    // after every transaction, left write-through after its first MiB and took the cache's way
    // for the rest of the run.
    ino.bytes_since_sync.store(0, std::memory_order_relaxed);
    return order_fsync(data_only);
  }
  if (order_mode()) {
    // The layer shuts down, or a write-through file without the order thread's descriptor.
    bool kernel, through;
    {
      std::lock_guard<std::mutex> lock(ino.mu);
      kernel = kernel_locked(ino);
      through = order_through_locked(ino);
      if (!kernel || through) ino.bytes_since_sync = 0;
    }
    // A file write-through without the order thread's descriptor (see order_through_locked) or
    // a layer shutting down: the kernel's own fsync below, which waits.
    if (!kernel || through) return order_fsync(data_only);
  }
  Receipt r;
  std::uint64_t target;
  bool small = false;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (kernel_locked(ino)) {
      // Write-through: order() first, so that this covers another thread's write that went
      // through just before (the kernel has every byte then). Or see shut_down_locked.
      if (ino.through) {
        order(ino);
        ino.bytes_since_sync = 0;
      }
      if (const int e = kernel_sync_file(ino, fd, data_only)) return -e;
      // An error of a write-back from before the file went write-through (a close of its stale
      // cache) is reported here, once, as the cached path does.
      if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return -w;
      return 0;
    }
    order(ino);
    target = ino.writes_submitted.load(std::memory_order_relaxed);
    const std::uint64_t through = g_sync_through.load(std::memory_order_relaxed);
    small = through != 0 && ino.bytes_since_sync <= through;
    ino.bytes_since_sync = 0;
    r = data_only ? ino.file.fdatasync() : ino.file.fsync();
  }
  const int err = error_of(r);
  settle(ino, target);
  if (err) return -err;
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) return -w;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (target > ino.clean_upto.load(std::memory_order_relaxed)) ino.clean_upto.store(target, std::memory_order_relaxed);
  }
  if (small) {
    // Synced often for what it writes: write-through from now on, when nothing was submitted
    // to the file since this sync (so the cache holds nothing dirty of it: this sync wrote
    // every earlier write back and made it durable).
    std::lock_guard<std::mutex> lock(ino.mu);
    if (!ino.through && ino.file.is_open() && ino.writes_submitted.load(std::memory_order_relaxed) == target &&
        ino.write_error.load(std::memory_order_acquire) == 0 && (!ino.last_sync.valid() || ino.last_sync.finished())) {
      ino.through = true;
      count_cached_locked(ino, false);  // this sync made every cached write of it durable
      remember_through_path(ino.name, true);
      logf("%s: write-through (synced after at most %" PRIu64 " bytes)", ino.name.c_str(),
           g_sync_through.load(std::memory_order_relaxed));
    }
  }
  return 0;
}

}  // namespace tai::posix::detail

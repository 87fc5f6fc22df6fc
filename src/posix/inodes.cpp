// tai/posix.hpp's layer: inodes: one per routed file, its tai::File, and write-through.
#include "src/posix/layer_internal.hpp"

#include <algorithm>

namespace tai::posix::detail {

// ---------------------------------------------------------------------------------------------
// Inodes

// Registered inodes that are not write-through: the only ones whose bytes the cache may hold
// (a write-through file's bytes are all in the kernel, see Inode::through). While it is 0, in
// the full fsync mode, a write-back of every file has nothing to do and the kernel's size of
// every file is its logical size, so nothing_cached() lets the preload library skip the
// layer for record locks and stat calls (SQLite makes about a dozen of them per transaction,
// and each call into the layer costs two rt_sigprocmask calls). Incremented before a file can
// take a cached write (under its mutex, or before the inode is published), decremented after
// its cache was made durable (a sync before write-through) or written back and closed (the
// last close): a thread that reads 0 has every write it happened-after in the kernel, and a
// write of another thread racing with the read is one made after the call, as with libc.
std::atomic<long> g_cached_files{0};

// The order mode's gate, mirrored out of OrderState::gate_closed (stored under o.mu wherever
// that changes, seq_cst as g_cached_files): while it is open no epoch is waiting and no write is
// held back, so the kernel has every byte of every write-through file, as in the full mode. Read
// by nothing_cached() without the state's mutex; a thread that reads it open has every write it
// happened-after in the kernel (the order thread stores it after applying the held writes).
std::atomic<bool> g_order_gate_open{true};

void inode_unref(Inode* ino) noexcept {
  if (ino->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete ino;
}

void note_error(Inode& ino, int err) noexcept {
  int expected = 0;
  ino.write_error.compare_exchange_strong(expected, err, std::memory_order_acq_rel);
}

int error_of(const Receipt& r) noexcept {
  const std::error_code e = r.error();
  if (!e) return 0;
  return e.category() == std::generic_category() || e.category() == std::system_category() ? e.value() : EIO;
}

// Waits until every write submitted before `target` was counted by its continuation (the
// continuation runs just after the write's receipt finishes, so this is short).
void settle(Inode& ino, std::uint64_t target) noexcept {
  while (ino.writes_settled.load(std::memory_order_acquire) < target) std::this_thread::yield();
}

// Under ino.mu: makes this thread's next submission come after the last asynchronous one of
// another thread (see layer.hpp, "Ordering across threads").
void order(Inode& ino) noexcept {
  const std::thread::id me = std::this_thread::get_id();
  if (ino.last_tid != me) {
    if (ino.last.valid()) ino.last.wait();
    ino.last_tid = me;
  }
}

void count_cached_locked(Inode& ino, bool cached) noexcept {
  if (ino.counted_cached == cached) return;
  ino.counted_cached = cached;
  g_cached_files.fetch_add(cached ? 1 : -1, std::memory_order_seq_cst);
}
std::mutex g_reg_mu;
std::map<InodeKey, Inode*>& registry() {
  static auto* m = new std::map<InodeKey, Inode*>;  // never destroyed: used by the exit handler
  return *m;
}

// Never takes g_init_mu (callers hold g_reg_mu or an inode's mutex, which the exit handler takes
// after g_init_mu): the layer must be configured already; the controller is made here at the
// first engine file (make_controller takes only its own leaf lock).
Result<File> open_engine_file(const std::string& path, bool readable) {
  Controller* c = make_controller();
  if (!c || g_down.load(std::memory_order_acquire))
    return Error{std::make_error_code(std::errc::operation_canceled), "the controller is not available"};
  const OpenMode mode(readable ? Open::read | Open::write : Open::write);
  const bool trivial = g_trivial.load(std::memory_order_acquire);
  return trivial ? c->open<BTreeTrivial>(path, mode) : c->open<BTreeDefault>(path, mode);
}

// Closes the inode's File, waiting for its write-back; the close's error (or an earlier write's
// not yet reported) is returned (errno, 0 if none). Under ino.mu.
int close_file_locked(Inode& ino) noexcept {
  order(ino);
  const std::uint64_t target = ino.writes_submitted.load(std::memory_order_relaxed);
  int err = 0;
  if (ino.file.is_open()) {
    const Receipt c = ino.file.close();
    err = error_of(c);
  }
  ino.file = File();
  ino.last = Receipt();
  ino.last_sync = Receipt();
  settle(ino, target);
  if (const int w = ino.write_error.exchange(0, std::memory_order_acq_rel)) {
    if (err == 0) err = w;
  }
  return err;
}

// Last description of the inode gone: unregister, close the File. Returns its error (errno).
int inode_release_open(Inode* ino) noexcept {
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    if (--ino->opens > 0) return 0;
    registry().erase(InodeKey{ino->dev, ino->ino});
  }
  int err;
  {
    std::lock_guard<std::mutex> lock(ino->mu);
    err = close_file_locked(*ino);
    count_cached_locked(*ino, false);  // written back (or its error kept in err), unregistered
    order_release_closed_locked(*ino);
  }
  if (err) logf("close of %s: write-back failed: %s", ino->name.c_str(), std::strerror(err));
  inode_unref(ino);
  return err;
}

// Opens the inode's File again after close_file_locked (an empty cache). Under ino.mu.
void reopen_locked(Inode& ino, int fd, const char* why) noexcept {
  // Through the descriptor at hand: the one the inode was first opened as may be closed by now
  // (and its number reused).
  const std::string how = ino.via_proc ? "/proc/self/fd/" + std::to_string(fd) : ino.name;
  auto f = open_engine_file(how, ino.engine_readable);
  if (!f && ino.engine_readable && f.error().code == std::errc::permission_denied) {
    // A file routed write-through was never opened by the engine: the first open learns here
    // what maybe_route learns for a cached one.
    ino.engine_readable = false;
    f = open_engine_file(how, false);
  }
  if (f) {
    ino.file = std::move(f.value());
  } else {
    // The descriptor is still the program's: the file cannot be reopened only if /proc or the
    // controller went away. Later operations fail with EIO (the Receipt of a closed File).
    logf("%s of %s: cannot reopen through TAI: %s", why, ino.name.c_str(), f.error().message.c_str());
    note_error(ino, EIO);
  }
  ino.cache_used = false;
}

// Truncation through the cache: write everything back and close the File (its cache goes with
// it), truncate with the program's descriptor, open the File again. Under ino.mu. Returns -errno
// of the truncation; a write-back error is kept for the next fsync/close.
int truncate_locked(Inode& ino, int fd, std::uint64_t length) noexcept {
  if (const int err = close_file_locked(ino)) note_error(ino, err);
  int rc;
  do {
    rc = ::ftruncate(fd, static_cast<off_t>(length));
  } while (rc < 0 && errno == EINTR);
  const int terr = rc < 0 ? errno : 0;
  struct stat st {};
  if (::fstat(fd, &st) == 0) ino.size.store(static_cast<std::uint64_t>(st.st_size), std::memory_order_release);
  ino.writeback_started = std::min<std::uint64_t>(ino.writeback_started, ino.size.load(std::memory_order_relaxed));
  reopen_locked(ino, fd, "truncate");
  return -terr;
}
// A truncation to the file's own logical size (cached and held writes included) changes no
// byte, so it needs neither the general path's write-back and reopen of the cache (which drops
// every cached block) nor, in order mode, the wait for every epoch to be durable (a drain and a
// checkpoint of the log: 3 ms each time SQLite's WAL checkpoint set its database's size). What
// the kernel must still see:
//  - its file as long: ftruncate there too, which changes only the times (as the kernel's does);
//  - shorter, with writes of ours on their way that reach `length`: in order mode those are held
//    back, and they grow the file (and set its times) when they arrive, in their order; without
//    the order mode the kernel's ftruncate may grow it now (zeros that the cached writes cover);
//  - shorter, and nothing of ours reaches `length` (another process shortened it): the general
//    path, which grows it with zeros as the kernel would;
//  - longer (another process grew it): the general path cuts it.
// 1 when the general path must do it, else 0 or -errno.
int truncate_to_own_size(Inode& ino, int fd, std::uint64_t length) noexcept {
  if (ino.size.load(std::memory_order_acquire) != length) return 1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) > length) return 1;
  const auto kernel_truncate = [&] {
    int rc;
    do {
      rc = ::ftruncate(fd, static_cast<off_t>(length));
    } while (rc < 0 && errno == EINTR);
    return rc < 0 ? -errno : 0;
  };
  if (static_cast<std::uint64_t>(st.st_size) == length) return kernel_truncate();
  if (!order_mode()) {
    // Cached writes of ours reach `length`, or the file was shortened behind the cache's back:
    // either way the kernel's file grows to `length` as the general path would make it.
    std::lock_guard<std::mutex> lock(ino.mu);
    if (ino.size.load(std::memory_order_acquire) != length || kernel_locked(ino)) return 1;
    return kernel_truncate();
  }
  OrderState& o = ord();
  std::lock_guard<std::mutex> il(ino.mu);  // the held writes' bytes leave under it
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.error != 0 || ino.size.load(std::memory_order_acquire) != length) return 1;
  return held_write_ends_at_locked(o, ino, length) ? 0 : 1;
}

std::mutex g_through_mu;
std::vector<std::string>& through_paths() {
  static auto* v = new std::vector<std::string>;  // never destroyed: used by the exit handler
  return *v;
}
bool through_path_known(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_through_mu);
  const auto& v = through_paths();
  return std::find(v.begin(), v.end(), path) != v.end();
}
void remember_through_path(const std::string& path, bool through) {
  try {
    std::lock_guard<std::mutex> lock(g_through_mu);
    auto& v = through_paths();
    v.erase(std::remove(v.begin(), v.end(), path), v.end());
    if (!through) return;
    if (v.size() >= kThroughPaths) v.erase(v.begin());
    v.push_back(path);
  } catch (...) {
    // Only a hint for the next open: without it that file starts cached.
  }
}

// Under ino.mu, after order(): the file leaves write-through. Stale clean blocks (cached before
// it went write-through, overwritten in the kernel since) go with a close and reopen of the
// engine file; a file opened write-through gets its first engine file. false (and the file
// stays write-through, which is always correct) when the engine cannot open it.
bool leave_through_locked(Inode& ino, int fd) noexcept {
  if (!ino.through) return true;
  if (ino.file.is_open() && ino.cache_used) {
    if (const int err = close_file_locked(ino)) note_error(ino, err);
  }
  if (!ino.file.is_open()) {
    const int before = ino.write_error.load(std::memory_order_acquire);
    reopen_locked(ino, fd, "leaving write-through");
    if (!ino.file.is_open()) {
      // The reopen's EIO: nothing was lost, the kernel has the file.
      if (before == 0) ino.write_error.store(0, std::memory_order_release);
      return false;
    }
  }
  count_cached_locked(ino, true);  // before the write that made it leave reaches the cache
  ino.through = false;
  remember_through_path(ino.name, false);
  logf("%s: back to the cache (more than %" PRIu64 " bytes between syncs)", ino.name.c_str(),
       g_sync_through.load(std::memory_order_relaxed));
  return true;
}

}  // namespace tai::posix::detail

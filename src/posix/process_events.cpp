// tai/posix.hpp's layer: the controller's life and the process's: making the controller, the exit
// handler, write-back of everything, the keeper thread, fork and exec, restarts for the tests.
#include "src/posix/layer_internal.hpp"

namespace tai::posix::detail {

// Sets the kernel's offset of fd, with the system call itself: the exit handler runs outside
// the preload library's depth count, so ::lseek would come back into the layer through its
// interposer, and wait for the description's mutex the caller holds.
void kernel_seek(int fd, std::uint64_t offset) noexcept {
  (void)::syscall(SYS_lseek, fd, static_cast<off_t>(offset), SEEK_SET);
}

// Hands each routed descriptor's offset to the kernel (the exit handler: libc serves them
// afterwards).
void hand_back_offsets() {
  const int used = g_top_used.load(std::memory_order_acquire);  // pairs with slot_of's raise
  for (int top = 0; top < used; ++top) {
    Chunk* c = g_top[top].load(std::memory_order_acquire);
    if (!c) continue;
    for (int i = 0; i < (1 << kChunkBits); ++i) {
      Description* d = c->slot[i].load(std::memory_order_acquire);
      if (!d) continue;
      // By slot, not by the number the description was opened as: that one may be closed (an
      // alias made by dup outlives it). Aliases share the kernel offset: setting it twice is fine.
      const int fd = (top << kChunkBits) | i;
      std::lock_guard<std::mutex> lock(d->mu);
      kernel_seek(fd, d->offset);
      d->handed = true;  // a call that waited for d->mu meanwhile now uses the kernel's offset
    }
  }
}

std::vector<std::string> shutdown_locked() {
  std::vector<std::string> failures;
  Controller* c = nullptr;
  {
    // Under g_make_mu: a controller being made now is either seen here or not made at all.
    std::lock_guard<std::mutex> make(g_make_mu);
    g_down.store(true, std::memory_order_release);
    c = g_ctl.load(std::memory_order_acquire);
  }
  if (!g_configured.load(std::memory_order_acquire)) {  // nothing was ever routed
    g_handed_back.store(true, std::memory_order_release);
    return failures;
  }
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    for (auto& [key, ino] : registry()) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (const int err = close_file_locked(*ino))
        failures.push_back("write-back of " + ino->name + " failed: " + std::strerror(err));
    }
  }
  hand_back_offsets();
  g_handed_back.store(true, std::memory_order_release);
  if (!c) return failures;  // every routed file was write-through: the kernel has its bytes
  ShutdownReport report = c->shutdown();
  for (auto& f : report.failures) failures.push_back(std::move(f));
  return failures;
}

std::atomic<bool> g_forked_child{false};  // set in a child of fork(): never touch the controller

void at_exit() {
  // A child of fork() has a copy of the controller without its threads (and maybe with a lock
  // some other thread of the parent held): nothing to shut down, nothing to take.
  if (g_forked_child.load(std::memory_order_acquire)) return;
  const int saved = errno;
  // A fatal signal's handler (the preload library's) asks the keeper for a write-back, which
  // needs g_init_mu: held back until the shutdown is done, as inside the layer.
  std::vector<std::string> failures;
  // Order mode: every closed epoch durable first (the order thread does it; it takes no lock of ours).
  if (order_mode() && layer_active()) {
    const std::uint64_t t0 = now_ns();
    order_sync_before_shutdown(failures);
    const HeldCopyPool& pool = HeldCopyPool::instance();
    logf("fsync order at exit: %.1f ms to make every closed epoch durable; %llu epochs closed, %llu held-back writes, "
         "%llu made durable inline, %llu logged in %llu batches, %llu checkpoints, %llu waits for the device (back-pressure), "
         "%.1f ms the longest from an fsync to durable (%.1f ms of an fsync that returned early); copy blocks %" PRIu64 " allocated, %" PRIu64 " reused",
         static_cast<double>(now_ns() - t0) / 1e6, g_stat_closed.load(std::memory_order_relaxed),
         g_stat_deferred.load(std::memory_order_relaxed), g_stat_inline.load(std::memory_order_relaxed),
         g_stat_logged.load(std::memory_order_relaxed),
         g_stat_log_batches.load(std::memory_order_relaxed), g_stat_checkpoints.load(std::memory_order_relaxed),
         g_stat_backpressure.load(std::memory_order_relaxed),
         static_cast<double>(g_stat_max_lag_ns.load(std::memory_order_relaxed)) / 1e6,
         static_cast<double>(g_stat_max_early_lag_ns.load(std::memory_order_relaxed)) / 1e6, pool.allocations(),
         pool.reuses());
  }
  {
    const tai::detail::SignalsBlockedScope blocked;
    std::lock_guard<std::mutex> lock(g_init_mu);
    for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  }
  if (failures.empty()) {
    errno = saved;
    return;
  }
  std::fprintf(stderr, "tai::posix: at exit, data could not be written back:\n");
  for (const auto& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
  std::fprintf(stderr, "tai::posix: exiting with status %d\n", kExitStatusOnLoss);
  std::fflush(nullptr);
  ::_exit(kExitStatusOnLoss);
}

// Registered when libtai is loaded, before the program's own handlers and static objects: it
// runs after them (atexit handlers run in reverse order), so their writes are written back too.
__attribute__((constructor(101))) void register_exit_handler() { std::atexit(&at_exit); }

namespace {
// The controller's options and the test hook, from the settings configure applied: written
// under g_init_mu and g_make_mu before g_configured's release, read under g_make_mu. Built at
// first use (the preload library may configure the layer before this file's static objects
// are initialised) and never destroyed (a thread may make the controller while exit()
// destroys the library's statics).
ControllerOptions& applied_options() {
  static auto* options = new ControllerOptions;  // never destroyed
  return *options;
}
std::function<void(Controller&)>& applied_setup() {
  static auto* setup = new std::function<void(Controller&)>;  // never destroyed
  return *setup;
}
// The controller could not be made: not tried again (until restart_for_testing). Under g_make_mu.
bool g_make_failed = false;
}  // namespace

bool layer_active() noexcept {
  return g_configured.load(std::memory_order_acquire) && !g_down.load(std::memory_order_acquire);
}

// Applies the settings once (and again after restart_for_testing): the modes, the thresholds,
// the logs of epochs a dead process left. false when the layer is down. Takes g_init_mu: never
// under g_reg_mu or an inode's mutex.
bool configure() {
  if (g_configured.load(std::memory_order_acquire)) return !g_down.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_down.load(std::memory_order_acquire)) return false;
  if (g_configured.load(std::memory_order_acquire)) return true;
  std::vector<std::string> warnings;
  Settings s = settings_override() ? *settings_override() : settings_from_env(&warnings);
  g_log.store(s.log, std::memory_order_relaxed);
  for (const auto& w : warnings) std::fprintf(stderr, "tai::posix: %s\n", w.c_str());
  // The layer starts the device write-back itself (start_writeback_every: it first hands the
  // cache's dirty bytes to the kernel, which the engine's own write-behind cannot), so the
  // engine's is off: one sync_file_range per interval, not two.
  s.options.engine_options.start_writeback_bytes = 0;
  {
    std::lock_guard<std::mutex> make(g_make_mu);
    applied_options() = s.options;
    applied_setup() = s.setup;
  }
  g_trivial.store(s.trivial_tree, std::memory_order_release);
  g_start_writeback.store(s.start_writeback_bytes, std::memory_order_release);
  g_write_behind_ns.store(s.write_behind_ms * 1'000'000u, std::memory_order_release);
  g_sync_through.store(s.sync_through_bytes, std::memory_order_release);
  g_start_through.store(s.files_start_through, std::memory_order_release);
  if (!g_fsync_mode_set.load(std::memory_order_acquire))
    g_fsync_mode.store(static_cast<int>(s.fsync_mode), std::memory_order_release);
  g_fsync_none.store(s.fsync_none_for_benchmark, std::memory_order_release);
  g_max_delay_ns.store(s.fsync_max_delay_ms * 1'000'000u, std::memory_order_release);
  g_fsync_inline.store(static_cast<int>(s.fsync_inline), std::memory_order_release);
  // The settings that own it (settings_override) stay until restart_for_testing clears this.
  g_kernel_observer.store(s.kernel_observer.get(), std::memory_order_release);
  HeldCopyPool::instance().set_huge_pages(s.options.huge_pages);
  // The weak quota as the controller will have it (the constructor's correction when it
  // exceeds the strict one).
  const std::uint64_t weak =
      s.options.weak_quota > s.options.strict_quota ? s.options.strict_quota / 2 : s.options.weak_quota;
  g_order_limit.store(s.order_queue_bytes ? s.order_queue_bytes : std::max<std::uint64_t>(weak, 1),
                      std::memory_order_release);
  // Before any file is routed: a log of epochs left by a process that died is replayed into
  // its files, whatever this process's mode (the files alone may not hold a state of that
  // program until then).
  recover_order_logs_once(s.fsync_log_dir);
  order_log_configure(s.fsync_log_dir, s.fsync_log_checkpoint_bytes);
  if (s.fsync_none_for_benchmark)
    std::fprintf(stderr, "tai::posix: benchmark-only mode: every fsync is a no-op, nothing is durable\n");
  logf("fsync mode %s (max delay %" PRIu64 " ms, queue %" PRIu64 " bytes), tree %s, start write-back every %" PRIu64
       " bytes, write-behind %" PRIu64 " ms, write-through below %" PRIu64 " bytes per sync",
       order_mode() ? "order" : "full", s.fsync_max_delay_ms, g_order_limit.load(std::memory_order_relaxed),
       s.trivial_tree ? "trivial" : "default", s.start_writeback_bytes, s.write_behind_ms, s.sync_through_bytes);
  g_configured.store(true, std::memory_order_release);
  return true;
}

// The controller, made at the first file the engine opens (or by controller()). nullptr when
// the layer is down or not configured, or when it cannot be made: then a file that would be
// cached is not routed (libc's), and a routed write-through file stays write-through (its
// offset is the layer's: the layer goes on serving it). Takes g_make_mu only (a leaf): callable
// under an inode's mutex.
Controller* make_controller() {
  if (Controller* c = g_ctl.load(std::memory_order_acquire)) return c;
  if (!g_configured.load(std::memory_order_acquire)) return nullptr;
  Controller* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_make_mu);
    if (g_down.load(std::memory_order_acquire) || g_make_failed) return nullptr;
    if (Controller* made = g_ctl.load(std::memory_order_acquire)) return made;
    try {
      c = new Controller(applied_options());
      if (applied_setup()) applied_setup()(*c);
    } catch (const std::exception& ex) {
      std::fprintf(stderr,
                   "tai::posix: cannot make the controller (%s): files opened from now on pass through to libc, "
                   "and those routed write-through stay so\n",
                   ex.what());
      delete c;
      g_make_failed = true;
      return nullptr;
    }
    // A new controller caches nothing yet: a stamp left by the last one (restart_for_testing,
    // whose write-behind may have been off, so that the keeper never cleared it) would keep the
    // next write from stamping and waking the keeper, and its deadline would pass unseen.
    g_dirty_since.store(0, std::memory_order_release);
    g_keeper_wake.fetch_add(1, std::memory_order_release);
    futex_wake(g_keeper_wake, 1);
    logf("controller: %u workers, engine %s (%s), quota %" PRIu64 ",%" PRIu64, c->workers(),
         c->options().engine.c_str(), c->engine_note().c_str(), c->options().weak_quota, c->options().strict_quota);
    g_ctl.store(c, std::memory_order_release);
  }
  // The keeper writes back what the cache holds: needed from the first engine file on.
  start_keeper();
  return c;
}

Controller* controller() { return configure() ? make_controller() : nullptr; }

bool controller_made_for_testing() noexcept { return g_ctl.load(std::memory_order_acquire) != nullptr; }

int write_back_all(bool drain_order) {
  // Held writes reach the cache first (the caller hands the cache to the kernel).
  if (drain_order) order_drain();
  Controller* c = g_down.load(std::memory_order_acquire) ? nullptr : g_ctl.load(std::memory_order_acquire);
  if (!c) return 0;
  // Every routed file's writes that another thread submitted must reach the cache first.
  std::vector<Receipt> lasts;
  std::vector<std::pair<Inode*, std::uint64_t>> dirty;  // each holds a reference
  try {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    for (auto& [key, ino] : registry()) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (ino->last.valid()) lasts.push_back(ino->last);
      const std::uint64_t submitted = ino->writes_submitted.load(std::memory_order_relaxed);
      if (submitted != ino->clean_upto.load(std::memory_order_relaxed)) {
        ino->refs.fetch_add(1, std::memory_order_relaxed);
        dirty.emplace_back(ino, submitted);
      }
    }
  } catch (const std::bad_alloc&) {
    for (auto& [ino, n] : dirty) inode_unref(ino);
    dirty.clear();
    return error_of(c->flush());  // the slow way: everything
  }
  if (dirty.empty()) return 0;
  for (auto& r : lasts) r.wait();
  Receipt r = c->flush();
  const int err = error_of(r);
  for (auto& [ino, n] : dirty) {
    if (err == 0) {
      std::lock_guard<std::mutex> il(ino->mu);
      if (n > ino->clean_upto.load(std::memory_order_relaxed)) ino->clean_upto.store(n, std::memory_order_relaxed);
    }
    inode_unref(ino);
  }
  return err;
}

void keeper_write_back() noexcept {
  // g_init_mu: the controller cannot be shut down or replaced (restart_for_testing) meanwhile.
  std::lock_guard<std::mutex> lock(g_init_mu);
  const int err = write_back_all(false);  // the write-behind: what the cache has, no waiting for epochs
  // A failed write-back leaves the data dirty in the cache; the file's next fsync or close
  // writes it again and reports the error.
  if (err) logf("write-behind: write-back failed: %s", std::strerror(err));
}

void keeper_main() noexcept {
  tai::detail::mark_this_thread_as_tai("tai-writebehind");  // libc directly, no program signal handlers here
  for (;;) {
    const std::uint32_t seen = g_keeper_wake.load(std::memory_order_acquire);
    const std::uint32_t requested = g_end_requested.load(std::memory_order_acquire);
    if (requested != g_end_done.load(std::memory_order_relaxed)) {  // only the keeper stores it
      // Everything written so far goes now: the stamp is cleared first (acq_rel: a write
      // stamping after this is seen by the next round; one before it is in this write-back).
      g_handing_since.store(g_dirty_since.exchange(0, std::memory_order_acq_rel), std::memory_order_relaxed);
      keeper_write_back();
      g_handing_since.store(0, std::memory_order_relaxed);
      g_end_done.store(requested, std::memory_order_release);  // the waiters' acquire loads
      futex_wake(g_end_done, INT_MAX);
      continue;
    }
    const std::uint64_t deadline = g_write_behind_ns.load(std::memory_order_relaxed);
    const std::uint64_t since = g_dirty_since.load(std::memory_order_acquire);
    std::uint64_t wait_ns = 0;  // no limit: nothing is dirty (or write-behind is off)
    if (deadline != 0 && since != 0) {
      const std::uint64_t now = now_ns();
      if (now >= since + deadline) {
        g_handing_since.store(g_dirty_since.exchange(0, std::memory_order_acq_rel), std::memory_order_relaxed);
        keeper_write_back();
        g_handing_since.store(0, std::memory_order_relaxed);
        continue;
      }
      wait_ns = since + deadline - now;
    }
    futex_wait(g_keeper_wake, seen, wait_ns);
  }
}

void start_keeper() noexcept {
  bool expected = false;
  // acq_rel: one thread starts it; the others see it started.
  if (!g_keeper_started.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return;
  try {
    const tai::detail::SignalsBlockedScope start_blocked;  // it starts with every signal blocked
    std::thread(keeper_main).detach();  // lives as long as the process (gone in a forked child)
  } catch (const std::exception& ex) {
    g_keeper_failed.store(true, std::memory_order_release);
    std::fprintf(stderr, "tai::posix: cannot start the write-behind thread (%s): no write-behind deadline; "
                 "cached writes reach the kernel at close, fsync and the end of the program\n", ex.what());
  }
}

int write_back_for_end(int timeout_ms) noexcept {
  if (g_forked_child.load(std::memory_order_acquire) || g_down.load(std::memory_order_acquire) ||
      !g_keeper_started.load(std::memory_order_acquire))
    return 0;  // nothing was ever cached (the keeper starts with the controller)
  if (g_keeper_failed.load(std::memory_order_acquire)) {
    // No keeper: on this thread, without the bounded wait (better than losing the data).
    keeper_write_back();
    return 0;
  }
  const std::uint32_t mine = g_end_requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  g_keeper_wake.fetch_add(1, std::memory_order_release);
  futex_wake(g_keeper_wake, 1);
  const std::uint64_t limit = now_ns() + static_cast<std::uint64_t>(timeout_ms < 0 ? 0 : timeout_ms) * 1'000'000u;
  for (;;) {
    const std::uint32_t done = g_end_done.load(std::memory_order_acquire);
    if (static_cast<std::int32_t>(done - mine) >= 0) return 0;
    const std::uint64_t now = now_ns();
    if (now >= limit) return ETIMEDOUT;
    futex_wait(g_end_done, done, limit - now);
  }
}

std::int64_t unwritten_age_ms() noexcept {
  // relaxed: a report, read while the keeper may be stuck; the older of the two stamps.
  const std::uint64_t a = g_handing_since.load(std::memory_order_relaxed);
  const std::uint64_t b = g_dirty_since.load(std::memory_order_relaxed);
  const std::uint64_t oldest = a == 0 ? b : (b == 0 || a < b ? a : b);
  if (oldest == 0) return -1;
  const std::uint64_t now = now_ns();
  return now > oldest ? static_cast<std::int64_t>((now - oldest) / 1'000'000u) : 0;
}

// Writes back after every earlier write of any thread to `ino` (order()); waits outside the
// inode's mutex. errno or 0.
int write_back_one(Inode& ino) {
  order_drain();  // held writes of the file reach the cache first
  Controller* c = g_down.load(std::memory_order_acquire) ? nullptr : g_ctl.load(std::memory_order_acquire);
  if (!c) return 0;
  Receipt last;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    if (!ino.file.is_open()) return 0;
    order(ino);
    if (ino.through) return 0;  // nothing of it is cached dirty: the kernel has every byte
    last = ino.last;
  }
  // The last submission first: a write too small to cache goes to the engine as a request of
  // its own, which flush() does not wait for (cpio -m: a 6-byte file written after its
  // futimens). Its error, if any, reaches the file's next fsync or close (note_error).
  if (last.valid()) last.wait();
  // The controller has no per-file flush; flush() after every earlier submission to the file
  // covers what the cache holds of it.
  return error_of(c->flush());
}

int write_back_inode(dev_t dev, ino_t ino) {
  if (!layer_active()) return 0;
  Inode* ip = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    auto it = registry().find(InodeKey{dev, ino});
    if (it == registry().end()) return 0;
    ip = it->second;
    ip->refs.fetch_add(1, std::memory_order_relaxed);  // under g_reg_mu: it is registered (refs >= 1)
  }
  const int err = write_back_one(*ip);
  inode_unref(ip);
  return err;
}

int write_back_fd(int fd) {
  Ref d(fd);
  return d ? write_back_one(*d->inode) : 0;
}

void disable_in_forked_child() noexcept {
  g_forked_child.store(true, std::memory_order_release);
  g_down.store(true, std::memory_order_release);
  g_handed_back.store(true, std::memory_order_release);
}

// Order mode, before a shutdown (exit, exec): every epoch closed so far durable (what `full`
// would have given by now: each fsync durable; the open epoch's writes reach the kernel unsynced,
// as a plain exit leaves them), the held writes applied, and the layer `full` from then on. The
// failure, if any, as a message.
void order_sync_before_shutdown(std::vector<std::string>& failures) {
  if (!order_mode() || !layer_active()) return;
  order_exit_gate_close();  // other threads' writes wait: the epochs closed by now are the last
  if (const int err = order_wait_closed()) failures.push_back(std::string("fsync order: an epoch failed: ") + std::strerror(err));
  order_log_shutdown();
  // A held write of the open epoch that failed as the gate opened (order_log_shutdown stops
  // waiting at an error): reported like a failed write-back.
  if (const int err = order_take_error()) failures.push_back(std::string("fsync order: a held write failed: ") + std::strerror(err));
  order_exit_gate_open();  // `full` from here: the waiting writes go to the cache the shutdown writes back
}

std::vector<std::string> shutdown_for_exec() {
  if (g_forked_child.load(std::memory_order_acquire)) return {};
  std::vector<std::string> failures;
  order_sync_before_shutdown(failures);
  std::lock_guard<std::mutex> lock(g_init_mu);
  for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  return failures;
}

int order_point() { return order_point_impl(); }

void hold_order_thread_for_testing(bool hold) {
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  o.held = hold;
  o.cv.notify_all();
}

void skip_epoch_syncs_for_testing(unsigned every) { g_skip_epoch_syncs.store(every, std::memory_order_relaxed); }
void skip_directory_syncs_for_testing(bool skip) { g_skip_dir_syncs.store(skip, std::memory_order_relaxed); }
void fail_directory_syncs_for_testing(unsigned count, int err) {
  g_fail_dir_syncs_errno.store(err, std::memory_order_relaxed);
  g_fail_dir_syncs.store(count, std::memory_order_relaxed);
}

void fail_order_bookkeeping_for_testing(unsigned count) { g_fail_apply_notes.store(count, std::memory_order_relaxed); }

void delay_order_log_writes_for_testing(unsigned ms) { g_log_write_delay_ms.store(ms, std::memory_order_relaxed); }

bool fsync_is_noop() noexcept { return g_fsync_none.load(std::memory_order_relaxed); }

bool nothing_cached() noexcept {
  // The order mode holds writes back behind epochs while its gate is closed: a record lock then
  // has them to publish, a stat their size to fix, a rename or unlink the epochs to wait for.
  // With the gate open there is nothing of that (no epoch waits, nothing is held back).
  return g_cached_files.load(std::memory_order_seq_cst) == 0 &&
         (!order_mode() || g_order_gate_open.load(std::memory_order_seq_cst));
}

// full mode: a durable sync of every routed file, all submitted, then all waited for.
int full_sync_all() {
  if (!layer_active()) return 0;
  std::vector<Inode*> files;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    try {
      files.reserve(registry().size());
    } catch (const std::bad_alloc&) {
      return ENOMEM;
    }
    for (auto& [key, ino] : registry()) {
      ino->refs.fetch_add(1, std::memory_order_relaxed);
      files.push_back(ino);
    }
  }
  int err = 0;
  std::vector<Inode*> cached;
  for (Inode* ip : files) {
    bool through = false;
    {
      std::lock_guard<std::mutex> lock(ip->mu);
      order(*ip);
      through = ip->through || !ip->file.is_open();
    }
    if (through) {
      // The kernel has its bytes: its own sync, through TAI's duplicate when there is one.
      if (ip->writeback_fd >= 0 && ::fsync(ip->writeback_fd) != 0 && err == 0) err = errno;
      if (ip->writeback_fd < 0) ::sync();
      if (const int w = ip->write_error.exchange(0, std::memory_order_acq_rel); w && err == 0) err = w;
    } else {
      cached.push_back(ip);
    }
  }
  if (const int e = sync_files(cached, false); e && err == 0) err = e;
  for (Inode* ip : files) inode_unref(ip);
  return err;
}

int sync_all() {
  const OrderedCall counted;  // order mode: the exit handler waits for it (see there)
  return order_mode() ? order_sync_all() : full_sync_all();
}

bool cached_size(dev_t dev, ino_t ino, std::uint64_t* size) {
  if (!layer_active()) return false;
  std::lock_guard<std::mutex> lock(g_reg_mu);
  auto it = registry().find(InodeKey{dev, ino});
  if (it == registry().end()) return false;
  *size = it->second->size.load(std::memory_order_acquire);
  return true;
}

int forget_range(unsigned first, unsigned last) {
  int err = 0;
  for_each_slot([&](int fd, Description*) {
    if (static_cast<unsigned>(fd) < first || static_cast<unsigned>(fd) > last) return;
    const int e = forget_descriptor(fd);
    if (err == 0) err = e;
  });
  return err;
}

ShutdownReport restart_for_testing(const Settings& settings) {
  order_exit_gate_reset();  // a shutdown_for_testing before left the gate open, the layer `full`
  if (order_mode() && layer_active()) {
    // Every epoch durable before the controller goes; a failure (a test's fault engine) is
    // returned and the thread goes on, a few times, then what is left is dropped.
    for (int i = 0; i < 8 && order_sync_all() != 0; ++i) {
    }
    order_log_shutdown();
  }
  {
    OrderState& o = ord();
    std::lock_guard<std::mutex> lk(o.mu);
    o.error = 0;
    o.epoch_ns = 0;  // the next controller's device is measured afresh
    o.last_durable_ns = 0;
    o.epoch_peak_ns = 0;
    // The automatic inline choice learns the program's ways afresh too: a test that waited for
    // its epochs at once would otherwise make the next test's first epochs inline, unmeasured
    // by the pace its back-pressure needs.
    o.probe_seq = 0;
    o.probe_closed_ns = 0;
    o.caught_history = 0;
    o.probes_judged = 0;
    o.inline_since_probe = 0;
    // The longest lags are the next controller's: a test that held the device before does not
    // count in the next one's bound (the other stats are counts, read as differences).
    g_stat_max_lag_ns.store(0, std::memory_order_relaxed);
    g_stat_max_early_lag_ns.store(0, std::memory_order_relaxed);
    if (!o.closed.empty() || !o.open_writes.empty()) {
      std::fprintf(stderr, "tai::posix: restart_for_testing: fsync order queue not empty; dropped\n");
      for (auto& e : o.closed) {
        for (auto& w : e.writes) {
          w.ino->deferred.fetch_sub(1, std::memory_order_acq_rel);
          inode_unref(w.ino);
        }
        for (Inode* ip : e.dirty) inode_unref(ip);
        drop_dirs(e.dirs);
      }
      for (auto& w : o.open_writes) {
        w.ino->deferred.fetch_sub(1, std::memory_order_acq_rel);
        inode_unref(w.ino);
      }
      o.closed.clear();
      o.open_writes.clear();
      o.queued_bytes = 0;
      o.durable_seq = o.closed_seq;
    }
    o.checkpointed_seq = o.durable_seq;
    for (Inode* ip : o.open_dirty) {
      ip->in_open_dirty = false;
      inode_unref(ip);
    }
    o.open_dirty.clear();
    drop_dirs(o.open_dirs);
    o.gate_closed = false;
    g_order_gate_open.store(true, std::memory_order_seq_cst);
    o.cv.notify_all();
  }
  g_fsync_mode_set.store(false, std::memory_order_release);
  g_fsync_mode.store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_init_mu);
  // Before the settings that own the observer are replaced below; the next configure sets the
  // new one. The old one is kept until the next restart: an order thread that loaded it before
  // this store (an epoch still failing after the retries above) may still report to it.
  g_kernel_observer.store(nullptr, std::memory_order_release);
  static std::shared_ptr<KernelObserver> retired_observer;
  retired_observer = settings_override() ? settings_override()->kernel_observer : nullptr;
  ShutdownReport report;
  Controller* old = nullptr;
  {
    std::lock_guard<std::mutex> make(g_make_mu);
    old = g_ctl.exchange(nullptr, std::memory_order_acq_rel);
    g_configured.store(false, std::memory_order_release);  // the next routed open applies `settings`
    g_make_failed = false;
  }
  if (old) {
    report = old->shutdown();
    delete old;
  }
  settings_override() = settings;
  g_down.store(false, std::memory_order_release);
  g_handed_back.store(false, std::memory_order_release);
  return report;
}

std::vector<std::string> shutdown_for_testing() {
  std::vector<std::string> failures;
  order_sync_before_shutdown(failures);
  std::lock_guard<std::mutex> lock(g_init_mu);
  for (auto& f : shutdown_locked()) failures.push_back(std::move(f));
  return failures;
}

}  // namespace tai::posix::detail

// tai/posix.hpp's layer: the order mode (TAI_FSYNC=order). How it works (epochs, the gate, the order
// thread, what it leaves out): the comment above struct Deferred in layer_internal.hpp.
#include "src/posix/layer_internal.hpp"

#include <pthread.h>
#include <sched.h>

#include <sys/file.h>
#include <chrono>
#include <thread>

namespace tai::posix::detail {

OrderState& ord() {
  static auto* o = new OrderState;  // never destroyed: used by the exit handler
  return *o;
}
// skip_epoch_syncs_for_testing: the order thread breaks the rule on purpose (the crash-state
// suite's proof that it can see a broken order): 0 never, else every n-th epoch's syncs are
// skipped. Read once per epoch.
std::atomic<unsigned> g_skip_epoch_syncs{0};
// skip_directory_syncs_for_testing: the order thread leaves the epochs' directories unsynced
// (the crash-state suite's proof that it sees a name change overtaken by a later epoch).
std::atomic<bool> g_skip_dir_syncs{false};
// fail_directory_syncs_for_testing: how many more directory syncs fail, and with which errno.
std::atomic<unsigned> g_fail_dir_syncs{0};
std::atomic<int> g_fail_dir_syncs_errno{0};
// delay_order_log_writes_for_testing: milliseconds added to each batch's write; 0 normally.
std::atomic<unsigned> g_log_write_delay_ms{0};
// fail_order_bookkeeping_for_testing: how many more of apply_writes's notes of a file it wrote
// fail as if memory had run out; 0 normally.
std::atomic<unsigned> g_fail_apply_notes{0};
// Closes that waited for the closed epochs alone (order_close), for tests (relaxed: a count).
static std::atomic<std::uint64_t> g_closes_through{0};
// How long the log stays open after the queue of epochs empties, for the next ones, when nobody
// waits for the gate (then: a checkpoint, and the writes go to the cache again).
constexpr int kLogIdleMs = 50;
// The log writes every byte twice (the log, then the file): it pays for small epochs, whose cost
// is the device sync, and not for large ones, whose cost is the bytes (the serial image loop at
// an fsync every 30 records, 0.8 MiB an epoch, was 6 % slower with the log). An epoch larger than
// this goes the direct way.
constexpr std::uint64_t kLogMaxEpochBytes = 128 << 10;
// A batch takes the queued epochs up to this many bytes of writes, so that its buffer (with the
// records' headers and the alignment) stays one that HeldCopyPool keeps: a larger one came from
// the allocator every time, and writing it faulted in every page (under SQLite's WAL, with the
// program a few thousand transactions ahead, that was a quarter of the order thread's time).
constexpr std::uint64_t kLogMaxBatchBytes = HeldCopyPool::kLargest / 8 * 7;
// After this many forced checkpoints in a row that closed a single batch each, the log pauses for
// kLogPauseEpochs epochs (see log_checkpoint).
constexpr unsigned kLogShortRunsToPause = 4;
constexpr unsigned kLogPauseEpochs = 256;
// Directories an epoch keeps a descriptor of each (NamedDir); past them, one per file system.
constexpr std::size_t kNamedDirsMax = 64;
// Automatic inline epochs: every this many alone epochs, one is a probe (inline_wanted_locked).
constexpr unsigned kInlineProbeEvery = 32;
std::atomic<unsigned long long> g_stat_closed{0}, g_stat_durable{0}, g_stat_deferred{0}, g_stat_backpressure{0},
    g_stat_max_queued{0}, g_stat_logged{0}, g_stat_log_batches{0}, g_stat_checkpoints{0}, g_stat_inline{0},
    g_stat_through_writes{0}, g_stat_max_lag_ns{0}, g_stat_max_early_lag_ns{0};

// Under o.mu, before the k epochs from the front are popped as durable: the pace (o.epoch_ns,
// see there), and the oldest's time from its fsync to durable, the most of the run in
// g_stat_max_lag_ns (what an exit waits for at most), and the same of the oldest whose fsync
// returned early in g_stat_max_early_lag_ns (what TAI_FSYNC_MAX_DELAY bounds).
void note_durable_locked(OrderState& o, std::size_t k) {
  if (o.closed.empty() || k == 0) return;
  const std::uint64_t now = now_ns();
  const std::uint64_t closed = o.closed.front().closed_ns;
  const std::uint64_t per = (now - std::max(o.last_durable_ns, closed)) / k;
  o.epoch_ns = o.epoch_ns == 0 ? per : (3 * o.epoch_ns + per) / 4;
  o.epoch_peak_ns = std::max(per, o.epoch_peak_ns - o.epoch_peak_ns / 16);
  o.last_durable_ns = now;
  const std::uint64_t lag = now - closed;
  if (lag > g_stat_max_lag_ns.load(std::memory_order_relaxed)) g_stat_max_lag_ns.store(lag, std::memory_order_relaxed);
  for (std::size_t i = 0; i < k && i < o.closed.size(); ++i) {
    if (!o.closed[i].early) continue;
    const std::uint64_t early_lag = now - o.closed[i].closed_ns;  // the oldest early one: the longest
    if (early_lag > g_stat_max_early_lag_ns.load(std::memory_order_relaxed))
      g_stat_max_early_lag_ns.store(early_lag, std::memory_order_relaxed);
    break;
  }
}

// Under o.mu: the open epoch must sync `ino`.
void note_open_dirty_locked(OrderState& o, Inode& ino) {
  if (ino.in_open_dirty) return;
  o.open_dirty.push_back(&ino);  // may throw bad_alloc: the caller fails the write (ENOMEM)
  ino.in_open_dirty = true;
  ino.refs.fetch_add(1, std::memory_order_relaxed);
}

// Under o.mu: the open epoch must sync directory `d` (NamedDir). False when an entry already
// stands for it (the caller closes d.fd); true when `d` was kept (its descriptor is the list's
// now). May throw bad_alloc (nothing kept).
static bool add_named_dir_locked(OrderState& o, const NamedDir& d) {
  for (NamedDir& have : o.open_dirs)
    if (have.dev == d.dev && (have.whole_fs || have.ino == d.ino)) {
      have.noted = std::max(have.noted, d.noted);
      have.whole_fs = have.whole_fs || d.whole_fs;  // a failed epoch's syncfs stays one
      return false;
    }
  if (o.open_dirs.size() >= kNamedDirsMax && !d.whole_fs) {
    // Many directories in one epoch (an untar that renames into thousands of them): one
    // descriptor per file system, synced whole, keeps the descriptors held bounded.
    for (NamedDir& have : o.open_dirs)
      if (have.dev == d.dev) {
        have.whole_fs = true;
        return false;
      }
    NamedDir whole = d;
    whole.whole_fs = true;
    o.open_dirs.push_back(whole);
    return true;
  }
  o.open_dirs.push_back(d);
  return true;
}

bool take_injected_failure(std::atomic<unsigned>& left) noexcept;

int sync_dirs(const std::vector<NamedDir>& dirs) noexcept {
  int err = 0;
  for (const NamedDir& d : dirs) {
    // A directory on a file system synced whole below needs no fsync of its own.
    bool covered = false;
    for (const NamedDir& w : dirs) covered = covered || (!d.whole_fs && w.whole_fs && w.dev == d.dev);
    if (covered) continue;
    int e = take_injected_failure(g_fail_dir_syncs) ? g_fail_dir_syncs_errno.load(std::memory_order_relaxed)
                                                    : kernel_sync_directory(d.dev, d.ino, d.fd, d.whole_fs);
    // A file system that cannot sync a directory (EINVAL, ENOTSUP: some FUSE and network ones)
    // makes its names durable its own way, as it does for the program's own fsync of it: not an
    // error of the epoch, which would fail every fsync after it.
    if (e == EINVAL || e == ENOTSUP || e == ENOSYS) {
      logf("fsync order: the file system cannot fsync a directory (%s): its name changes are left to it", std::strerror(e));
      e = 0;
    }
    if (e && err == 0) err = e;
  }
  return err;
}

void drop_dirs(std::vector<NamedDir>& dirs) noexcept {
  for (const NamedDir& d : dirs) (void)tai::detail::close_own_descriptor(d.fd);
  dirs.clear();
}

// Under o.mu: closes the open epoch. Returns its seq. `wake`: wake the order thread (and the
// log's idle wait) for it; not for an epoch the caller makes durable inline.
std::uint64_t close_epoch_locked(OrderState& o, bool data_only, bool wake) {
  Epoch e;
  e.writes = std::move(o.open_writes);
  o.open_writes.clear();
  e.dirty = std::move(o.open_dirty);
  o.open_dirty.clear();
  e.dirs = std::move(o.open_dirs);
  o.open_dirs.clear();
  o.closed_in_open_dirty = 0;
  for (Inode* i : e.dirty) i->in_open_dirty = false;
  e.seq = ++o.closed_seq;
  e.closed_ns = now_ns();
  e.data_only = data_only;
  o.closed.push_back(std::move(e));
  o.gate_closed = true;
  g_order_gate_open.store(false, std::memory_order_seq_cst);
  g_stat_closed.fetch_add(1, std::memory_order_relaxed);
  if (!o.thread_started) {
    o.thread_started = true;
    try {
      const tai::detail::SignalsBlockedScope start_blocked;  // it starts with every signal blocked
      std::thread(order_thread_main).detach();  // lives as long as the process
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "tai::posix: cannot start the fsync order thread (%s)\n", ex.what());
      std::abort();  // every fsync would wait for ever: better said at once
    }
  }
  if (wake) o.cv.notify_all();
  return e.seq;
}

// One of a test's injected failures (a count, relaxed: nothing is published through it), if any
// is left.
bool take_injected_failure(std::atomic<unsigned>& left) noexcept {
  unsigned n = left.load(std::memory_order_relaxed);
  while (n != 0)
    if (left.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return true;
  return false;
}

// Anything written since the last epoch became durable (or held back)?
bool open_epoch_empty_locked(const OrderState& o) {
  return o.open_writes.empty() && o.open_dirty.empty() && o.open_dirs.empty();
}

// The order thread's part: the writes to the cache, every group's in turn (the groups are
// OrderState::applying: one epoch's writes each, oldest first), as one sequence. Adds each file
// written to `touched` (one reference each, the writes' own). errno of the first write the
// cache refused, or 0.
// Why one sequence, not a call per epoch: a log batch holds hundreds of epochs, and per epoch
// this took the state's mutex once and wrote a write-through file's run once. In a loop of a
// 4 KiB write and an fdatasync on a 2-vCPU AMD EPYC VM the program's thread met that mutex held
// about once an iteration and slept for it (about 1.5 futex calls an iteration), and the order
// thread made a pwrite per epoch where one pwritev takes the batch's run. The batch's epochs are
// durable together in the log, so their writes may be merged across epochs.
// It throws nothing: every write is applied (or its failure counted) and handed back, whatever
// memory is left. A write whose file cannot be noted in `touched` (no memory for the entry) is
// applied, its reference dropped, and ENOMEM returned: the file then misses its sync, so the
// epoch must not be reported durable. (An exception half-way left the rest of the writes counted
// in Inode::deferred for good, their files' references held.)
int apply_writes(std::vector<std::vector<Deferred>>& groups, std::vector<Inode*>& touched) noexcept {
  // A position in the groups, past empty ones. The writes stay where readers find them
  // (read_held_through), and walking them needs no memory.
  struct Cursor {
    std::vector<std::vector<Deferred>>* groups;
    std::size_t g = 0, w = 0;
    void settle() noexcept {
      while (g < groups->size() && w >= (*groups)[g].size()) {
        ++g;
        w = 0;
      }
    }
    bool done() const noexcept { return g >= groups->size(); }
    Deferred* operator->() const noexcept { return &(*groups)[g][w]; }
    void next() noexcept {
      ++w;
      settle();
    }
  };
  int err = 0;
  std::uint64_t bytes = 0;
  // A run's iovecs, on the stack: no allocation to fail. A longer run takes several calls.
  constexpr std::size_t kRunMax = 256;
  struct iovec run[kRunMax];
  // Whatever happens below, the bytes taken off the queue are uncounted, under the state's
  // mutex: admit_locked, and waits for a file's held writes.
  struct Uncount {
    const std::uint64_t& bytes;
    ~Uncount() {
      OrderState& o = ord();
      std::lock_guard<std::mutex> lock(o.mu);
      o.queued_bytes -= bytes;
      if (o.program_waiters > 0) o.cv.notify_all();
    }
  } uncount{bytes};
  Cursor c{&groups};
  c.settle();
  while (!c.done()) {
    const Cursor first = c;  // this step's writes: `count` of them from `first`
    Inode& ino = *first->ino;
    std::size_t count = 1;
    Cursor last = c;
    c.next();
    {
      std::lock_guard<std::mutex> lock(ino.mu);
      if (order_through_locked(ino)) {
        // Write-through: the kernel has every earlier byte of the file, and these go there too,
        // on the order thread's own descriptor (the program's may be closed by now). A run of
        // writes of the file each starting where the one before ended (SQLite's WAL frames, a
        // log's records, epoch after epoch) is one pwritev: under SQLite's WAL these writes,
        // two system calls per transaction, were a quarter of the order thread's time.
        order(ino);
        while (!c.done() && count < kRunMax && c->ino == &ino &&
               c->pos == last->pos + last->bytes.size()) {
          last = c;
          c.next();
          ++count;
        }
        int e = 0;
        if (count == 1) {
          e = kernel_pwrite_file(ino, ino.direct_fd, first->bytes.chars(), first->bytes.size(), first->pos);
        } else {
          Cursor k = first;
          for (std::size_t n = 0; n < count; ++n, k.next()) run[n] = {k->bytes.chars(), k->bytes.size()};
          e = kernel_pwritev_file(ino, ino.direct_fd, run, static_cast<int>(count), first->pos);
        }
        g_stat_through_writes.fetch_add(1, std::memory_order_relaxed);
        if (e && err == 0) err = e;
      } else if (ino.file.is_open() && !kernel_locked(ino)) {
        order(ino);
        // The held copy moves into the cache's write (no second copy); its block comes back to
        // the pool when the controller is done with it.
        const std::uint64_t n = first->bytes.size();
        ssize_t r;
        try {
          r = submit_buffer_locked(ino, std::move(first->bytes), first->pos);
        } catch (const std::bad_alloc&) {
          r = -ENOMEM;
        }
        first->bytes = Buffer();
        bytes += n;
        if (r < 0 && err == 0) err = static_cast<int>(-r);
      } else if (err == 0) {
        err = EIO;  // the file left the cache meanwhile (it could not be reopened): never reported durable
      }
      // Back to the pool (a write-through file's, or one the cache did not take), under the
      // inode's mutex: a reader laying held writes over the cache's bytes (read_held_through)
      // takes it and skips a write whose bytes are gone.
      Cursor k = first;
      for (std::size_t n = 0; n < count; ++n, k.next()) {
        bytes += k->bytes.size();
        k->bytes = Buffer();
      }
    }
    for (std::size_t n = 0; n < count; ++n) {
      ino.deferred.fetch_sub(1, std::memory_order_acq_rel);
      if (std::find(touched.begin(), touched.end(), &ino) != touched.end()) {
        inode_unref(&ino);
        continue;
      }
      try {
        if (take_injected_failure(g_fail_apply_notes)) throw std::bad_alloc();
        touched.push_back(&ino);
      } catch (const std::bad_alloc&) {
        inode_unref(&ino);
        if (err == 0) err = ENOMEM;
      }
    }
  }
  // The groups stay as they are (emptied Deferreds): they are OrderState::applying, cleared under
  // the state's mutex by the caller.
  return err;
}

// The order thread's part: a durable engine sync of every file in `files`, all submitted, then
// all waited for. errno of the first failure (a sync, or a write-back the file noted), or 0.
int sync_files(const std::vector<Inode*>& files, bool data_only) {
  struct Pending {
    Inode* ino;
    Receipt r;
    std::uint64_t target;
    bool small;  // written little since its last sync: write-through after this one (see below)
  };
  std::vector<Pending> pending;
  std::vector<Inode*> direct;  // write-through files, synced here on their direct_fd
  std::vector<Inode*> whole_fs;  // files whose file systems are synced whole (syncfs)
  pending.reserve(files.size());
  const std::uint64_t through_bytes = g_sync_through.load(std::memory_order_relaxed);
  for (Inode* ip : files) {
    // For closed files the epoch let go of (order_release_closed_locked); before this file's own
    // sync, whatever path that takes. direct_fd is open as long as the inode, which `files` holds.
    if (ip->sync_whole_fs.exchange(false, std::memory_order_acq_rel) && ip->direct_fd >= 0) whole_fs.push_back(ip);
    std::lock_guard<std::mutex> lock(ip->mu);
    if (order_through_locked(*ip)) {
      ip->bytes_since_sync = 0;
      direct.push_back(ip);  // its direct_fd is open as long as the inode, which `files` holds
      continue;
    }
    if (!ip->file.is_open() || kernel_locked(*ip)) continue;  // closed: close_file_locked wrote it back and reported
    order(*ip);
    const std::uint64_t target = ip->writes_submitted.load(std::memory_order_relaxed);
    const bool small = through_bytes != 0 && ip->direct_fd >= 0 && ip->bytes_since_sync <= through_bytes;
    ip->bytes_since_sync = 0;
    pending.push_back({ip, data_only ? ip->file.fdatasync() : ip->file.fsync(), target, small});
  }
  int err = 0;
  // Without the inodes' mutexes: the program's writes to these files meanwhile are held back
  // (the gate is closed) and must not wait for the device.
  for (Inode* ip : whole_fs) {
    if (const int e = kernel_syncfs(*ip, ip->direct_fd)) {
      if (err == 0) err = e;
      // The epoch failed: the next one syncs the file system again (direct_epoch_locked puts
      // this file back on the open epoch's list), as it syncs the failed epoch's files.
      ip->sync_whole_fs.store(true, std::memory_order_release);
    }
  }
  for (Inode* ip : direct)
    if (const int e = kernel_sync_file(*ip, ip->direct_fd, data_only); e && err == 0) err = e;
  for (auto& p : pending) {
    const int e = error_of(p.r);
    settle(*p.ino, p.target);
    const int w = p.ino->write_error.exchange(0, std::memory_order_acq_rel);
    if (err == 0) err = e ? e : w;
    if (e == 0 && w == 0) {
      std::lock_guard<std::mutex> lock(p.ino->mu);
      if (p.target > p.ino->clean_upto.load(std::memory_order_relaxed))
        p.ino->clean_upto.store(p.target, std::memory_order_relaxed);
      // Synced often for what it writes (SQLite's journal and WAL, a log, a loop of small
      // records): write-through from now on, so that the order thread writes and syncs it
      // itself instead of through the controller's workers (two hand-offs fewer per sync). Only
      // when nothing was submitted since this sync: the cache holds nothing dirty of it then.
      if (p.small && !p.ino->through && p.ino->file.is_open() &&
          p.ino->writes_submitted.load(std::memory_order_relaxed) == p.target &&
          (!p.ino->last_sync.valid() || p.ino->last_sync.finished())) {
        p.ino->through = true;
        count_cached_locked(*p.ino, false);
        remember_through_path(p.ino->name, true);
        logf("%s: write-through (order mode; synced after at most %" PRIu64 " bytes)", p.ino->name.c_str(), through_bytes);
      }
    }
  }
  return err;
}

// ---------------------------------------------------------------------------------------------
// The log of epochs (order_log.hpp). The order thread's alone, without the state's mutex, except
// order_log_configure (before any epoch) and order_log_shutdown (the thread idle, the gate open).

std::string absolute_path_of(int fd, const char* path) {
  if (path && path[0] == '/') return path;
  if (!proc_fd_available()) return "";
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0 || buf[0] != '/') return "";
  return std::string(buf, static_cast<std::size_t>(n));
}

void recover_order_logs_once(const std::string& dir) {
  if (dir.empty()) return;
  static std::mutex mu;
  static std::vector<std::string>* done = new std::vector<std::string>;  // never destroyed: used at exit
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(done->begin(), done->end(), dir) != done->end()) return;
  done->push_back(dir);
  const OrderLogRecovery rec = recover_order_logs(dir);
  if (rec.logs)
    std::fprintf(stderr, "tai::posix: replayed %zu fsync order log(s) in %s: %zu batches, %zu writes, %zu skipped\n",
                 rec.logs, dir.c_str(), rec.batches, rec.writes, rec.skipped);
  for (const auto& n : rec.notes) std::fprintf(stderr, "tai::posix: %s\n", n.c_str());
}

void order_log_configure(const std::string& dir, std::uint64_t checkpoint_bytes) {
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  o.log.dir = dir;
  o.log.checkpoint_bytes = checkpoint_bytes;
  o.log.broken = false;
  // A new controller's program starts unpaused (the pause rule judges this run's checkpoints).
  o.log.short_runs = 0;
  o.log.paused_epochs = 0;
  // Nor does the choice of inline epochs carry over from the last controller's program.
  o.probe_seq = 0;
  o.caught_history = 0;
  o.probes_judged = 0;
  o.inline_since_probe = 0;
}

namespace {

// errno of a failed log write or sync (the first), or 0. Waits. The buffer moves in (no copy).
int log_write_sync(OrderState::Log& L, std::uint64_t pos, Buffer&& bytes) {
  if (const unsigned ms = g_log_write_delay_ms.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  const Receipt w = L.file.write(pos, std::move(bytes));
  const Receipt s = L.file.fdatasync();
  const int e = error_of(w);
  const int f = error_of(s);
  return e ? e : f;
}

// The header with `generation`, written and synced (the whole header block when the log is
// O_DIRECT: a write of the file's own block size). errno or 0.
int write_header(OrderState::Log& L, std::uint64_t generation) {
  std::string h = encode_order_log_header(generation, L.align);
  if (L.align > 1) h.resize(kOrderLogHeaderBytes, '\0');
  return log_write_sync(L, 0, Buffer::copy_of(h.data(), h.size()));
}

// Makes the log file (its header durable, its name durable in the directory). errno or 0.
int log_open(OrderState::Log& L) {
  Controller* c = make_controller();  // a process whose files are all write-through has none yet
  if (!c) return ECANCELED;
  L.path = order_log_path(L.dir);
  int fd = ::open(L.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  fd = tai::detail::adopt_own_descriptor(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    (void)tai::detail::close_own_descriptor(fd);
    return e;
  }
  L.lock_fd = fd;
  // Through the controller (the trivial tree: no cache), so that its engine, the crash
  // simulator's in the tests, sees the log beside the files. With O_DIRECT where the file
  // system and the engine allow it: a batch written through the page cache cost the order thread
  // a kernel copy of every byte (the largest part of its time under SQLite's WAL, on 2 CPUs
  // shared with the program); aligned, it goes from the batch buffer to the device.
  auto f = c->open<BTreeTrivial>(L.path, OpenMode(Open::read | Open::write | Open::direct));
  L.align = 4096;
  if (!f) {
    f = c->open<BTreeTrivial>(L.path, OpenMode(Open::read | Open::write));
    L.align = 1;
  }
  if (!f) return f.error().code.value() ? f.error().code.value() : EIO;
  L.file = std::move(f.value());
  L.generation = 1;
  L.end = kOrderLogHeaderBytes;
  if (const int e = write_header(L, L.generation)) return e;
  return fsync_directory(L.dir);
}

}  // namespace

// A checkpoint (order thread, without the state's mutex): every file written through the log
// synced, then the log voided (its generation up, durable). errno or 0; on failure the log stays
// in use (its files keep their references) and the next checkpoint tries again.
// `forced`: a program thread waits for it (a close, a namespace call, a truncation...), as
// opposed to the log idle or full. A run of forced checkpoints after one batch each says the
// program orders every few epochs by such a call (git renames after each object): the log then
// costs a header sync per call and saves nothing, and log_batch_locked pauses it.
static int log_checkpoint(OrderState::Log& L, bool forced) {
  if (!L.active()) return 0;
  if (const int e = sync_files(L.files, true)) return e;
  if (const int e = write_header(L, L.generation + 1)) return e;
  L.short_runs = forced && L.batches_since_checkpoint <= 1 ? L.short_runs + 1 : 0;
  L.batches_since_checkpoint = 0;
  ++L.generation;
  L.end = kOrderLogHeaderBytes;
  for (Inode* ip : L.files) inode_unref(ip);
  L.files.clear();
  return 0;
}

void order_log_shutdown() {
  OrderState& o = ord();
  OrderState::Log L;
  {
    std::unique_lock<std::mutex> lk(o.mu);
    // order_wait_closed has checkpointed: the thread is idle unless the open epoch has held
    // writes (applied as the gate opens) or a program thread wrote since.
    ++o.gate_waiters;
    o.cv.notify_all();
    program_wait(o, lk, [&] { return !o.gate_closed || o.error != 0; });
    --o.gate_waiters;
    L.path = std::move(o.log.path);
    L.lock_fd = std::exchange(o.log.lock_fd, -1);
    L.file = std::move(o.log.file);
    L.batches_since_checkpoint = std::exchange(o.log.batches_since_checkpoint, 0);
    L.files = std::move(o.log.files);
    o.log.files.clear();
    o.log.generation = 1;
    o.log.end = kOrderLogHeaderBytes;
  }
  // Without the state's mutex, and past the preload's wrappers (an unlink there would wait for
  // the order state).
  if (L.active()) {
    // Only after a failure: the log stays for the next process's replay.
    if (L.file.is_open()) L.file.detach();
  } else if (L.file.is_open()) {
    (void)L.file.close();
    (void)::syscall(SYS_unlinkat, AT_FDCWD, L.path.c_str(), 0);
  }
  L.file = File();
  for (Inode* ip : L.files) inode_unref(ip);
  L.files.clear();
  if (L.lock_fd >= 0) (void)tai::detail::close_own_descriptor(L.lock_fd);
}

// The order thread, under the state's mutex `lk`: writes the run of epochs at the front that
// hold only held-back writes as one batch of the log, then gives them to the cache. true when
// it did (the epochs are popped, durable), false when the log cannot take them (the caller
// goes the direct way).
static bool log_batch_locked(OrderState& o, std::unique_lock<std::mutex>& lk) {
  OrderState::Log& L = o.log;
  if (L.dir.empty() || L.broken) return false;
  if (!L.active() && L.short_runs >= kLogShortRunsToPause) {
    // Paused (see log_checkpoint): the direct way for a while, then the log is tried again.
    if (++L.paused_epochs < kLogPauseEpochs) return false;
    L.paused_epochs = 0;
    L.short_runs = 0;
  }
  std::size_t k = 0;
  std::uint64_t batch_bytes_so_far = 0;
  // An epoch with name changes goes the direct way: the log holds writes, not names.
  while (k < o.closed.size() && o.closed[k].dirty.empty() && o.closed[k].dirs.empty()) {
    bool loggable = true;
    std::uint64_t bytes = 0;
    for (const auto& w : o.closed[k].writes) {
      loggable = loggable && !w.ino->log_path.empty();
      bytes += w.bytes.size();
    }
    if (!loggable || bytes > kLogMaxEpochBytes || (k > 0 && batch_bytes_so_far + bytes > kLogMaxBatchBytes)) break;
    batch_bytes_so_far += bytes;
    ++k;
  }
  // One epoch alone gains nothing from the log (one sync either way) unless the log is in use,
  // when the direct way would first need a checkpoint.
  if (k == 0 || (k == 1 && !L.active())) return false;
  const std::uint64_t first = o.closed.front().seq, last = o.closed[k - 1].seq;
  const unsigned skip_every = g_skip_epoch_syncs.load(std::memory_order_relaxed);
  bool skip = false;
  for (std::size_t i = 0; i < k; ++i) skip = skip || (skip_every != 0 && o.closed[i].seq % skip_every == 0);
  std::vector<std::vector<Deferred>>& per_epoch = o.applying;  // this thread's alone until cleared
  per_epoch.resize(k);
  for (std::size_t i = 0; i < k; ++i) per_epoch[i] = std::move(o.closed[i].writes);
  const std::uint64_t started = now_ns();
  o.front_started_ns = started;
  o.front_epochs = k;
  lk.unlock();
  int err = 0;
  // The log made first: its alignment (O_DIRECT or not) shapes the batch.
  if (!L.file.is_open()) {
    err = log_open(L);
    if (err) logf("fsync order: cannot make the log in %s: %s", L.dir.c_str(), std::strerror(err));
  }
  Buffer batch;
  if (err == 0) try {
    std::vector<OrderLogWriteView> views;
    for (const auto& ws : per_epoch)
      for (const auto& w : ws)
        views.push_back({static_cast<std::uint64_t>(w.ino->dev), static_cast<std::uint64_t>(w.ino->ino), w.pos,
                         &w.ino->log_path, w.bytes.chars(), w.bytes.size()});
    // From the pool: the controller frees it once written, and it comes back for the next batch.
    // Zeros up to the log's alignment (the next batch starts there).
    const std::size_t bytes = order_log_batch_bytes(views);
    const std::size_t span = order_log_batch_span(bytes, L.align);
    // Every batch in a block of the same class, the largest the pool keeps: the block comes back
    // after the write and is lent to the next batch whatever its size, so its pages fault in
    // once (a block per size class faulted in every batch's pages anew: 1,729 of the 3,798 page
    // faults of SQLite's 10,000 WAL transactions under the log).
    if (span <= HeldCopyPool::kLargest) {
      tai::detail::AlignedBuffer block = HeldCopyPool::instance().take(HeldCopyPool::kLargest);
      if (!block.empty()) batch = Buffer(std::move(block), span);
    } else {
      batch = HeldCopyPool::instance().buffer(span);
    }
    if (batch.data() == nullptr) throw std::bad_alloc();
    encode_order_log_batch(L.generation, first, last, views, batch.chars());
    if (span > bytes) std::memset(batch.chars() + bytes, 0, span - bytes);
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  const std::size_t batch_bytes = batch.size();
  std::vector<Inode*> touched;
  // skip_epoch_syncs_for_testing: the writes reach the cache before the log is durable (and the
  // log is not written at all): the crash suite's proof that it sees a broken log.
  if (err == 0 && !skip) err = log_write_sync(L, L.end, std::move(batch));
  if (err != 0) {
    lk.lock();
    for (std::size_t i = 0; i < k; ++i) o.closed[i].writes = std::move(per_epoch[i]);
    per_epoch.clear();
    ++o.apply_rounds;  // a round too (none of its writes applied), for a close that saw it
    o.cv.notify_all();
    o.front_started_ns = 0;
    logf("fsync order: the log failed (%s): epochs go one by one from now on", std::strerror(err));
    L.broken = true;
    return false;
  }
  L.end += batch_bytes;
  ++L.batches_since_checkpoint;
  int aerr = 0;
  try {
    aerr = apply_writes(per_epoch, touched);
  } catch (const std::bad_alloc&) {
    aerr = ENOMEM;
  }
  for (Inode* ip : touched) {
    if (std::find(L.files.begin(), L.files.end(), ip) == L.files.end())
      L.files.push_back(ip);
    else
      inode_unref(ip);
  }
  int cerr = 0;
  if (L.end - kOrderLogHeaderBytes >= L.checkpoint_bytes) cerr = log_checkpoint(L, false);
  lk.lock();
  // Freed below without the state's mutex: a free per epoch, under it, kept the program's held
  // writes waiting (about 25 us each time, a batch of a few hundred epochs).
  std::vector<std::vector<Deferred>> applied;
  applied.swap(per_epoch);
  ++o.apply_rounds;
  note_durable_locked(o, k);
  o.front_started_ns = 0;
  for (std::size_t i = 0; i < k; ++i) o.closed.pop_front();
  o.durable_seq += k;
  g_stat_durable.fetch_add(k, std::memory_order_relaxed);
  g_stat_logged.fetch_add(k, std::memory_order_relaxed);
  g_stat_log_batches.fetch_add(1, std::memory_order_relaxed);
  if (!L.active()) o.checkpointed_seq = o.durable_seq;
  // A write the cache refused is in the log, hence durable by its replay only: said, as a
  // failed epoch is, by the next fsync, close or sync_now.
  if (const int e = aerr ? aerr : cerr) {
    o.error = e;
    logf("fsync order: a logged batch failed: %s (returned by the next fsync, close or sync_now)", std::strerror(e));
  }
  o.cv.notify_all();
  lk.unlock();
  applied.clear();
  lk.lock();
  return true;
}

// The order thread, under the state's mutex `lk` (released meanwhile): a checkpoint of the log,
// then every epoch so far counts as durable in the files (or the failure stops the thread).
static void checkpoint_locked(OrderState& o, std::unique_lock<std::mutex>& lk, bool forced) {
  const std::uint64_t upto = o.durable_seq;
  lk.unlock();
  const int e = log_checkpoint(o.log, forced);
  lk.lock();
  if (e != 0) {
    o.error = e;
  } else {
    o.checkpointed_seq = upto;
    g_stat_checkpoints.fetch_add(1, std::memory_order_relaxed);
  }
  o.cv.notify_all();
}

// Under o.mu (`lk`, released meanwhile): makes the front epoch durable the direct way (its held
// writes to the cache, then a durable sync of every file it touched) and pops it; a failure is
// left in o.error (the order thread stops until it is returned). The order thread's, or a
// program thread's that closed the epoch while no other was in flight (inline_running, set by
// it, keeps the order thread waiting meanwhile).
static void direct_epoch_locked(OrderState& o, std::unique_lock<std::mutex>& lk) {
  Epoch& front = o.closed.front();
  o.applying.resize(1);
  o.applying[0] = std::move(front.writes);
  std::vector<Inode*> files = std::move(front.dirty);
  std::vector<NamedDir> dirs = std::move(front.dirs);
  const bool data_only = front.data_only;
  const unsigned skip_every = g_skip_epoch_syncs.load(std::memory_order_relaxed);
  const bool skip_syncs = skip_every != 0 && front.seq % skip_every == 0;
  const std::uint64_t started = now_ns();
  o.front_started_ns = started;
  o.front_epochs = 1;
  lk.unlock();
  int err = 0;
  try {
    err = apply_writes(o.applying, files);  // this thread's alone until cleared
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  const int serr = skip_syncs ? 0 : sync_files(files, data_only);
  if (err == 0) err = serr;
  // After the files: a name change and the writes of its epoch are durable together, whichever
  // order the file system commits them in.
  const int derr = skip_syncs || g_skip_dir_syncs.load(std::memory_order_relaxed) ? 0 : sync_dirs(dirs);
  if (err == 0) err = derr;
  lk.lock();
  if (err != 0) {
    // The next epoch syncs these directories again (their descriptors go with them).
    for (const NamedDir& d : dirs) {
      bool kept = false;
      try {
        kept = add_named_dir_locked(o, d);
      } catch (const std::bad_alloc&) {
        // Not synced again: the epoch's failure is reported all the same.
      }
      if (!kept) (void)tai::detail::close_own_descriptor(d.fd);
    }
    dirs.clear();
    // The cache still holds what failed (tai::File::fsync): the next epoch syncs these files
    // again, and its success is real (as the next fsync after a failed one in `full`).
    for (Inode* ip : files) {
      try {
        note_open_dirty_locked(o, *ip);
      } catch (const std::bad_alloc&) {
        // Not synced again by the next epoch: its close reports the file's state (a cached
        // file's close syncs it; a write-through file's returns the epoch's error).
      }
    }
  }
  lk.unlock();
  for (Inode* ip : files) inode_unref(ip);
  drop_dirs(dirs);
  lk.lock();
  note_durable_locked(o, 1);
  o.front_started_ns = 0;
  o.closed.pop_front();
  ++o.durable_seq;  // done with (a failed one too: its error stops the thread until returned)
  // The log is not in use: the order thread checked, and an inline epoch runs only with the gate
  // open, which comes after the log's checkpoint.
  o.checkpointed_seq = o.durable_seq;
  // Cleared in the same hold of the mutex that publishes the epoch's error: a close that found
  // its file's held writes applied waits for this (order_close), and must then find the error.
  // Emptied meanwhile (a reader skips a write without bytes).
  o.applying.clear();
  ++o.apply_rounds;
  if (err == 0) g_stat_durable.fetch_add(1, std::memory_order_relaxed);
  if (err != 0) {
    o.error = err;
    logf("fsync order: an epoch failed: %s (returned by the next fsync, close or sync_now)", std::strerror(err));
  }
}

void order_thread_main() noexcept {
  tai::detail::mark_this_thread_as_tai("tai-fsync-order");
  // SCHED_BATCH: the same share of the CPU, but a wake-up of this thread (its log's sync done)
  // does not preempt the program's thread on that CPU. With the log, SQLite's thread was
  // preempted by it 189 times in 10,000 WAL transactions (perf sched), against 32 times by
  // every TAI thread under a no-op fsync; the order thread's work is the program's durability,
  // which the delay bound measures in milliseconds, not microseconds. Best effort: a refusal
  // leaves the thread as it was.
  {
    struct sched_param batch {};
    (void)::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &batch);
  }
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  for (;;) {
    o.order_busy = false;
    o.cv.wait(lk, [&] { return o.error == 0 && o.gate_closed && !o.held && !o.inline_running; });
    o.order_busy = true;
    // A close, exit or sync_now waits for an epoch already in the log: checkpoint now.
    if (o.log.active() && o.checkpoint_wanted > o.checkpointed_seq && o.checkpoint_wanted <= o.durable_seq) {
      checkpoint_locked(o, lk, true);
      continue;
    }
    if (!o.closed.empty() && log_batch_locked(o, lk)) continue;
    if (!o.closed.empty() && o.log.active()) {
      // The front epoch cannot go to the log: the direct way, after a checkpoint (a replay must
      // not write the log's older bytes over what the direct way writes).
      checkpoint_locked(o, lk, true);
      continue;
    }
    if (!o.closed.empty()) {
      direct_epoch_locked(o, lk);
      o.cv.notify_all();
      continue;
    }
    // Every closed epoch is durable: the open epoch's held writes go to the cache, then the gate
    // opens (a write held back meanwhile is taken by the next round). With the log in use, a
    // checkpoint first: what reaches the cache from now on is not in the log.
    if (o.log.active()) {
      // Nobody waits for the gate: keep the log open a while for the next epochs (a program
      // that fsyncs in a loop outruns the device again at once, and a checkpoint costs a sync
      // of every file it wrote); the epochs are durable in it meanwhile.
      if (o.gate_waiters == 0 && o.checkpoint_wanted <= o.checkpointed_seq &&
          o.cv.wait_for(lk, std::chrono::milliseconds(kLogIdleMs), [&] {
            return !o.closed.empty() || o.gate_waiters > 0 || o.checkpoint_wanted > o.checkpointed_seq ||
                   o.error != 0 || o.held;
          }))
        continue;
      checkpoint_locked(o, lk, o.gate_waiters > 0 || o.checkpoint_wanted > o.checkpointed_seq);
      continue;
    }
    if (o.open_writes.empty()) {
      o.gate_closed = false;
      g_order_gate_open.store(true, std::memory_order_seq_cst);
      o.cv.notify_all();
      continue;
    }
    o.applying.resize(1);
    o.applying[0] = std::move(o.open_writes);
    o.open_writes.clear();
    std::vector<Deferred>& writes = o.applying[0];  // this thread's alone until cleared
    int err = 0;
    // On the open epoch's list before they leave `open_writes`: an fsync or sync_now made while
    // they are on their way to the cache must find the epoch not empty (its sync runs on this
    // thread, after them).
    for (auto& w : writes) {
      try {
        note_open_dirty_locked(o, *w.ino);
      } catch (const std::bad_alloc&) {
        if (err == 0) err = ENOMEM;
      }
    }
    lk.unlock();
    std::vector<Inode*> touched;
    try {
      if (const int e = apply_writes(o.applying, touched); e && err == 0) err = e;
    } catch (const std::bad_alloc&) {
      err = ENOMEM;
    }
    for (Inode* ip : touched) inode_unref(ip);
    lk.lock();
    o.applying.clear();
    ++o.apply_rounds;
    if (err != 0) o.error = err;
    o.cv.notify_all();
  }
}

// Under o.mu: returns (and clears) a failed epoch's error; the thread goes on.
int take_error_locked(OrderState& o) {
  const int e = std::exchange(o.error, 0);
  if (e) o.cv.notify_all();
  return e;
}

// Under o.mu: would an epoch closed now be the only one, with the order thread idle (waiting
// for work, not applying held writes or checkpointing) and the log checkpointed? Then the
// closing thread may make it durable itself (run_inline_locked). The gate may still be closed:
// the order thread, woken by the last epoch's end, has not opened it yet; the held writes are
// the new epoch's then.
// Never with a failed epoch not yet returned (nothing later may be written before the program
// heard of it), nor while the order thread is held (hold_order_thread_for_testing: a device
// that does not answer).
static bool alone_locked(const OrderState& o) {
  return o.error == 0 && !o.held && o.closed.empty() && !o.order_busy && !o.inline_running && !o.log.active();
}

static InlineEpochs inline_setting() {
  return static_cast<InlineEpochs>(g_fsync_inline.load(std::memory_order_relaxed));
}

static void push_probe_locked(OrderState& o, bool caught) {
  o.caught_history = ((o.caught_history << 1) | (caught ? 1u : 0u)) & 0xffu;
  if (o.probes_judged < 8) ++o.probes_judged;
  o.probe_seq = 0;
}

// Under o.mu, in a program thread about to wait for the epochs (a close, an order point, a
// truncation, an O_APPEND write): is an epoch still in flight, the probe or one closed after it
// (SQLite's rollback journal closes two more before its close waits), and did the program work
// for less than half the usual time of the epochs since the probe? Then it waits for them at
// once: the order thread won it (almost) no overlap with its work.
static void note_wait_locked(OrderState& o) {
  if (o.probe_seq == 0 || o.durable_seq >= o.closed_seq) return;  // no probe, or no wait
  const std::uint64_t since = now_ns() - o.probe_closed_ns;
  const std::uint64_t epochs = o.closed_seq - o.probe_seq + 1;
  push_probe_locked(o, o.epoch_ns == 0 || since < epochs * o.epoch_ns / 2);
}

// Under o.mu, in a program thread about to close epoch `seq` found alone_locked: should this
// thread make it durable itself (Settings::fsync_inline)? The automatic choice learns from
// probes: an alone epoch left to the order thread is watched until the next alone epoch; it
// counts as waited for at once when the program waited for it or a later epoch after working
// less than half their usual time (note_wait_locked), and else not. With more than half of the
// last (up to 8) probes waited for at once, alone epochs are made inline, every 32nd still a
// probe (the program may change its ways; a probe costs a few hand-offs: the epochs closed
// while it is in flight queue behind it).
static bool inline_wanted_locked(OrderState& o, std::uint64_t seq) {
  switch (inline_setting()) {
    case InlineEpochs::never: return false;
    case InlineEpochs::always: return true;
    case InlineEpochs::automatic: break;
  }
  if (o.probe_seq != 0) push_probe_locked(o, false);  // durable (it is alone) before any wait
  // More than half, from the first probe on: a short-lived process (git runs one per command,
  // with a few syncs each) is judged by its first wait.
  if (2u * static_cast<unsigned>(__builtin_popcount(o.caught_history)) > o.probes_judged &&
      ++o.inline_since_probe < kInlineProbeEvery)
    return true;
  o.inline_since_probe = 0;
  o.probe_seq = seq;
  o.probe_closed_ns = now_ns();
  return false;
}

// Under o.mu (`lk`, released meanwhile), in the program thread that closed the only epoch
// (alone_locked): makes it durable here, the direct way, then opens the gate unless another
// thread closed an epoch or held writes back meanwhile (the order thread takes over then).
// errno of this epoch (taken: this caller reports it, as a full fsync would), or 0.
static int run_inline_locked(OrderState& o, std::unique_lock<std::mutex>& lk) {
  o.inline_running = true;
  direct_epoch_locked(o, lk);
  o.inline_running = false;
  g_stat_inline.fetch_add(1, std::memory_order_relaxed);
  if (o.error == 0 && o.closed.empty() && o.open_writes.empty() && !o.held) {
    o.gate_closed = false;
    g_order_gate_open.store(true, std::memory_order_seq_cst);
  }
  // The order thread sleeps while the gate is open; waking it (and it going back to sleep)
  // would cost the two context switches an inline epoch is for. Woken: the order thread when
  // there is work left for it, and program threads waiting for this epoch or the gate.
  if (o.gate_closed || o.program_waiters > 0) o.cv.notify_all();
  return take_error_locked(o);
}

// Under o.mu (`lk`): while the gate is closed and the queue of held bytes is full, wait (the
// back-pressure of DESIGN section 3's memory bound) for room for n bytes.
static void admit_locked(OrderState& o, std::unique_lock<std::mutex>& lk, std::size_t n) {
  const std::uint64_t limit = g_order_limit.load(std::memory_order_relaxed);
  if (!o.gate_closed || o.queued_bytes == 0 || o.queued_bytes + n <= limit) return;
  g_stat_backpressure.fetch_add(1, std::memory_order_relaxed);
  ++o.gate_waiters;
  o.cv.notify_all();
  program_wait(o, lk, [&] { return !o.gate_closed || o.queued_bytes == 0 || o.queued_bytes + n <= limit || o.error != 0; });
  --o.gate_waiters;
}

// The held copy of a write: n bytes from the pool. Empty when there is no memory.
static Buffer held_copy(const void* buf, std::size_t n) {
  Buffer copy = HeldCopyPool::instance().buffer(n);
  if (copy.data() != nullptr && n != 0) std::memcpy(copy.data(), buf, n);
  return copy;
}

// Under o.mu with the gate closed: holds the write back (`copy`, its bytes, on the open epoch's
// list). Bytes or -errno.
static ssize_t hold_locked(OrderState& o, Inode& ino, Buffer&& copy, std::uint64_t pos) {
  const std::size_t n = copy.size();
  if (pos > kOffMax || n > kOffMax - pos) return -EINVAL;
  if (copy.data() == nullptr) return -ENOMEM;
  try {
    o.open_writes.push_back(Deferred{&ino, pos, std::move(copy)});
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  ino.refs.fetch_add(1, std::memory_order_relaxed);
  ino.deferred.fetch_add(1, std::memory_order_acq_rel);
  o.queued_bytes += n;
  g_stat_deferred.fetch_add(1, std::memory_order_relaxed);
  if (o.queued_bytes > g_stat_max_queued.load(std::memory_order_relaxed))
    g_stat_max_queued.store(o.queued_bytes, std::memory_order_relaxed);
  grow_size(ino, pos + n);
  return static_cast<ssize_t>(n);
}

// Why without the inode's mutex: with the log the gate stays closed for whole runs, and the order
// thread takes that mutex for every held write it gives to the cache, back to back. A program
// write that needed it slept until the order thread's whole batch was in (glibc's mutex is not
// fair: the order thread took it again before the woken writer ran): about 400 sleeps of 60 us
// in SQLite's 10,000 WAL transactions. A held write touches neither the cache nor the kernel,
// only the order state (under its mutex) and the inode's atomics.
// The copy is made before the state's mutex is taken, when the gate looks closed: a fresh block
// of the pool faults its pages in, and under the mutex that made the order thread wait (about a
// thousand futex sleeps and wake-ups in SQLite's 10,000 WAL transactions).
ssize_t order_hold_write(Inode& ino, const void* buf, std::size_t n, std::uint64_t pos) {
  if (g_order_gate_open.load(std::memory_order_acquire)) return kNotHeld;
  // A write-through file that this write would take back to the cache (count_write_locked)
  // needs the inode's mutex: the general path.
  if (ino.through && (ino.direct_fd < 0 || ino.bytes_since_sync.load(std::memory_order_relaxed) + n >
                                                g_sync_through.load(std::memory_order_relaxed)))
    return kNotHeld;
  Buffer copy = held_copy(buf, n);
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  admit_locked(o, lk, n);
  // The gate opened meanwhile (the copy goes back to the pool), or the layer shuts down.
  if (!o.gate_closed || g_down.load(std::memory_order_acquire)) return kNotHeld;
  const ssize_t r = hold_locked(o, ino, std::move(copy), pos);
  if (r > 0) ino.bytes_since_sync.fetch_add(n, std::memory_order_relaxed);
  return r;
}

// Calls f(w) for every write held back for `ino` whose bytes the cache does not have yet, oldest
// first. Under ino.mu and o.mu.
template <class F>
static void for_each_held_locked(const OrderState& o, const Inode& ino, F&& f) {
  const auto each = [&](const std::vector<Deferred>& ws) {
    for (const Deferred& w : ws)
      if (w.ino == &ino && w.bytes.size() != 0) f(w);
  };
  for (const auto& ws : o.applying) each(ws);
  for (const Epoch& e : o.closed) each(e.writes);
  each(o.open_writes);
}

// Under o.mu: does the round of held writes being applied now hold one of `ino`'s (its bytes
// gone already or not)?
static bool applying_names_locked(const OrderState& o, const Inode& ino) {
  for (const auto& ws : o.applying)
    for (const Deferred& w : ws)
      if (w.ino == &ino) return true;
  return false;
}

bool held_write_ends_at_locked(const OrderState& o, const Inode& ino, std::uint64_t end) {
  bool found = false;
  for_each_held_locked(o, ino, [&](const Deferred& w) { found = found || w.pos + w.bytes.size() == end; });
  return found;
}

// Why not wait for the held writes to reach the cache, as reads did: with the log they reach it
// after the log's device sync of their batch, and SQLite's WAL checkpoint, which reads the frames
// the last transactions wrote, waited for that about 3 ms each time (a fifth of the run over
// 10,000 transactions). Nor after a failed epoch: its writes are still here to read, and its error
// is the next fsync's, close's or sync_now's to return (a read used to take it).
ssize_t read_held_through(Inode& ino, int fd, void* buf, std::size_t n, std::uint64_t pos) {
  OrderState& o = ord();
  std::lock_guard<std::mutex> il(ino.mu);  // no held write of the file reaches the cache meanwhile
  // What the cache (or, write-through, the kernel) has.
  Receipt r;
  ssize_t k = start_read_locked(ino, fd, buf, n, pos, r);
  if (k == kCacheRead) k = r.ok() ? static_cast<ssize_t>(r.bytes()) : -error_of(r);
  if (k < 0) return k;
  const auto got = static_cast<std::uint64_t>(k);
  // The held writes over it, oldest first; a write past what was there leaves zeros before it
  // (a hole), as the kernel's file would read.
  std::lock_guard<std::mutex> lk(o.mu);
  const std::uint64_t stop = pos + n;
  std::uint64_t end = pos + got;
  for_each_held_locked(o, ino, [&](const Deferred& w) {
    const std::uint64_t w_end = w.pos + w.bytes.size();
    if (w.pos < stop && w_end > pos) end = std::max(end, std::min(stop, w_end));
  });
  auto* out = static_cast<char*>(buf);
  if (end > pos + got) std::memset(out + got, 0, end - pos - got);
  for_each_held_locked(o, ino, [&](const Deferred& w) {
    const std::uint64_t from = std::max(pos, w.pos), to = std::min(stop, w.pos + w.bytes.size());
    if (from < to) std::memcpy(out + (from - pos), w.bytes.chars() + (from - w.pos), to - from);
  });
  return static_cast<ssize_t>(end - pos);
}

// Under ino.mu (after order()): a write in order mode, of the cached path or of a write-through
// file (order_through_locked; to the kernel on the program's descriptor `fd` while the gate is
// open). Returns bytes or -errno.
ssize_t order_write_locked(Inode& ino, int fd, const void* buf, std::size_t n, std::uint64_t pos) {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  // A write that reaches the cache or the kernel now comes after this file's last write made by
  // another thread (order(ino): its receipt waited for). A write held back touches neither yet
  // (the order thread orders it when it applies it), so it does not wait: with the log the gate
  // stays closed for whole runs, and a program's write waiting for the last of the order
  // thread's applied writes to be taken by the cache stalled SQLite's commits for milliseconds.
  // ino.mu is held throughout, so no other write of the file comes between.
  if (!o.gate_closed) {
    lk.unlock();
    order(ino);
    lk.lock();
  }
  if (o.gate_closed) return hold_locked(o, ino, held_copy(buf, n), pos);
  try {
    note_open_dirty_locked(o, ino);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  // Under o.mu: an fsync of another thread cannot close the epoch between the check and the
  // write reaching the cache or the kernel (the order thread's sync would miss it).
  if (ino.through) return kernel_write_locked(ino, fd, buf, n, pos);
  return submit_write_locked(ino, buf, n, pos, false);
}

// Waits until every closed epoch is durable. errno of a failed one (left for the next fsync), or 0.
// Also waits for the held writes to reach the cache (the gate open): a truncation by the
// kernel (an O_TRUNC open) must come after them, as the program made them.
int order_point_impl() {
  if (!order_mode()) return 0;
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  note_wait_locked(o);
  if (o.gate_closed && o.error == 0) {
    ++o.gate_waiters;
    o.cv.notify_all();
    program_wait(o, lk, [&] { return !o.gate_closed || o.error != 0; });
    --o.gate_waiters;
  }
  return o.error;
}

// Name changes are ordered while the layer runs in order mode in this process: not in a forked
// child (its order state is a copy, maybe of a mutex held by a thread it does not have) nor after
// the exit handler, exec or a shutdown (nothing would sync or close what is noted).
static bool names_ordered() noexcept {
  return order_mode() && !g_down.load(std::memory_order_acquire) && !g_forked_child.load(std::memory_order_acquire);
}

namespace {
// A descriptor of the directory that holds `path` (relative to dirfd), one of TAI's own
// (own_descriptors.hpp), with its identity; fd -1 when it cannot be opened (no read permission,
// a path too long: the caller then syncs everything instead).
struct ParentDir {
  int fd = -1;
  struct stat st {};
};
ParentDir open_parent(int dirfd, const char* path) noexcept {
  ParentDir d;
  // Everything before the last '/' (trailing ones aside).
  std::size_t end = std::strlen(path);
  while (end > 1 && path[end - 1] == '/') --end;
  std::size_t slash = end;
  while (slash > 0 && path[slash - 1] != '/') --slash;
  char parent[PATH_MAX];
  if (slash == 0) {
    std::memcpy(parent, ".", 2);
  } else if (slash >= sizeof parent) {
    errno = ENAMETOOLONG;
    return d;
  } else {
    std::memcpy(parent, path, slash);  // with its '/': "/" for the root, "a/" for "a/b"
    parent[slash] = '\0';
  }
  d.fd = tai::detail::adopt_own_descriptor(::openat(dirfd, parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd >= 0 && ::fstat(d.fd, &d.st) != 0) {
    (void)tai::detail::close_own_descriptor(d.fd);
    d.fd = -1;
  }
  if (d.fd < 0) logf("fsync order: cannot open the directory of %s (%s): sync() for its name change", path, std::strerror(errno));
  return d;
}
// Under o.mu, after the name change: `d` on the open epoch's list. What is left to do after the
// lock is released: close d.fd (not kept), or sync now (no descriptor, or no memory for the
// entry: the change is made durable at once, with everything else, which the order allows: it
// belongs to the open epoch, and every closed epoch is durable).
enum class AfterNote { nothing, close, sync_dir_and_close, sync_all };
AfterNote note_parent_locked(OrderState& o, const ParentDir& d) noexcept {
  if (d.fd < 0) return AfterNote::sync_all;
  try {
    const std::uint64_t seq = o.names_noted.fetch_add(1, std::memory_order_seq_cst) + 1;
    return add_named_dir_locked(o, NamedDir{d.st.st_dev, d.st.st_ino, d.fd, false, seq}) ? AfterNote::nothing
                                                                                          : AfterNote::close;
  } catch (const std::bad_alloc&) {
    return AfterNote::sync_dir_and_close;
  }
}
void finish_note(const ParentDir& d, AfterNote after) noexcept {
  switch (after) {
    case AfterNote::nothing:
      break;
    case AfterNote::close:
      (void)tai::detail::close_own_descriptor(d.fd);
      break;
    case AfterNote::sync_dir_and_close:
      (void)kernel_sync_directory(d.st.st_dev, d.st.st_ino, d.fd, false);
      (void)tai::detail::close_own_descriptor(d.fd);
      break;
    case AfterNote::sync_all:
      (void)::syscall(SYS_sync);  // the system call: the preload library interposes sync()
      break;
  }
}
}  // namespace

void order_name_changed(int dirfd, const char* path) noexcept {
  if (!names_ordered() || path == nullptr || *path == '\0') return;
  const ParentDir d = open_parent(dirfd, path);
  AfterNote after;
  {
    OrderState& o = ord();
    std::lock_guard<std::mutex> lk(o.mu);
    after = note_parent_locked(o, d);
  }
  finish_note(d, after);
}

int order_name_change(NameCall call, void* arg, int dirfd, const char* path, int dirfd2, const char* path2) noexcept {
  if (!names_ordered()) return call(arg);
  const char* names[2] = {path && *path ? path : nullptr, path2 && *path2 ? path2 : nullptr};
  const int dirs[2] = {dirfd, dirfd2};
  ParentDir parents[2];
  for (int i = 0; i < 2; ++i)
    if (names[i]) parents[i] = open_parent(dirs[i], names[i]);
  AfterNote after[2] = {AfterNote::nothing, AfterNote::nothing};
  OrderState& o = ord();
  int rc, saved;
  for (;;) {
    (void)order_point_impl();  // a failed epoch is the next fsync's to report
    std::unique_lock<std::mutex> lk(o.mu);
    // Closed again since (another thread's fsync): wait for that epoch too. A failed epoch not
    // yet returned keeps the gate closed until an fsync returns it: the call goes on, as the
    // layer's other calls do, and its change is the open epoch's.
    if (o.gate_closed && o.error == 0) continue;
    rc = call(arg);
    saved = errno;
    for (int i = 0; i < 2; ++i)
      if (names[i]) after[i] = rc == 0 ? note_parent_locked(o, parents[i]) : AfterNote::close;
    break;
  }
  for (int i = 0; i < 2; ++i)
    if (names[i] && !(after[i] == AfterNote::close && parents[i].fd < 0)) finish_note(parents[i], after[i]);
  errno = saved;
  return rc;
}

std::uint64_t order_names_ticket() noexcept {
  if (!names_ordered()) return 0;
  // seq_cst, with the increment under o.mu in order_name_changed: a note made after this load
  // has a larger number (it is not covered by the fsync that follows).
  return ord().names_noted.load(std::memory_order_seq_cst);
}

void order_directory_synced(int fd, std::uint64_t ticket) noexcept {
  if (!names_ordered()) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) return;
  int drop = -1;
  {
    OrderState& o = ord();
    std::lock_guard<std::mutex> lk(o.mu);
    for (std::size_t i = 0; i < o.open_dirs.size(); ++i) {
      const NamedDir& d = o.open_dirs[i];
      // Every change noted before the program's fsync began is durable: the epoch need not
      // sync the directory again. A whole_fs entry stands for other directories too: kept.
      if (d.dev == st.st_dev && d.ino == st.st_ino && !d.whole_fs && d.noted <= ticket) {
        drop = d.fd;
        o.open_dirs.erase(o.open_dirs.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (drop >= 0) (void)tai::detail::close_own_descriptor(drop);
}

// Waits until the gate is open: every closed epoch durable, every held write in the cache.
// Without any lock of the layer held. A caller that then goes to the kernel takes the inode's
// mutex and order_gate_locked, and starts over when that finds the gate closed again.
void order_drain() {
  if (!order_mode()) return;
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  note_wait_locked(o);
  if (o.gate_closed && o.error == 0) {
    ++o.gate_waiters;
    o.cv.notify_all();
    program_wait(o, lk, [&] { return !o.gate_closed || o.error != 0; });
    --o.gate_waiters;
  }
}

// Under ino.mu, in order mode, before a call that goes to the kernel behind the cache (an
// O_APPEND write, a truncation): 0 with `gate` holding the state's mutex and the gate open
// (the file is on the open epoch's list: the next fsync covers what the call does); 1: the gate
// closed again since order_drain, start over; -errno: a failed epoch not yet returned (it is
// returned now, by this call: nothing after it goes to the kernel before the program heard).
int order_gate_locked(Inode& ino, std::unique_lock<std::mutex>& gate) {
  OrderState& o = ord();
  gate = std::unique_lock<std::mutex>(o.mu);
  if (o.error != 0) return -take_error_locked(o);
  if (o.gate_closed) {
    gate.unlock();
    return 1;
  }
  try {
    note_open_dirty_locked(o, ino);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  return 0;
}

// fsync/fdatasync of a routed file in order mode: closes the epoch. -errno or 0.
int order_fsync(bool data_only) {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  if (const int e = take_error_locked(o)) return -e;
  if (open_epoch_empty_locked(o)) return 0;  // nothing written since the last epoch was closed
  if (alone_locked(o)) {
    // No epoch in flight: this one goes alone, maybe made durable by this thread.
    const bool here = inline_wanted_locked(o, o.closed_seq + 1);
    close_epoch_locked(o, data_only, !here);
    if (here) return -run_inline_locked(o, lk);
    o.closed.back().early = true;
    return 0;
  }
  const std::uint64_t delay = g_max_delay_ns.load(std::memory_order_relaxed);
  // The delay bound: the epoch this call closes will be durable after the epochs queued before
  // it, one at a time. Back-pressure when the device is behind by more than the quota, when the
  // oldest waiting epoch is older than half the delay, or when the queue, at the order thread's
  // recent time per epoch, would pass half the delay (a program that closes epochs faster than the
  // device syncs them is held to the device's pace instead of letting the lag grow with the
  // queue). The time per epoch: the larger of the recent average and the recent slowest, and
  // before any epoch was measured a sixteenth of the delay (so a burst of fsyncs at the start
  // queues about 8 epochs before the device's pace is known). The direct way syncs each epoch
  // on its own, so an epoch in flight for longer than that says the device is that slow now: it
  // stands for the time of each. A log batch in flight makes its epochs durable together and
  // the next batch takes all queued epochs with one sync: its time so far is added once, not
  // multiplied.
  bool wait = false;
  if (!o.closed.empty()) {
    const std::uint64_t now = now_ns();
    std::uint64_t per = o.epoch_ns != 0 ? std::max(o.epoch_ns, o.epoch_peak_ns) : delay / 16;
    std::uint64_t lag = 0;
    std::size_t waiting = o.closed.size() + 1;
    if (o.front_started_ns != 0 && o.front_epochs > 1) {
      lag = now - o.front_started_ns;
      waiting -= std::min(o.front_epochs, o.closed.size());
    } else if (o.front_started_ns != 0) {
      per = std::max(per, now - o.front_started_ns);
    }
    // Half the delay for the prediction: the pace was measured while the queue was short, and
    // a burst of fsyncs from threads that then keep the CPUs busy slows the order thread down
    // (two threads looping write + fdatasync on 2 CPUs: 305-535 epochs queued within
    // milliseconds at a pace of 3.3 ms, then made durable at 6-7 ms each, 2.1-3.0 s after
    // their fsyncs under a delay of 1 s).
    wait = o.queued_bytes > g_order_limit.load(std::memory_order_relaxed) || now - o.closed.front().closed_ns > delay / 2 ||
           lag + waiting * per > delay / 2;
  }
  const std::uint64_t seq = close_epoch_locked(o, data_only);
  if (!wait) {
    o.closed.back().early = true;
    return 0;
  }
  // Back-pressure: the device is behind by more than the quota or the delay; this fsync waits
  // for its own epoch, as a full one would.
  g_stat_backpressure.fetch_add(1, std::memory_order_relaxed);
  program_wait(o, lk, [&] { return o.durable_seq >= seq || o.error != 0; });
  return -take_error_locked(o);
}

// Under o.mu (`lk`, released while waiting): every epoch up to `seq` durable in the files
// themselves, not only in the log. errno of a failed epoch (taken), or 0.
static int wait_checkpointed_locked(OrderState& o, std::unique_lock<std::mutex>& lk, std::uint64_t seq) {
  if (o.checkpointed_seq < seq && o.error == 0) {
    if (o.checkpoint_wanted < seq) {
      o.checkpoint_wanted = seq;
      o.cv.notify_all();
    }
    program_wait(o, lk, [&] { return o.checkpointed_seq >= seq || o.error != 0; });
  }
  return take_error_locked(o);
}

// Every epoch closed so far durable in the files themselves (not only in the log), without
// closing the open one: what `full` would have given the program by now, each of its fsyncs
// durable. errno of a failed epoch (taken: the caller returns it), or 0.
int order_wait_closed() {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  note_wait_locked(o);
  const std::uint64_t seq = o.closed_seq;
  return wait_checkpointed_locked(o, lk, seq);
}

// The close of a writable routed descriptor, in order mode. A write-through file's writes of the
// open epoch are in the kernel already, and stay in the epoch as a plain close leaves them in the
// page cache: the close waits only for the epochs closed before it (order_wait_closed), and the
// next fsync of any routed file makes them durable with the rest of their epoch, on the inode's
// own descriptor (the epoch holds the inode, and with it Inode::direct_fd, after the program's
// descriptor is gone). A cached file, or one with writes still held back (they land through its
// cache or that descriptor), is made durable whole, with every other file (order_sync_all): its
// cache is written back to the engine at its last close, and an epoch syncs only files whose
// cache is open. errno or 0.
int order_close(Inode& ino) {
  bool through;
  {
    std::lock_guard<std::mutex> lock(ino.mu);
    through = order_through_locked(ino);
  }
  if (!through) return order_sync_all();
  if (const int err = order_wait_closed()) return err;
  // Held writes left now are the open epoch's (a closed epoch's are applied before it is
  // durable). Acquire: pairs with hold_locked's increment. None left: they reached the kernel,
  // or failed there, which this close returns (as a plain close returns a failed write-back).
  if (ino.deferred.load(std::memory_order_acquire) == 0) {
    g_closes_through.fetch_add(1, std::memory_order_relaxed);
    // The count falls as each write reaches the kernel, before the round that applied it
    // publishes its error (under o.mu, as it clears OrderState::applying): wait for the end of
    // the round found naming this file, or the error would be missed and returned only by a
    // later fsync. Only that round: the next one may name the file again (another thread's held
    // writes to it), and the order thread fills it before it lets go of o.mu. (An emptied round
    // may still name an inode freed meanwhile, whose address a new file took: that close then
    // waits for one round it had no write in, no longer.)
    OrderState& o = ord();
    std::unique_lock<std::mutex> lk(o.mu);
    if (applying_names_locked(o, ino)) {
      const std::uint64_t round = o.apply_rounds;
      program_wait(o, lk, [&] { return o.apply_rounds != round; });
    }
    return take_error_locked(o);
  }
  return order_sync_all();
}

std::uint64_t closes_through_for_testing() noexcept { return g_closes_through.load(std::memory_order_relaxed); }

int order_take_error() {
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  return take_error_locked(o);
}

// At most this many closed files held by the open epoch; past it, one file per file system
// stands for the others (its epoch sync becomes a syncfs). Each held file keeps TAI's one or two
// descriptors of it open: a program that writes thousands of files between two fsyncs (tar, a
// build) would otherwise run out of descriptors under a limit of 1,024.
constexpr std::size_t kClosedFilesHeldMax = 64;

void order_release_closed_locked(Inode& ino) noexcept {
  if (!order_mode() || !ino.through || ino.direct_fd < 0) return;  // a cached file's close synced it
  OrderState& o = ord();
  std::lock_guard<std::mutex> lk(o.mu);
  if (!ino.in_open_dirty) return;
  if (++o.closed_in_open_dirty <= kClosedFilesHeldMax) return;
  // Another file of the same file system that the epoch holds stands for this one: its sync
  // becomes its file system's. Without one, this file stays (it stands for itself and later ones).
  Inode* stand_in = nullptr;
  for (Inode* ip : o.open_dirty)
    if (ip != &ino && ip->dev == ino.dev && ip->direct_fd >= 0) {
      stand_in = ip;
      break;
    }
  if (!stand_in) {
    ino.sync_whole_fs.store(true, std::memory_order_release);
    return;
  }
  // Then let go of this one: its bytes are in the kernel (write-through; a held write applied
  // later puts the file back on the list), so the stand-in's syncfs makes them durable with the
  // epoch. The flag this file may carry (standing in for earlier ones) passes to the stand-in.
  stand_in->sync_whole_fs.store(true, std::memory_order_release);
  o.open_dirty.erase(std::find(o.open_dirty.begin(), o.open_dirty.end(), &ino));
  ino.in_open_dirty = false;
  --o.closed_in_open_dirty;
  // The list's reference: never the last (the caller holds the registry's).
  ino.refs.fetch_sub(1, std::memory_order_acq_rel);
}

// Every routed write durable, in order mode. errno or 0.
int order_sync_all(bool may_inline) {
  OrderState& o = ord();
  std::unique_lock<std::mutex> lk(o.mu);
  note_wait_locked(o);
  std::uint64_t seq = o.closed_seq;
  if (!open_epoch_empty_locked(o)) {
    // This thread waits for it anyway: with no other epoch in flight it makes it durable itself
    // (unless told never to), saving the hand-offs to the order thread and back.
    const bool here = may_inline && alone_locked(o) && inline_setting() != InlineEpochs::never;
    seq = close_epoch_locked(o, false, !here);
    if (here) return run_inline_locked(o, lk);
  }
  return wait_checkpointed_locked(o, lk, seq);
}

// ---------------------------------------------------------------------------------------------
// The exit handler's gate (order mode): exit() from one thread while others write.
namespace {
// 0: running; 1: the exit handler waits for the closed epochs (new ordered writes wait);
// 2: done, the layer is `full` (waiting writes go on). A futex word: writes wait on it.
std::atomic<std::uint32_t> g_exit_phase{0};
// Ordered writes under way. A futex word: the exit handler waits on it for them to leave.
std::atomic<std::uint32_t> g_ordered_writers{0};
}  // namespace

// The thread that runs the exit handler's wait (between close and open of the gate): its own writes
// (a log line on a routed stderr) must not wait for itself.
thread_local bool t_closing_exit_gate = false;

// This thread's counted calls, nested (an fsync inside a counted write's path): only the
// outermost touches g_ordered_writers.
thread_local unsigned t_ordered_calls = 0;

// seq_cst, with OrderedCall's increment and load: either the writer's increment is seen by the
// handler's wait below, or the writer sees phase 1 and backs out (store-load order on both
// sides, as in Dekker's algorithm).
void order_exit_gate_close() noexcept {
  t_closing_exit_gate = true;
  g_exit_phase.store(1, std::memory_order_seq_cst);
  // A call of this very thread under way (exit() from a signal handler that interrupted it, a
  // program of the direct API) stays counted: the handler does not wait for itself.
  const std::uint32_t own = t_ordered_calls > 0 ? 1 : 0;
  for (std::uint32_t n; (n = g_ordered_writers.load(std::memory_order_seq_cst)) > own;)
    futex_wait(g_ordered_writers, n, 1'000'000);  // 1 ms: a wake-up lost to a race costs that much
}

void order_exit_gate_open() noexcept {
  // `full` first: a write that sees phase 2 reads the mode after it (release/acquire on the
  // phase) and goes the full way.
  g_fsync_mode.store(static_cast<int>(FsyncMode::full), std::memory_order_release);
  g_exit_phase.store(2, std::memory_order_release);
  futex_wake(g_exit_phase, INT_MAX);
  t_closing_exit_gate = false;
}

void order_exit_gate_reset() noexcept {
  g_exit_phase.store(0, std::memory_order_release);
  futex_wake(g_exit_phase, INT_MAX);  // a writer parked at phase 1 goes on (the full way)
}

OrderedCall::OrderedCall() noexcept : counted_(false) {
  if (!order_mode()) return;
  if (t_ordered_calls > 0) {
    // Inside a counted call of this thread: the handler already waits for the outer one, and
    // this one must not wait for the handler (it would wait for itself).
    counted_ = true;
    ++t_ordered_calls;
    return;
  }
  g_ordered_writers.fetch_add(1, std::memory_order_seq_cst);  // pairs with order_exit_gate_close
  if (g_exit_phase.load(std::memory_order_seq_cst) == 0) {
    counted_ = true;
    t_ordered_calls = 1;
    return;
  }
  // The exit handler is waiting for the closed epochs: not counted.
  if (g_ordered_writers.fetch_sub(1, std::memory_order_seq_cst) == 1) futex_wake(g_ordered_writers, 1);
  // TAI's own threads (the order thread's log line on a routed stderr) and the handler's thread
  // go the full way at once: the handler waits for them.
  if (tai::detail::this_thread_is_tai() || t_closing_exit_gate) return;
  // A program thread waits until the handler is done; the layer is `full` then
  // (order_exit_gate_open), so ordered() stays false.
  while (g_exit_phase.load(std::memory_order_acquire) == 1) futex_wait(g_exit_phase, 1, 0);
}

OrderedCall::~OrderedCall() {
  if (!counted_ || --t_ordered_calls > 0) return;
  if (g_ordered_writers.fetch_sub(1, std::memory_order_seq_cst) == 1 && g_exit_phase.load(std::memory_order_seq_cst) == 1)
    futex_wake(g_ordered_writers, 1);
}

}  // namespace tai::posix::detail

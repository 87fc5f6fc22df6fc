// TAI_FSYNC=order under the crash simulator: the drop-in layer (tai/posix.hpp) runs over a
// crashsim engine wrapping posix (registered by the Settings hook, selected by name), a workload
// records every call with its epoch (epoch_oracle.hpp), and every multi-file crash state of the
// engine's log (enumerate_multi_crash_states: one crash point for all files, per file the durable
// image plus any subset of its unsynced writes, torn at 512 bytes) must be explained by some
// epoch k: the epochs before k whole, nothing after k, and k at least what sync_now, close and
// ftruncate (which waits for the closed epochs) promised. DESIGN section 3, docs/crashsim.md.
//
// Two layer settings per workload: "quiet" (the engine sees writes only at the order thread's
// syncs and at close) and "busy" (idle flush after 0.2 ms and a 1 ms write-behind, pauses of
// 0.3 ms after a fifth of the calls, and the order thread held now and then for 1-4 epochs, so
// that epochs queue up and the cache hands writes to the engine at any time: the gate is what
// keeps a later epoch's writes out).
// Syncs are absorbed by the crashsim engine (the states come from its log; the device's latency
// would only slow the suite down).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "engines/crashsim/crash_states.hpp"
#include "engines/crashsim/crashsim_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "posix_layer/support.hpp"
#include "src/posix/order_log.hpp"
#include "src/testing/epoch_oracle.hpp"

namespace tai::test {
namespace {

using engines::CrashLog;
using engines::CrashStateOptions;
using engines::CrashStats;
using engines::EpochOp;
using engines::EpochOracle;
using engines::MultiCrashState;

using SimSlot = std::shared_ptr<engines::CrashSimEngine*>;

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TAI_ORDER_CRASH_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TAI_ORDER_CRASH_SANITIZED 1
#endif

// The factor of the run counts: controller_test_scale's (test/support/controller_support.hpp,
// which this binary's unity batches cannot include beside support.hpp): 1 in an optimised
// build, 0.2 under a sanitizer or in a debug build, times the test depth; TAI_CRASHSIM_SCALE
// overrides.
double order_crash_scale() {
  if (const char* s = std::getenv("TAI_CRASHSIM_SCALE")) return std::strtod(s, nullptr);
#if defined(TAI_ORDER_CRASH_SANITIZED) || !defined(NDEBUG)
  return 0.2 * test_depth_factor();
#else
  return 1.0 * test_depth_factor();
#endif
}

// The layer's writes and syncs of write-through files reach the kernel on their own descriptors,
// behind the crashsim engine: logged in its log by the file's path there (the program's
// /proc/self/fd/<fd>, registered at its open), on the same clock, so that a crash state covers
// both ways a file's bytes take to the device.
class KernelLogger final : public posix::detail::KernelObserver {
 public:
  explicit KernelLogger(SimSlot slot) : slot_(std::move(slot)) {}
  void add(dev_t dev, ino_t ino, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_[{dev, ino}] = path;
  }
  // The slot is set by the Settings hook when the controller is made, before the rig's first
  // open, and stays until the run's restart, after the layer stopped reporting (the layer's
  // mutexes order that write before every report).
  std::uint64_t before() noexcept override {
    engines::CrashSimEngine* const sim = *slot_;
    return sim ? sim->tick() : 0;
  }
  void wrote(dev_t dev, ino_t ino, std::uint64_t pos, const struct iovec* iov, int iovcnt, std::int64_t result,
             std::uint64_t before) noexcept override {
    engines::CrashSimEngine* const sim = *slot_;
    const std::string path = path_of(sim, dev, ino);
    if (path.empty()) return;
    events_.fetch_add(sim->log_write(path, pos, iov, iovcnt, result, before), std::memory_order_relaxed);
    writes_.fetch_add(1, std::memory_order_relaxed);
  }
  void synced(dev_t dev, ino_t ino, bool data_only, int err, std::uint64_t before) noexcept override {
    engines::CrashSimEngine* const sim = *slot_;
    const std::string path = path_of(sim, dev, ino);
    if (path.empty()) return;
    sim->log_sync(path, data_only ? Op::fdatasync : Op::fsync, err, before);
    syncs_.fetch_add(1, std::memory_order_relaxed);
  }
  void synced_fs(dev_t dev, int err, std::uint64_t before) noexcept override {
    engines::CrashSimEngine* const sim = *slot_;
    std::vector<std::string> on_it;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, path] : paths_)
        if (id.first == dev) on_it.push_back(path);
    }
    if (sim == nullptr || on_it.empty()) {
      unknown_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    for (const auto& path : on_it) sim->log_sync(path, Op::fsync, err, before);
    syncs_.fetch_add(1, std::memory_order_relaxed);
  }
  /// Reports logged (writes: calls, and the crash log's write events they made), and reports of
  /// a file the rig did not open or with no engine to log them in (none expected).
  std::uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }
  std::uint64_t write_events() const { return events_.load(std::memory_order_relaxed); }
  std::uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  std::uint64_t unknown() const { return unknown_.load(std::memory_order_relaxed); }

 private:
  std::string path_of(const engines::CrashSimEngine* sim, dev_t dev, ino_t ino) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = paths_.find({dev, ino});
    if (it != paths_.end() && sim != nullptr) return it->second;
    unknown_.fetch_add(1, std::memory_order_relaxed);
    return "";
  }
  SimSlot slot_;
  std::mutex mu_;
  std::map<std::pair<dev_t, ino_t>, std::string> paths_;
  std::atomic<std::uint64_t> writes_{0}, events_{0}, syncs_{0}, unknown_{0};
};

// The layer's write-through threshold in the runs with write-through files: every file starts
// write-through, goes to the cache when an epoch writes more than this to it (the journal's
// larger transactions, the random workload's bursts, the overwrites of both files), and comes
// back after an order-thread sync of a small epoch, so both ways and the moves between them run.
constexpr std::uint64_t kRigThroughBytes = 4096;
// Every file stays write-through (no engine request at all): the kernel's way alone.
constexpr std::uint64_t kRigAlwaysThrough = std::uint64_t{1} << 40;

posix::detail::Settings order_crash_settings(const SimSlot& slot, bool busy, const std::string& log_dir = "",
                                             posix::detail::InlineEpochs inline_epochs = posix::detail::InlineEpochs::automatic,
                                             std::shared_ptr<KernelLogger> through = nullptr,
                                             std::uint64_t through_bytes = kRigThroughBytes, bool caller_writes = false) {
  posix::detail::Settings s = layer_settings();
  if (through) {
    s.sync_through_bytes = through_bytes;
    s.files_start_through = true;
    s.kernel_observer = through;
  }
  s.fsync_log_dir = log_dir;
  s.fsync_mode = posix::FsyncMode::order;
  s.fsync_inline = inline_epochs;
  // The back-pressure (fsync_order_test.cpp tests it) must not make a write or an fsync wait for
  // the order thread the busy program holds (the program would wait for ever): no bound on the
  // queue or the delay that a loaded machine could reach (see also OrderProgram::nothing_queued).
  s.fsync_max_delay_ms = 600'000;
  s.order_queue_bytes = std::uint64_t{1} << 30;
  s.options.engine = "crashsim";
  s.options.flush_idle_ns = busy ? 200'000 : -1;
  s.write_behind_ms = busy ? 1 : 0;
  s.start_writeback_bytes = 0;
  if (caller_writes) {
    // Writes the program's thread (or the order thread) makes itself, through a synchronous
    // crash-log engine (CrashSimSyncEngine; CrashSimEngine is asynchronous to the controller and
    // never sees one): on the trivial tree every write of a file with nothing in flight is one.
    s.trivial_tree = true;
    s.options.caller_writes = true;
    s.options.caller_write_threads = 1;
  }
  s.setup = [slot, caller_writes](Controller& c) {
    engines::CrashSimOptions o;
    o.forward_syncs = false;
    if (caller_writes) {
      auto e = engines::make_crashsim_sync(engines::make_posix({}), o);
      *slot = &e->log();
      c.add_engine("crashsim", std::move(e));
      return;
    }
    auto e = engines::make_crashsim(engines::make_posix({}), o);
    *slot = e.get();
    c.add_engine("crashsim", std::move(e));
  };
  return s;
}

// The program's side: tai::posix calls, each recorded with its epoch and its times on the
// crash log's clock. Files stay open until close_all (their paths in the crash log are
// /proc/self/fd/<fd>, which a reused descriptor would confuse).
class OrderProgram {
 public:
  /// busy: now and then a pause (the cache's idle flush and write-behind run) and the order
  /// thread held for a few epochs (a slow device: later epochs queue up behind the first).
  /// through: the layer's logger of write-through files (null: the layer has none).
  OrderProgram(engines::CrashSimEngine* sim, std::string dir, std::string prefix, bool busy, std::uint64_t seed,
               KernelLogger* through = nullptr)
      : sim_(sim), dir_(std::move(dir)), prefix_(std::move(prefix)), busy_(busy), jitter_(seed ^ 0x5bd1e995u),
        never_durable_(not_durable()), through_(through), names_path_(dir_ + "/" + prefix_ + "names-of-the-directory") {
    if (through_) {
      // The directory's syncs (the layer's, for the names the program made or changed) are
      // logged as syncs of its table of names (track_names), a file only the crash log has.
      struct stat st {};
      if (::stat(dir_.c_str(), &st) != 0) throw std::runtime_error("stat " + dir_ + ": " + std::strerror(errno));
      sim_->register_path(names_path_);
      through_->add(st.st_dev, st.st_ino, names_path_);
    }
  }
  ~OrderProgram() { release(); }

  /// From now on the directory's names are part of the state: its table of names (one slot of 8
  /// bytes per name the program used, holding the file it names or 0) is a file of the crash log,
  /// written whole (one 512-byte sector: a name change is atomic) after every open that makes a
  /// file, rename and unlink, in the epoch the call was made in, and synced by the layer's syncs
  /// of the directory. So a name change is judged as a write: present after a crash only if its
  /// epoch may be, and present whenever a later epoch's writes are. Needs the kernel logger.
  void track_names() {
    if (!through_) throw std::runtime_error("track_names needs the layer's kernel logger");
    tracking_names_ = true;
  }

  /// append: opened with O_APPEND, its writes made with write() at the end the kernel takes.
  std::size_t open(const std::string& name, bool append = false) {
    const std::string path = dir_ + "/" + prefix_ + name;
    release();  // an O_TRUNC open waits for the closed epochs (the truncation must not overtake them)
    const std::uint64_t b = tracking_names_ ? wait_for_closed_epochs("open " + name) : sim_->tick();
    const int fd = posix::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
    if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
    if (!posix::routed(fd)) throw std::runtime_error(path + " is not routed");
    fds_.push_back(fd);
    names_.push_back(path);
    sizes_.push_back(0);
    appends_.push_back(append);
    // In the crash log from its open (empty): a write-through file's first event may be the
    // layer's kernel write, which names it by the same path as the engine would.
    sim_->register_path(proc_path(fds_.size() - 1));
    if (through_) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) throw std::runtime_error("fstat " + path + ": " + std::strerror(errno));
      through_->add(st.st_dev, st.st_ino, proc_path(fds_.size() - 1));
    }
    if (tracking_names_) {
      named_[name] = fds_.size();  // the file's index + 1
      write_names("open " + name, b);
    }
    return fds_.size() - 1;
  }
  /// rename and unlink (tai::posix's): each waits for every closed epoch (a sync point for them)
  /// and changes the table of names in the current epoch (track_names first).
  void rename(const std::string& from, const std::string& to) {
    release();
    const std::string a = dir_ + "/" + prefix_ + from, b_path = dir_ + "/" + prefix_ + to;
    const std::uint64_t b = wait_for_closed_epochs("rename " + from + " " + to);
    if (posix::rename(a.c_str(), b_path.c_str()) != 0)
      throw std::runtime_error("rename " + a + ": " + std::strerror(errno));
    const auto it = named_.find(from);
    if (it == named_.end()) throw std::runtime_error("rename of a name the program did not make: " + from);
    named_[to] = it->second;
    named_.erase(from);
    write_names("rename " + from + " " + to, b);
    ++name_changes_;
  }
  void unlink(const std::string& name) {
    name_call("unlink", name, [](const char* path) { return posix::unlink(path); }, 0);
  }
  /// mkdir and rmdir (tai::posix's) of a directory in the program's: a name of the table like a
  /// file's (its slot holds a number no file has), changed in the current epoch after the wait.
  void mkdir(const std::string& name) {
    name_call("mkdir", name, [](const char* path) { return posix::mkdir(path, 0755); }, kDirectoryIds + ++directories_made_);
  }
  void rmdir(const std::string& name) {
    name_call("rmdir", name, [](const char* path) { return posix::rmdir(path); }, 0);
  }
  /// The program's own fsync of the directory (SQLite's after it makes its journal): the names
  /// so far durable when it returns; the layer then leaves the directory out of the epoch's syncs
  /// for those (order_directory_synced), which this checks. Logged as a sync of the table.
  void fsync_directory() {
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) throw std::runtime_error("open " + dir_ + ": " + std::strerror(errno));
    const std::uint64_t b = sim_->tick();
    const int r = posix::fsync(dfd);
    const int err = r == 0 ? 0 : errno;
    sim_->log_sync(names_path_, Op::fsync, err, b);
    ::close(dfd);
    if (r != 0) throw std::runtime_error("fsync of the directory: " + std::string(std::strerror(err)));
    ++directory_fsyncs_;
  }
  std::size_t name_changes() const { return name_changes_; }
  std::size_t directory_fsyncs() const { return directory_fsyncs_; }
  /// A file opened with O_APPEND ignores `offset`: its bytes go to its end (the rig is its only
  /// writer, so the end it knows).
  /// Such a write waits for every closed epoch to be durable (the kernel takes the end at once,
  /// after every earlier write): the order thread is let go first.
  void write(std::size_t f, std::uint64_t offset, const std::vector<unsigned char>& bytes) {
    if (appends_[f]) {
      offset = sizes_[f];
      release();
    }
    EpochOp op;
    op.kind = EpochOp::Kind::write;
    op.offset = offset;
    op.data = bytes;
    op.epoch = epoch_;
    op.label = "write f" + std::to_string(f) + " [" + std::to_string(offset) + ", +" + std::to_string(bytes.size()) + ")";
    op.begin = sim_->tick();
    const ssize_t n = appends_[f] ? posix::write(fds_[f], bytes.data(), bytes.size())
                                  : posix::pwrite(fds_[f], bytes.data(), bytes.size(), static_cast<off_t>(offset));
    op.end = sim_->tick();
    if (n != static_cast<ssize_t>(bytes.size())) throw std::runtime_error(op.label + " failed: " + std::strerror(errno));
    sizes_[f] = std::max<std::uint64_t>(sizes_[f], offset + bytes.size());
    files_of_.push_back(f);
    ops_.push_back(std::move(op));
    pause();
  }
  /// fsync or fdatasync: closes the epoch, returns at once (no sync point).
  void fsync(std::size_t f, bool data_only = false) {
    const int r = data_only ? posix::fdatasync(fds_[f]) : posix::fsync(fds_[f]);
    if (r != 0) throw std::runtime_error(std::string("fsync: ") + std::strerror(errno));
    ++epoch_;
    ++syncs_;
    if (!busy_) return;
    // At most 4 epochs behind a held thread (later epochs queue up behind the first; the delay
    // of order_crash_settings keeps the back-pressure from waiting for the held thread).
    if (held_ && ++held_epochs_ >= 1 + jitter_() % 4) {
      release();
    } else if (!held_ && jitter_() % 4 == 0 && nothing_queued()) {
      posix::detail::hold_order_thread_for_testing(true);
      held_ = true;
      held_epochs_ = 0;
    }
    pause();
  }
  /// ftruncate to 0: goes to the kernel after every closed epoch is durable (a sync point for
  /// them), is itself a change of the current epoch, and is logged in the crash log by hand (no
  /// engine request carries it). Of a file that is empty already it changes nothing, and the
  /// layer returns at once: no sync point then.
  void truncate0(std::size_t f) {
    EpochOp op;
    op.kind = EpochOp::Kind::truncate;
    op.epoch = epoch_;
    op.label = "ftruncate f" + std::to_string(f);
    release();  // the truncation waits for the closed epochs
    op.begin = sim_->tick();
    if (posix::ftruncate(fds_[f], 0) != 0) throw std::runtime_error(std::string("ftruncate: ") + std::strerror(errno));
    sim_->log_truncate(engine_path(f));
    op.end = sim_->tick();
    if (sizes_[f] != 0) add_sync_point("ftruncate f" + std::to_string(f), epoch_, op.begin, op.end);
    sizes_[f] = 0;
    files_of_.push_back(f);
    ops_.push_back(std::move(op));
  }
  /// sync_now: closes the epoch and waits for every one: all writes before it durable.
  void sync_now() {
    release();
    const std::uint64_t b = sim_->tick();
    if (posix::sync_now() != 0) throw std::runtime_error(std::string("sync_now: ") + std::strerror(errno));
    add_sync_point("sync_now", epoch_ + 1, b, sim_->tick());
    ++epoch_;
  }
  /// Closes every file. A cached file's close in order mode is a sync_now (every write durable,
  /// the open epoch closed); a write-through file's waits only for the epochs closed before it,
  /// its own writes since staying in the open epoch (closes_through_for_testing tells which way
  /// the layer took).
  void close_all() {
    release();
    for (std::size_t f = 0; f < fds_.size(); ++f) {
      const std::uint64_t through_before = posix::detail::closes_through_for_testing();
      const std::uint64_t b = sim_->tick();
      if (posix::close(fds_[f]) != 0) throw std::runtime_error(std::string("close: ") + std::strerror(errno));
      const std::uint64_t e = sim_->tick();
      if (posix::detail::closes_through_for_testing() != through_before) {
        add_sync_point("close f" + std::to_string(f) + " (write-through)", epoch_, b, e);
        ++closes_through_;
      } else {
        add_sync_point("close f" + std::to_string(f), epoch_ + 1, b, e);
        ++epoch_;
      }
    }
  }
  std::size_t closes_through() const { return closes_through_; }
  /// Ends as a process's exit does, its files open: the exit handler's work (shutdown_for_testing:
  /// every epoch closed before it durable, the open epoch's writes handed to the kernel unsynced,
  /// the controller shut down but not destroyed: its engine and log stay until the run's
  /// restart), then the descriptors closed (the kernel's now).
  void exit_all() {
    release();
    const std::uint64_t b = sim_->tick();
    const std::vector<std::string> failures = posix::detail::shutdown_for_testing();
    if (!failures.empty()) throw std::runtime_error("exit: " + failures.front());
    // The closed epochs, not the open one: the exit waits for them, and hands the open epoch's
    // writes to the kernel unsynced.
    add_sync_point("exit", epoch_, b, sim_->tick());
    // posix::close: the descriptors are the kernel's now, but the layer's table still names them.
    for (int fd : fds_) (void)posix::close(fd);
  }
  unsigned epoch() const { return epoch_; }
  /// Each file's name (what the order log records) -> its path in the crash log.
  std::map<std::string, std::string> engine_paths(const CrashLog& log) const {
    std::map<std::string, std::string> out;
    for (std::size_t f = 0; f < fds_.size(); ++f)
      out[names_[f]] = log.file_index(proc_path(f)) >= 0 ? proc_path(f) : names_[f];
    return out;
  }
  std::size_t operations() const { return ops_.size() + syncs_; }
  /// The log with the crash log's paths filled in.
  std::vector<EpochOp> ops(const CrashLog& log) const {
    std::vector<EpochOp> out = ops_;
    for (std::size_t i = 0, w = 0; i < out.size(); ++i) {
      if (out[i].kind == EpochOp::Kind::sync_point) continue;
      const std::size_t f = files_of_[w++];
      if (f == kNamesTable) {
        out[i].path = names_path_;
        continue;
      }
      out[i].path = log.file_index(proc_path(f)) >= 0 ? proc_path(f) : names_[f];
    }
    return out;
  }

 private:
  std::string proc_path(std::size_t f) const { return "/proc/self/fd/" + std::to_string(fds_[f]); }
  std::string engine_path(std::size_t f) const {
    const CrashLog log = sim_->snapshot();
    return log.file_index(proc_path(f)) >= 0 ? proc_path(f) : names_[f];
  }
  // No epoch waits for the order thread: a hold begun now keeps at most the epochs this program
  // closes during it behind the thread. (Begun with epochs still queued, as on a loaded machine
  // where the thread falls behind, the fsync's back-pressure could wait for the held thread.)
  // (The counters are the process's: epochs that failed before this program never count as
  // durable, hence the count at its start.)
  bool nothing_queued() const { return not_durable() == never_durable_; }
  static unsigned long long not_durable() {
    const posix::FsyncOrderStats s = posix::fsync_order_stats();
    return s.epochs_closed - s.epochs_durable;
  }
  void release() {
    if (!held_) return;
    posix::detail::hold_order_thread_for_testing(false);
    held_ = false;
  }
  void pause() {
    if (busy_ && jitter_() % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  // The wait for the closed epochs that tai::posix's name changes and O_TRUNC opens make first,
  // made here (order_point) so that the call's own finds none left: a sync point for the closed
  // epochs, and the tick after it, from which the kernel may change the names.
  // A call on one name of the directory: after the wait for the closed epochs, `call` on its
  // path; then the name holds `id` (0: removed) in the table, changed in the current epoch.
  template <class Call>
  void name_call(const char* what, const std::string& name, Call call, std::size_t id) {
    release();
    const std::string path = dir_ + "/" + prefix_ + name, label = std::string(what) + " " + name;
    const std::uint64_t b = wait_for_closed_epochs(label);
    if (call(path.c_str()) != 0) throw std::runtime_error(std::string(what) + " " + path + ": " + std::strerror(errno));
    if (id != 0)
      named_[name] = id;
    else
      named_.erase(name);
    write_names(label, b);
    ++name_changes_;
  }
  std::uint64_t wait_for_closed_epochs(const std::string& label) {
    const std::uint64_t b = sim_->tick();
    if (posix::detail::order_point() != 0) throw std::runtime_error(label + ": an epoch failed: " + std::strerror(errno));
    const std::uint64_t e = sim_->tick();
    add_sync_point(label, epoch_, b, e);
    return e;
  }
  // The table of names as it is now, logged as a write made between `begin` (a tick taken after
  // the call's wait for the epochs, before the kernel's part) and now, and recorded as the
  // program's write of the current epoch.
  void write_names(const std::string& label, std::uint64_t begin) {
    std::vector<unsigned char> table(kNamesBytes, 0);
    for (const auto& [name, id] : named_) {
      auto slot = slot_of_.find(name);
      if (slot == slot_of_.end()) {
        if (slot_of_.size() == kNamesBytes / 8) throw std::runtime_error("more names than the table holds");
        slot = slot_of_.emplace(name, slot_of_.size()).first;
      }
      const std::uint64_t v = 0xA5A5A5A500000000ull | id;
      std::memcpy(table.data() + slot->second * 8, &v, 8);
    }
    struct iovec one = {table.data(), table.size()};
    sim_->log_write(names_path_, 0, &one, 1, static_cast<std::int64_t>(table.size()), begin);
    EpochOp op;
    op.kind = EpochOp::Kind::write;
    op.offset = 0;
    op.data = std::move(table);
    op.epoch = epoch_;
    op.label = "names after " + label;
    op.begin = begin;
    op.end = sim_->tick();
    files_of_.push_back(kNamesTable);
    ops_.push_back(std::move(op));
  }
  void add_sync_point(std::string label, unsigned required, std::uint64_t begin, std::uint64_t end) {
    EpochOp op;
    op.kind = EpochOp::Kind::sync_point;
    op.required_epoch = required;
    op.begin = begin;
    op.end = end;
    op.label = std::move(label);
    ops_.push_back(std::move(op));
  }

  engines::CrashSimEngine* sim_;
  std::string dir_, prefix_;
  std::vector<int> fds_;
  std::vector<std::string> names_;
  std::vector<std::uint64_t> sizes_;  // per file: its size as the program made it
  std::vector<bool> appends_;         // per file: opened with O_APPEND
  std::vector<EpochOp> ops_;
  std::vector<std::size_t> files_of_;  // per write/truncate op, in order: its file
  unsigned epoch_ = 0;
  std::size_t syncs_ = 0;
  bool busy_;
  std::mt19937_64 jitter_;
  bool held_ = false;
  unsigned held_epochs_ = 0;
  unsigned long long never_durable_;  // closed and not durable when the program started
  KernelLogger* through_;
  std::size_t closes_through_ = 0;
  // The table of names (track_names): a file of the crash log only, one sector.
  static constexpr std::size_t kNamesTable = ~std::size_t{0};  // its entry in files_of_
  static constexpr std::size_t kNamesBytes = 512;
  std::string names_path_;
  bool tracking_names_ = false;
  std::map<std::string, std::size_t> named_;    // name -> the file's index + 1
  std::map<std::string, std::size_t> slot_of_;  // name -> its slot, kept once given
  std::size_t name_changes_ = 0;
  std::size_t directory_fsyncs_ = 0;
  static constexpr std::size_t kDirectoryIds = 0x40000000;  // a directory's slot: this + its number
  std::size_t directories_made_ = 0;
};

// Bytes that differ per (file, offset, epoch, salt): a write's bytes name where and when they were made.
std::vector<unsigned char> order_crash_bytes(std::size_t n, std::uint64_t salt) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = salt * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<unsigned char>(x | 1);  // never 0: a hole is told apart from written bytes
  }
  return v;
}

// --- the workloads ---------------------------------------------------------------------------

// SQLite's rollback-journal pattern, `rounds` times: the journal (a header and the old pages),
// fsync; the database pages, fsync; the journal truncated to 0, fsync. A sync_now in the middle.
void journal_workload(OrderProgram& p, std::mt19937_64& rng, unsigned rounds) {
  constexpr std::size_t kPage = 1024;
  const std::size_t db = p.open("db"), journal = p.open("journal");
  for (unsigned r = 0; r < rounds; ++r) {
    std::vector<std::size_t> pages;
    for (std::size_t pg = 0; pg < 8; ++pg)
      if (rng() % 3 == 0) pages.push_back(pg);
    if (pages.empty()) pages.push_back(rng() % 8);
    p.write(journal, 0, order_crash_bytes(512, rng()));
    for (std::size_t i = 0; i < pages.size(); ++i) p.write(journal, 512 + i * kPage, order_crash_bytes(kPage, rng()));
    p.fsync(journal);
    for (std::size_t pg : pages) p.write(db, pg * kPage, order_crash_bytes(kPage, rng()));
    p.fsync(db, rng() % 2 == 0);
    p.truncate0(journal);
    p.fsync(journal);
    if (r == rounds / 2) p.sync_now();
  }
}

// Records appended to one file, an fsync after each.
void append_workload(OrderProgram& p, std::mt19937_64& rng, unsigned records) {
  const std::size_t log = p.open("log");
  std::uint64_t end = 0;
  for (unsigned i = 0; i < records; ++i) {
    const std::size_t n = 64 + rng() % 2000;
    p.write(log, end, order_crash_bytes(n, rng()));
    end += n;
    p.fsync(log, i % 2 == 1);
  }
}

// A logger's way: records written with O_APPEND (the kernel takes the end of file), an fsync or
// fdatasync after each, and a state file whose pages are overwritten after the record that
// describes them, synced now and then: the record's epoch before the page's.
void o_append_workload(OrderProgram& p, std::mt19937_64& rng, unsigned records) {
  const std::size_t log = p.open("applog", true), state = p.open("state");
  for (unsigned i = 0; i < records; ++i) {
    p.write(log, 0, order_crash_bytes(32 + rng() % 600, rng()));
    p.fsync(log, i % 2 == 1);
    p.write(state, (rng() % 4) * 512, order_crash_bytes(512, rng()));
    if (rng() % 3 == 0) p.fsync(state);
  }
}

// The same pages of two files overwritten in every epoch, in varying subsets.
void overwrite_workload(OrderProgram& p, std::mt19937_64& rng, unsigned epochs) {
  const std::size_t a = p.open("a"), b = p.open("b");
  for (unsigned e = 0; e < epochs; ++e) {
    for (std::size_t f : {a, b})
      for (std::uint64_t pg = 0; pg < 6; ++pg)
        if (e == 0 || rng() % 2 == 0) p.write(f, pg * 512 + (rng() % 4 == 0 ? 100 : 0), order_crash_bytes(512, rng()));
    p.fsync(rng() % 2 == 0 ? a : b);
  }
}

// Random writes over 2-3 files, fsync/fdatasync of any file, now and then a truncation to 0 or a
// sync_now.
void random_workload(OrderProgram& p, std::mt19937_64& rng, unsigned operations) {
  std::vector<std::size_t> files;
  const unsigned n_files = 2 + rng() % 2;
  for (unsigned i = 0; i < n_files; ++i) files.push_back(p.open("r" + std::to_string(i)));
  for (unsigned i = 0; i < operations && p.epoch() < 50; ++i) {
    const std::size_t f = files[rng() % files.size()];
    const unsigned roll = rng() % 100;
    if (roll < 65) {
      const std::uint64_t off = rng() % 8192;
      p.write(f, off, order_crash_bytes(1 + rng() % 1500, rng()));
    } else if (roll < 92) {
      p.fsync(f, roll % 2 == 0);
    } else if (roll < 96) {
      p.truncate0(f);
    } else {
      p.sync_now();
    }
  }
}

// Atomic replacement (git's refs, an editor's save, sed -i): each round a new file under a
// temporary name, written and fsynced, renamed over the current one, then a record of it written
// to a log and fsynced. Now and then the replaced file's predecessor is kept under a second name,
// which a later round unlinks. The names are part of the state (track_names).
void replace_workload(OrderProgram& p, std::mt19937_64& rng, unsigned rounds) {
  p.track_names();
  const std::size_t log = p.open("log");
  bool kept = false;
  for (unsigned r = 0; r < rounds; ++r) {
    const std::string tmp = "tmp" + std::to_string(r);
    const std::size_t f = p.open(tmp);
    p.write(f, 0, order_crash_bytes(256 + rng() % 3000, rng()));
    p.fsync(f, rng() % 2 == 0);
    if (r > 0 && !kept && rng() % 3 == 0) {
      p.rename("current", "previous");
      kept = true;
    }
    p.rename(tmp, "current");
    p.write(log, r * 128, order_crash_bytes(128, rng()));
    p.fsync(log, rng() % 2 == 0);
    if (kept && rng() % 2 == 0) {
      p.unlink("previous");
      kept = false;
    }
  }
}

// Directories made and removed between fsyncs (git's object directories, a build's output tree,
// a spool): each round makes a directory, sometimes a file beside it (written and fsynced), then
// a record in a log, fsynced; now and then a directory of an earlier round is removed. Directories
// are names of the table as files are (track_names).
void directories_workload(OrderProgram& p, std::mt19937_64& rng, unsigned rounds) {
  p.track_names();
  const std::size_t log = p.open("log");
  std::vector<std::string> made;
  for (unsigned r = 0; r < rounds; ++r) {
    made.push_back("dir" + std::to_string(r));
    p.mkdir(made.back());
    if (rng() % 2 == 0) {
      const std::size_t f = p.open("file" + std::to_string(r));
      p.write(f, 0, order_crash_bytes(200 + rng() % 2000, rng()));
      p.fsync(f, rng() % 2 == 0);
    }
    p.write(log, r * 128, order_crash_bytes(128, rng()));
    p.fsync(log, rng() % 2 == 0);
    if (made.size() > 1 && rng() % 3 == 0) {
      const std::size_t i = rng() % (made.size() - 1);
      p.rmdir(made[i]);
      made.erase(made.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

// SQLite's rollback journal in DELETE mode: each transaction makes the journal (and, as SQLite
// does, most times fsyncs the directory after it, unless `dir_syncs` is false), writes and
// fsyncs it, writes and fsyncs the database, and commits by unlinking the journal; the next one
// makes it again under the same name. The names are part of the state (track_names).
void delete_journal_workload(OrderProgram& p, std::mt19937_64& rng, unsigned rounds, bool dir_syncs = true) {
  constexpr std::size_t kPage = 1024;
  p.track_names();
  const std::size_t db = p.open("db");
  for (unsigned r = 0; r < rounds; ++r) {
    const std::size_t journal = p.open("journal");
    if (rng() % 4 != 0 && dir_syncs) p.fsync_directory();
    const std::size_t pages = 1 + rng() % 3;
    p.write(journal, 0, order_crash_bytes(512, rng()));
    for (std::size_t i = 0; i < pages; ++i) p.write(journal, 512 + i * kPage, order_crash_bytes(kPage, rng()));
    p.fsync(journal);
    for (std::size_t i = 0; i < pages; ++i) p.write(db, (rng() % 8) * kPage, order_crash_bytes(kPage, rng()));
    p.fsync(db, rng() % 2 == 0);
    p.unlink("journal");
  }
}

struct OrderCrashTally {
  CrashStats stats;
  std::size_t runs = 0, operations = 0;
  std::size_t replayed = 0;  // states whose log held batches to replay (with the log of epochs)
  std::size_t saved_by_replay = 0;  // of those, states the files alone would not have explained
  std::vector<std::string> violations;  // the first few, with their state
  unsigned long long max_lag_ns = 0;  // FsyncOrderStats::max_lag_ns, the most of any run (reset by each)
  // With write-through files: the layer's kernel writes and syncs logged, of files the rig did not
  // open, the crash log's writes in all (engine and kernel), closes that took the write-through way.
  std::uint64_t kernel_writes = 0, kernel_write_events = 0, kernel_syncs = 0, unknown = 0, logged_writes = 0,
                closes_through = 0, name_changes = 0, program_dir_syncs = 0;
  std::uint64_t caller_writes = 0;  // writes the controller let a program or order thread make itself
  void add(const OrderCrashTally& t) {
    stats += t.stats;
    runs += t.runs;
    operations += t.operations;
    replayed += t.replayed;
    saved_by_replay += t.saved_by_replay;
    max_lag_ns = std::max(max_lag_ns, t.max_lag_ns);
    kernel_writes += t.kernel_writes;
    kernel_write_events += t.kernel_write_events;
    kernel_syncs += t.kernel_syncs;
    unknown += t.unknown;
    logged_writes += t.logged_writes;
    closes_through += t.closes_through;
    name_changes += t.name_changes;
    program_dir_syncs += t.program_dir_syncs;
    caller_writes += t.caller_writes;
    for (const auto& v : t.violations) violations.push_back(v);
  }
};

// With the log of epochs (TAI_FSYNC_LOG_DIR): the files alone need not hold a state of the
// program after a crash; the files after the replay of the log must. So each state is replayed
// first, as recover_order_logs would (the log's bytes in that state parsed, each whole batch's
// writes applied in order to the files' images), then judged by the epoch oracle.
class ReplayingOracle : public engines::MultiCrashChecker {
 public:
  ReplayingOracle(const CrashLog& log, EpochOracle& inner, std::map<std::string, std::string> engine_path_of,
                  std::string log_prefix)
      : log_(log), inner_(inner), engine_path_of_(std::move(engine_path_of)), prefix_(std::move(log_prefix)) {
    for (std::size_t i = 0; i < log_.paths.size(); ++i)
      if (log_.paths[i].compare(0, prefix_.size(), prefix_) == 0) logs_.push_back(i);
  }
  std::uint64_t context(std::uint64_t seq) const override { return inner_.context(seq); }
  void check(const MultiCrashState& state, std::vector<std::string>& out) override {
    std::vector<std::vector<unsigned char>> images = *state.images;
    bool any = false;
    for (std::size_t li : logs_) {
      const auto& img = (*state.images)[li];
      const posix::detail::ParsedOrderLog parsed = posix::detail::parse_order_log(img.data(), img.size());
      for (const auto& b : parsed.batches)
        for (const auto& w : b.writes) {
          const auto it = engine_path_of_.find(w.path);
          const int fi = it == engine_path_of_.end() ? -1 : log_.file_index(it->second);
          if (fi < 0) {
            out.push_back("the log names a file the program did not write: " + w.path);
            continue;
          }
          auto& f = images[static_cast<std::size_t>(fi)];
          if (f.size() < w.pos + w.bytes.size()) f.resize(w.pos + w.bytes.size(), 0);
          std::memcpy(f.data() + w.pos, w.bytes.data(), w.bytes.size());
          any = true;
        }
    }
    if (any) {
      ++replayed;
      // Would the files alone have kept the order? Counted: the states only the replay saves.
      std::vector<std::string> without;
      inner_.check(state, without);
      if (!without.empty()) ++saved_by_replay;
    }
    MultiCrashState replayed_state = state;
    replayed_state.images = &images;
    inner_.check(replayed_state, out);
  }
  std::size_t replayed = 0;
  std::size_t saved_by_replay = 0;

 private:
  const CrashLog& log_;
  EpochOracle& inner_;
  std::map<std::string, std::string> engine_path_of_;
  std::string prefix_;
  std::vector<std::size_t> logs_;
};

// One run: a fresh layer over a fresh crashsim engine, the workload, every file closed, then
// every multi-file crash state of the log checked.
// With `with_log`, the layer keeps its log of epochs in `dir` and every state is replayed first.
// With `through`, the layer has write-through files (kRigThroughBytes), their kernel writes and
// syncs logged beside the engine's.
void run_order_crash(const std::string& dir, const std::string& prefix, bool busy, std::uint64_t seed,
                     const std::function<void(OrderProgram&, std::mt19937_64&)>& workload, OrderCrashTally& tally,
                     bool with_log = false,
                     posix::detail::InlineEpochs inline_epochs = posix::detail::InlineEpochs::automatic,
                     bool through = false, bool exit_at_end = false, std::uint64_t through_bytes = kRigThroughBytes,
                     bool caller_writes = false) {
  SimSlot slot = std::make_shared<engines::CrashSimEngine*>(nullptr);
  std::shared_ptr<KernelLogger> logger = through ? std::make_shared<KernelLogger>(slot) : nullptr;
  const ShutdownReport before = posix::detail::restart_for_testing(order_crash_settings(
      slot, busy, with_log ? dir : std::string(), inline_epochs, logger, through_bytes, caller_writes));
  ASSERT_TRUE(before.ok()) << before.to_string();
  // The controller (and the hook) is made at the first use: an open.
  ASSERT_NE(posix::detail::controller(), nullptr);
  ASSERT_NE(*slot, nullptr) << "the Settings hook did not register the crashsim engine";
  OrderProgram prog(*slot, dir, prefix, busy, seed, logger.get());
  std::mt19937_64 rng(seed);
  try {
    workload(prog, rng);
    if (exit_at_end) {
      prog.exit_all();
    } else {
      prog.close_all();
    }
  } catch (const std::exception& e) {
    FAIL() << "seed " << seed << ": " << e.what();
  }
  const CrashLog log = (*slot)->snapshot();
  if (caller_writes) {
    Controller* const c = posix::detail::controller();  // null after an exit
    if (c != nullptr) tally.caller_writes += c->stats().caller_writes;
  }
  if (logger) {
    tally.kernel_writes += logger->writes();
    tally.kernel_write_events += logger->write_events();
    tally.kernel_syncs += logger->syncs();
    tally.unknown += logger->unknown();
    tally.closes_through += prog.closes_through();
    tally.name_changes += prog.name_changes();
    tally.program_dir_syncs += prog.directory_fsyncs();
    for (const auto& e : log.events) tally.logged_writes += e.kind == engines::CrashEvent::Kind::write ? 1 : 0;
  }
  const std::vector<EpochOp> ops = prog.ops(log);
  EpochOracle oracle(log, ops);
  ReplayingOracle replaying(log, oracle, prog.engine_paths(log), dir + "/tai-order.");
  CrashStateOptions opt;
  opt.sector_size = 512;
  opt.seed = seed;
  opt.samples = 256;
  tally.stats += engines::enumerate_multi_crash_states(
      log, opt, with_log ? static_cast<engines::MultiCrashChecker&>(replaying) : oracle,
      [&](const MultiCrashState& s, const std::vector<std::string>& lines) {
        if (tally.violations.size() < 3)
          tally.violations.push_back("seed " + std::to_string(seed) + " " + prefix + (busy ? " busy" : " quiet") +
                                     ": " + lines.front() + "\n    state: " + s.describe());
      });
  ++tally.runs;
  tally.replayed += replaying.replayed;
  tally.saved_by_replay += replaying.saved_by_replay;
  tally.operations += prog.operations();
  tally.max_lag_ns = std::max(tally.max_lag_ns, posix::fsync_order_stats().max_lag_ns);
  const ShutdownReport after = posix::detail::restart_for_testing(layer_settings());
  EXPECT_TRUE(after.ok()) << after.to_string();
}

void print_order_crash(const char* name, const OrderCrashTally& t, double seconds) {
  std::printf("[crashsim] order mode %-10s %zu runs (%zu operations), %llu crash points (%llu exhaustive, %llu "
              "sampled, at most %llu units), %llu unique multi-file states, %llu violations, %.1f s\n",
              name, t.runs, t.operations, static_cast<unsigned long long>(t.stats.points),
              static_cast<unsigned long long>(t.stats.exhaustive_points),
              static_cast<unsigned long long>(t.stats.sampled_points),
              static_cast<unsigned long long>(t.stats.max_units), static_cast<unsigned long long>(t.stats.unique),
              static_cast<unsigned long long>(t.stats.violations), seconds);
  std::fflush(stdout);
}

class FsyncOrderCrash : public LayerTest {
 protected:
  void TearDown() override {
    posix::detail::skip_epoch_syncs_for_testing(0);
    posix::detail::skip_directory_syncs_for_testing(false);
    LayerTest::TearDown();
  }
};

// The four workloads, `counts` runs of each (scaled), every run checked; prints a line per
// workload and the total. Busy runs are those with i % 2 == busy_parity.
struct OrderCrashKind {
  const char* name;
  unsigned runs;
  std::function<void(OrderProgram&, std::mt19937_64&)> body;
};

std::vector<OrderCrashKind> order_crash_kinds(const std::array<unsigned, 4>& counts, double scale) {
  auto runs = [&](unsigned n) { return std::max(1u, static_cast<unsigned>(n * scale + 0.5)); };
  return {
      {"journal", runs(counts[0]), [](OrderProgram& p, std::mt19937_64& r) { journal_workload(p, r, 5); }},
      {"append", runs(counts[1]), [](OrderProgram& p, std::mt19937_64& r) { append_workload(p, r, 24); }},
      {"overwrite", runs(counts[2]), [](OrderProgram& p, std::mt19937_64& r) { overwrite_workload(p, r, 10); }},
      {"random", runs(counts[3]), [](OrderProgram& p, std::mt19937_64& r) { random_workload(p, r, 50); }},
  };
}

// A suite's seed (the test seed, `salt` apart per suite so that each draws its own runs), its
// line saying how to replay it, and the run scale.
std::uint64_t order_crash_seed(const char* what, std::uint64_t salt, double& scale) {
  const std::uint64_t seed = test_seed() ^ salt;
  scale = order_crash_scale();
  std::printf("[crashsim] order mode%s: seed %llu (TAI_TEST_SEED=%llu replays it), run scale %.2f\n", what,
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed ^ salt), scale);
  return seed;
}

// Returns false after a fatal failure (the caller returns).
bool run_order_crash_kinds(const std::string& dir, const std::string& prefix, const std::vector<OrderCrashKind>& kinds,
                           std::uint64_t seed, unsigned busy_parity, bool with_log, OrderCrashTally& total,
                           posix::detail::InlineEpochs inline_epochs = posix::detail::InlineEpochs::automatic,
                           bool through = false, bool exit_at_end = false, bool caller_writes = false) {
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t run_seed = seed;
  for (const OrderCrashKind& k : kinds) {
    OrderCrashTally t;
    const auto k0 = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < k.runs; ++i) {
      run_seed = run_seed * 6364136223846793005ull + 1442695040888963407ull;
      run_order_crash(dir, prefix + k.name + std::to_string(i) + "_", i % 2 == busy_parity, run_seed, k.body, t, with_log,
                      inline_epochs, through, exit_at_end, kRigThroughBytes, caller_writes);
      if (::testing::Test::HasFatalFailure()) return false;
    }
    print_order_crash(k.name, t, std::chrono::duration<double>(std::chrono::steady_clock::now() - k0).count());
    total.add(t);
  }
  print_order_crash("TOTAL", total, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (const auto& v : total.violations) ADD_FAILURE() << v;
  return true;
}

TEST_F(FsyncOrderCrash, EveryMultiFileCrashStateKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed("", 0, scale);
  OrderCrashTally total;
  if (!run_order_crash_kinds(file(""), "", order_crash_kinds({24, 10, 16, 40}, scale), seed, 1, false, total)) return;
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << seed << ")";
  if (scale >= 1.0) {
    EXPECT_GE(total.stats.unique, 100'000u) << "an optimised build checks at least 100,000 states";
  }
}

// Every epoch closed while no other is in flight made durable by the thread that closed it
// (TAI_FSYNC_INLINE=always): the same workloads, fewer runs, the same oracle. (The default,
// automatic choice runs in the test above: the journal workload waits at its truncations.)
TEST_F(FsyncOrderCrash, EveryCrashStateWithInlineEpochsKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(", inline epochs", 0x1a11e, scale);
  OrderCrashTally total;
  const auto before = posix::fsync_order_stats();
  if (!run_order_crash_kinds(file(""), "inline_", order_crash_kinds({8, 4, 6, 12}, scale), seed, 1, false, total,
                             posix::detail::InlineEpochs::always))
    return;
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0x1a11e) << ")";
  const auto after = posix::fsync_order_stats();
  std::printf("[crashsim] order mode, inline: %llu of %llu epochs made durable by the thread that closed them\n",
              after.epochs_inline - before.epochs_inline, after.epochs_closed - before.epochs_closed);
  EXPECT_GT(after.epochs_inline, before.epochs_inline);
  // Epochs made durable inline count in the longest time from an fsync to durable too.
  EXPECT_GT(total.max_lag_ns, 0u);
}

// Caller writes (ControllerOptions::caller_writes): the controller lets the thread that calls
// File::write (the program's, or the order thread applying held writes) make the write itself
// when nothing else of the file is in flight. The same workloads over the trivial tree, where
// every such write is one, logged by the synchronous crash-log engine; the same oracle.
TEST_F(FsyncOrderCrash, EveryCrashStateWithCallerWritesKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(", caller writes", 0xca11e7, scale);
  OrderCrashTally total;
  if (!run_order_crash_kinds(file(""), "caller_", order_crash_kinds({8, 4, 6, 12}, scale), seed, 1, false, total,
                             posix::detail::InlineEpochs::automatic, false, false, true))
    return;
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0xca11e7) << ")";
  std::printf("[crashsim] order mode, caller writes: %llu writes made by the thread that asked for them\n",
              static_cast<unsigned long long>(total.caller_writes));
  EXPECT_GT(total.caller_writes, 0u) << "no caller write: the test checks nothing the others do not";
}

// The proof that the suite sees a broken order: the order thread told to skip the syncs of every
// epoch (overwrites of two files), or of every second one (the journal pattern: a database page
// durable while the journal epoch before it is not, what would corrupt SQLite). A later epoch's
// writes then reach the engine while an earlier one's are not durable.
TEST_F(FsyncOrderCrash, AnOrderThreadThatSkipsTheSyncsIsCaught) {
  const std::string dir = file("");
  struct Broken {
    const char* name;
    unsigned every;
    std::function<void(OrderProgram&, std::mt19937_64&)> body;
  };
  const std::vector<Broken> cases = {
      {"overwrite", 1, [](OrderProgram& p, std::mt19937_64& r) { overwrite_workload(p, r, 4); }},
      {"journal", 2, [](OrderProgram& p, std::mt19937_64& r) { journal_workload(p, r, 3); }},
  };
  for (const Broken& b : cases)
    for (bool busy : {false, true}) {
      OrderCrashTally t;
      posix::detail::skip_epoch_syncs_for_testing(b.every);
      run_order_crash(dir, std::string("broken_") + b.name + (busy ? "_busy_" : "_quiet_"), busy, 7, b.body, t);
      posix::detail::skip_epoch_syncs_for_testing(0);
      if (HasFatalFailure()) return;
      EXPECT_GT(t.stats.violations, 0u) << b.name << ", every " << b.every << (busy ? ", busy" : ", quiet");
      std::printf("[crashsim] order mode, the syncs of %s epoch skipped, %s (%s): %llu of %llu states rejected%s%s\n",
                  b.every == 1 ? "every" : "every second", b.name, busy ? "busy" : "quiet",
                  static_cast<unsigned long long>(t.stats.violations), static_cast<unsigned long long>(t.stats.unique),
                  t.violations.empty() ? "" : ", e.g. ", t.violations.empty() ? "" : t.violations.front().c_str());
    }
  // The same for epochs made inline by the thread that closed them (the syncs they skip are the
  // program thread's).
  OrderCrashTally t;
  const auto before = posix::fsync_order_stats();
  posix::detail::skip_epoch_syncs_for_testing(2);
  run_order_crash(dir, "broken_inline_journal_", false, 7, cases[1].body, t, false, posix::detail::InlineEpochs::always);
  posix::detail::skip_epoch_syncs_for_testing(0);
  if (HasFatalFailure()) return;
  EXPECT_GT(t.stats.violations, 0u) << "journal, every second epoch, inline";
  EXPECT_GT(posix::fsync_order_stats().epochs_inline, before.epochs_inline);
  std::printf("[crashsim] order mode, inline epochs, the syncs of every second epoch skipped, journal: %llu of %llu "
              "states rejected\n",
              static_cast<unsigned long long>(t.stats.violations), static_cast<unsigned long long>(t.stats.unique));
  // The same with caller writes, whose bytes only the synchronous crash-log engine logs.
  OrderCrashTally tc;
  posix::detail::skip_epoch_syncs_for_testing(1);
  run_order_crash(dir, "broken_caller_overwrite_", false, 7, cases[0].body, tc, false,
                  posix::detail::InlineEpochs::automatic, false, false, kRigThroughBytes, true);
  posix::detail::skip_epoch_syncs_for_testing(0);
  if (HasFatalFailure()) return;
  EXPECT_GT(tc.caller_writes, 0u) << "overwrite, caller writes: none made";
  EXPECT_GT(tc.stats.violations, 0u) << "overwrite, every epoch, caller writes";
  std::printf("[crashsim] order mode, caller writes (%llu), the syncs of every epoch skipped, overwrite: %llu of %llu "
              "states rejected\n",
              static_cast<unsigned long long>(tc.caller_writes), static_cast<unsigned long long>(tc.stats.violations),
              static_cast<unsigned long long>(tc.stats.unique));
}

// The log of epochs: the same workloads, the order thread held now and then so that epochs queue
// and go to the log in batches (and, quiet, whenever the program outruns the thread), every state
// replayed from the log's bytes in that state before it is judged.
TEST_F(FsyncOrderCrash, EveryStateReplayedFromTheLogOfEpochsKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(" with the log of epochs", 0x10c, scale);
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  const std::string dir = file("");
  OrderCrashTally total;
  if (!run_order_crash_kinds(dir, "log_", order_crash_kinds({16, 10, 12, 24}, scale), seed, 0, true, total)) return;
  const posix::FsyncOrderStats after = posix::fsync_order_stats();
  std::printf("[crashsim] order mode with the log: %llu epochs in %llu batches, %llu checkpoints, %zu states "
              "replayed from the log, %zu of them out of order without the replay\n",
              after.epochs_logged - before.epochs_logged, after.log_batches - before.log_batches,
              after.log_checkpoints - before.log_checkpoints, total.replayed, total.saved_by_replay);
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0x10c) << ")";
  // The suite means something only if the log was used and states needed its replay.
  EXPECT_GT(after.log_batches - before.log_batches, 0u);
  EXPECT_GT(total.replayed, 0u);
  // Nothing left behind: every run's log was voided and removed at its shutdown.
  const posix::detail::OrderLogRecovery rec = posix::detail::recover_order_logs(dir);
  EXPECT_EQ(rec.logs, 0u);
}

// The proof that the replaying suite sees a broken log: the order thread told to give a batch's
// writes to the cache without writing the log (skip_epoch_syncs_for_testing, every epoch).
TEST_F(FsyncOrderCrash, ABatchAppliedBeforeTheLogIsWrittenIsCaught) {
  const std::string dir = file("");
  OrderCrashTally t;
  posix::detail::skip_epoch_syncs_for_testing(1);
  run_order_crash(dir, "broken_log_", true, 11, [](OrderProgram& p, std::mt19937_64& r) { overwrite_workload(p, r, 8); },
                  t, true);
  posix::detail::skip_epoch_syncs_for_testing(0);
  if (HasFatalFailure()) return;
  EXPECT_GT(t.stats.violations, 0u);
  std::printf("[crashsim] order mode with the log, batches applied without the log: %llu of %llu states rejected\n",
              static_cast<unsigned long long>(t.stats.violations), static_cast<unsigned long long>(t.stats.unique));
}

// Write-through files (the layer's default: every routed file starts so): their writes reach
// the kernel on the program's descriptor while the gate is open and on the order thread's own
// when it applies held writes, their syncs are the order thread's fsync/fdatasync on that
// descriptor (or a syncfs), and a close waits only for the epochs closed before it. The same
// workloads and oracle, every kernel write and sync of the layer logged beside the engine's
// requests; files move between write-through and the cache as their epochs grow and shrink.
TEST_F(FsyncOrderCrash, EveryCrashStateWithWriteThroughFilesKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(" with write-through files", 0x7407, scale);
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  OrderCrashTally total;
  std::vector<OrderCrashKind> kinds = order_crash_kinds({12, 6, 8, 20}, scale);
  kinds.push_back({"o_append", static_cast<unsigned>(8 * scale + 0.5),
                   [](OrderProgram& p, std::mt19937_64& r) { o_append_workload(p, r, 16); }});
  // At least a quiet and a busy run of each, however small the scale (a sanitizer's): the checks
  // below want both ways exercised, and the busy runs are where writes queue behind epochs.
  for (OrderCrashKind& k : kinds) k.runs = std::max(2u, k.runs);
  if (!run_order_crash_kinds(file(""), "through_", kinds, seed, 1, false, total, posix::detail::InlineEpochs::automatic,
                             true))
    return;
  const posix::FsyncOrderStats after = posix::fsync_order_stats();
  std::printf("[crashsim] order mode with write-through files: %llu kernel writes and %llu kernel syncs of the "
              "layer logged among %llu writes, %llu held writes the order thread wrote through, %llu closes "
              "that waited for the closed epochs alone\n",
              static_cast<unsigned long long>(total.kernel_writes), static_cast<unsigned long long>(total.kernel_syncs),
              static_cast<unsigned long long>(total.logged_writes),
              after.through_writes - before.through_writes, static_cast<unsigned long long>(total.closes_through));
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0x7407) << ")";
  EXPECT_EQ(total.unknown, 0u) << "the layer wrote or synced a file the rig did not open";
  // The suite means something only if both ways ran: the kernel's (writes, syncs, the order
  // thread's held writes, closes of write-through files) and the cache's (engine writes).
  EXPECT_GT(total.kernel_writes, 0u);
  EXPECT_GT(total.kernel_syncs, 0u);
  EXPECT_GT(after.through_writes - before.through_writes, 0u);
  EXPECT_GT(total.closes_through, 0u);
  EXPECT_GT(total.logged_writes, total.kernel_write_events) << "no file went to the cache";
}

// The program ends with exit() (the exit handler's work), its files open: every epoch closed
// before it must be durable when it is done, the open epoch's writes reach the kernel unsynced
// (any subset of them may survive a crash), and the order holds throughout. With write-through
// files, as the layer's defaults have them.
TEST_F(FsyncOrderCrash, EveryCrashStateOfAnExitKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(", programs that exit", 0xe417, scale);
  OrderCrashTally total;
  if (!run_order_crash_kinds(file(""), "exit_", order_crash_kinds({6, 4, 4, 10}, scale), seed, 0, false, total,
                             posix::detail::InlineEpochs::automatic, true, true))
    return;
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0xe417) << ")";
  EXPECT_EQ(total.unknown, 0u) << "the layer wrote or synced a file the rig did not open";
  EXPECT_GT(total.kernel_writes, 0u);
}

// The proof that the write-through runs see the kernel's syncs: every file kept write-through
// (no engine request at all, so every state comes from the kernel calls the layer reported), the
// order thread told to skip the syncs of every second epoch: caught.
TEST_F(FsyncOrderCrash, WriteThroughFilesWhoseSyncsAreSkippedAreCaught) {
  const std::string dir = file("");
  for (bool busy : {false, true}) {
    OrderCrashTally t;
    posix::detail::skip_epoch_syncs_for_testing(2);
    run_order_crash(dir, std::string("broken_through_") + (busy ? "busy_" : "quiet_"), busy, 13,
                    [](OrderProgram& p, std::mt19937_64& r) { journal_workload(p, r, 3); }, t, false,
                    posix::detail::InlineEpochs::never, true, false, kRigAlwaysThrough);
    posix::detail::skip_epoch_syncs_for_testing(0);
    if (HasFatalFailure()) return;
    EXPECT_GT(t.kernel_syncs, 0u);
    EXPECT_EQ(t.logged_writes, t.kernel_write_events) << "a file went to the cache";
    EXPECT_GT(t.stats.violations, 0u) << (busy ? "busy" : "quiet");
    std::printf("[crashsim] order mode, write-through files, the syncs of every second epoch skipped (%s): %llu of "
                "%llu states rejected%s%s\n",
                busy ? "busy" : "quiet", static_cast<unsigned long long>(t.stats.violations),
                static_cast<unsigned long long>(t.stats.unique), t.violations.empty() ? "" : ", e.g. ",
                t.violations.empty() ? "" : t.violations.front().c_str());
  }
}

// Name changes: files made, renamed over others and unlinked between fsyncs (atomic replacement,
// SQLite's journal in DELETE mode), directories made and removed, the directory's table of names judged with the files. The
// layer syncs the directory of each name change with the epoch the change was made in (and of
// each file it made), so no later epoch's writes reach the device before the name is durable.
// With write-through files, as the layer's defaults have them (the directory's syncs are
// reported through the same observer), quiet and busy.
TEST_F(FsyncOrderCrash, EveryCrashStateWithNameChangesKeepsTheEpochOrder) {
  double scale = 0;
  const std::uint64_t seed = order_crash_seed(" with name changes", 0xd1e, scale);
  const std::uint64_t dir_syncs_before = posix::detail::kernel_directory_syncs_for_testing();
  OrderCrashTally total;
  std::vector<OrderCrashKind> kinds = {
      {"replace", std::max(2u, static_cast<unsigned>(12 * scale + 0.5)),
       [](OrderProgram& p, std::mt19937_64& r) { replace_workload(p, r, 8); }},
      {"delete_j", std::max(2u, static_cast<unsigned>(12 * scale + 0.5)),
       [](OrderProgram& p, std::mt19937_64& r) { delete_journal_workload(p, r, 6); }},
      {"dirs", std::max(2u, static_cast<unsigned>(8 * scale + 0.5)),
       [](OrderProgram& p, std::mt19937_64& r) { directories_workload(p, r, 6); }},
  };
  if (!run_order_crash_kinds(file(""), "names_", kinds, seed, 1, false, total, posix::detail::InlineEpochs::automatic,
                             true))
    return;
  const std::uint64_t dir_syncs = posix::detail::kernel_directory_syncs_for_testing() - dir_syncs_before;
  std::printf("[crashsim] order mode with name changes: %llu renames, unlinks, mkdirs and rmdirs, %llu directory syncs of the layer, "
              "%llu of the program\n",
              static_cast<unsigned long long>(total.name_changes), static_cast<unsigned long long>(dir_syncs),
              static_cast<unsigned long long>(total.program_dir_syncs));
  EXPECT_EQ(total.stats.violations, 0u) << "seed " << seed << " (replay with TAI_TEST_SEED=" << (seed ^ 0xd1e) << ")";
  EXPECT_EQ(total.unknown, 0u) << "the layer wrote or synced a file or directory the rig did not open";
  EXPECT_GT(total.name_changes, 0u);
  EXPECT_GT(dir_syncs, 0u);
  EXPECT_GT(total.program_dir_syncs, 0u);
}

// The proof that the suite sees a name change overtaken by a later epoch: the order thread told
// to leave the directories unsynced (the layer before it synced them): caught, quiet and busy.
TEST_F(FsyncOrderCrash, NameChangesWhoseDirectoryIsNotSyncedAreCaught) {
  const std::string dir = file("");
  const std::vector<std::pair<const char*, std::function<void(OrderProgram&, std::mt19937_64&)>>> cases = {
      {"replace", [](OrderProgram& p, std::mt19937_64& r) { replace_workload(p, r, 4); }},
      // Without the program's own syncs of the directory, which would cover the names here.
      {"delete_j", [](OrderProgram& p, std::mt19937_64& r) { delete_journal_workload(p, r, 3, false); }},
      {"dirs", [](OrderProgram& p, std::mt19937_64& r) { directories_workload(p, r, 4); }},
  };
  for (const auto& [name, body] : cases)
    for (bool busy : {false, true}) {
      OrderCrashTally t;
      posix::detail::skip_directory_syncs_for_testing(true);
      run_order_crash(dir, std::string("broken_names_") + name + (busy ? "_busy_" : "_quiet_"), busy, 17, body, t, false,
                      posix::detail::InlineEpochs::automatic, true);
      posix::detail::skip_directory_syncs_for_testing(false);
      if (HasFatalFailure()) return;
      EXPECT_GT(t.stats.violations, 0u) << name << (busy ? ", busy" : ", quiet");
      std::printf("[crashsim] order mode, directories not synced, %s (%s): %llu of %llu states rejected%s%s\n", name,
                  busy ? "busy" : "quiet", static_cast<unsigned long long>(t.stats.violations),
                  static_cast<unsigned long long>(t.stats.unique), t.violations.empty() ? "" : ", e.g. ",
                  t.violations.empty() ? "" : t.violations.front().c_str());
    }
}

// --- the oracle on hand-made logs ------------------------------------------------------------

struct HandLog {
  CrashLog log;
  std::vector<EpochOp> ops;
  std::uint64_t seq = 1;

  HandLog() {
    log.paths = {"a", "b"};
    log.initial = {{}, {}};
  }
  // A program write and the engine's write of the same bytes; returns the bytes.
  std::vector<unsigned char> write(std::uint32_t f, std::uint64_t off, std::size_t n, unsigned epoch, bool engine = true) {
    auto bytes = order_crash_bytes(n, seq * 31 + f);
    EpochOp op;
    op.kind = EpochOp::Kind::write;
    op.path = log.paths[f];
    op.offset = off;
    op.data = bytes;
    op.epoch = epoch;
    op.begin = seq++;
    op.end = seq++;
    ops.push_back(op);
    if (engine) engine_write(f, off, bytes);
    return bytes;
  }
  void engine_write(std::uint32_t f, std::uint64_t off, const std::vector<unsigned char>& bytes) {
    engines::CrashEvent e;
    e.kind = engines::CrashEvent::Kind::write;
    e.file = f;
    e.offset = off;
    e.data = bytes;
    e.result = static_cast<std::int64_t>(bytes.size());
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    log.events.push_back(e);
  }
  void engine_sync(std::uint32_t f) {
    engines::CrashEvent e;
    e.kind = engines::CrashEvent::Kind::sync;
    e.op = Op::fsync;
    e.file = f;
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    log.events.push_back(e);
  }
  void sync_point(unsigned required) {
    EpochOp op;
    op.kind = EpochOp::Kind::sync_point;
    op.required_epoch = required;
    op.begin = seq++;
    op.end = seq++;
    op.label = "sync_now";
    ops.push_back(op);
  }
  CrashStats check(std::vector<std::string>* first = nullptr, unsigned sector = 512) {
    EpochOracle oracle(log, ops);
    CrashStateOptions opt;
    opt.sector_size = sector;
    return engines::enumerate_multi_crash_states(log, opt, oracle, [&](const MultiCrashState& s, const auto& lines) {
      if (first && first->empty()) first->push_back(lines.front() + " / " + s.describe());
    });
  }
};

TEST(FsyncOrderCrashOracle, AWriteOfEpochTwoDurableBeforeOneOfEpochOneIsAViolation) {
  // Program: a (epoch 1), b (epoch 2). Engine: b written and synced first, a written after it and
  // never synced: a crash after b's sync finds epoch 2 without epoch 1.
  HandLog h;
  h.write(0, 0, 64, 0);
  h.engine_sync(0);
  const auto a1 = h.write(0, 512, 512, 1, false);
  h.write(1, 0, 512, 2);
  h.engine_sync(1);
  h.engine_write(0, 512, a1);
  std::vector<std::string> first;
  const CrashStats s = h.check(&first);
  EXPECT_GT(s.violations, 0u);
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first[0].find("no epoch k explains"), std::string::npos) << first[0];
  std::printf("[crashsim] order-mode oracle, hand-made broken log: %llu of %llu states rejected, e.g. %s\n",
              static_cast<unsigned long long>(s.violations), static_cast<unsigned long long>(s.unique),
              first[0].c_str());
}

TEST(FsyncOrderCrashOracle, TheSameWritesInEpochOrderPass) {
  HandLog h;
  h.write(0, 0, 64, 0);
  h.engine_sync(0);
  h.write(0, 512, 512, 1);
  h.engine_sync(0);
  h.write(1, 0, 512, 2);
  h.engine_sync(1);
  const CrashStats s = h.check();
  EXPECT_EQ(s.violations, 0u);
  EXPECT_GE(s.unique, 4u);
}

TEST(FsyncOrderCrashOracle, OverwritesTornSectorsAndTruncationsWithinTheRule) {
  // Epoch 0 writes two sectors of a; epoch 1 overwrites them (torn: any sector of the new write
  // with the old one's other), writes b; epoch 2 truncates a (logged as a truncate) and writes b
  // again. Every state of an engine that syncs each epoch before the next is fine.
  HandLog h;
  h.write(0, 0, 1024, 0);
  h.engine_sync(0);
  h.write(0, 0, 1024, 1);
  h.write(1, 0, 700, 1);
  h.engine_sync(0);
  h.engine_sync(1);
  EpochOp t;
  t.kind = EpochOp::Kind::truncate;
  t.path = "a";
  t.epoch = 2;
  t.begin = h.seq++;
  t.end = h.seq++;
  h.ops.push_back(t);
  engines::CrashEvent e;
  e.kind = engines::CrashEvent::Kind::truncate;
  e.file = 0;
  e.submit_seq = e.complete_seq = t.end;
  h.log.events.push_back(e);
  h.write(1, 300, 900, 2);
  const CrashStats s = h.check();
  EXPECT_EQ(s.violations, 0u);
  EXPECT_GE(s.unique, 8u);
}

TEST(FsyncOrderCrashOracle, AStaleByteOverADurableNewerOneIsAViolation) {
  // Epoch 1's overwrite durable (sync_now returned), then the engine writes epoch 0's old bytes back
  // over it. Without the sync point k = 1 would explain it (epoch 1 may be partly present).
  HandLog h;
  const auto old_bytes = h.write(0, 0, 512, 0);
  h.engine_sync(0);
  h.write(0, 0, 512, 1);
  h.engine_sync(0);
  h.sync_point(2);  // sync_now returned: epochs 0 and 1 durable
  h.engine_write(0, 0, old_bytes);
  h.engine_sync(0);
  EXPECT_GT(h.check().violations, 0u);
}

TEST(FsyncOrderCrashOracle, AWriteMissingAfterSyncNowIsAViolation) {
  // One epoch, never synced by the engine, but sync_now returned: the state without the write
  // breaks durability (no order is broken: only the sync point rejects it).
  HandLog h;
  h.write(0, 0, 512, 0);
  h.sync_point(1);
  h.engine_sync(1);  // a later event, so that a crash point lies after the sync point
  std::vector<std::string> first;
  const CrashStats s = h.check(&first);
  EXPECT_GT(s.violations, 0u);
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first[0].find("require k >= 1"), std::string::npos) << first[0];
}

TEST(FsyncOrderCrashOracle, BytesNobodyWroteAreAViolation) {
  HandLog h;
  h.write(0, 0, 512, 0);
  h.engine_write(0, 0, std::vector<unsigned char>(512, 0x5A));
  EXPECT_GT(h.check().violations, 0u);
}

TEST(MultiCrashStates, OneCrashPointForEveryFileAndEachFileItsOwnDurableCut) {
  // a: one write, synced; b: two writes of one sector each, not synced. Points: 0 (a's write in
  // flight: a empty or whole), 2 (a durable, b's first write: 1 new state), 3 (both of b's:
  // 2 new), 1 and 4 repeat earlier ones. Once a's sync completed, a is whole in every state.
  HandLog h;
  h.write(0, 0, 512, 0);
  h.engine_sync(0);
  h.write(1, 0, 512, 1);
  h.write(1, 512, 512, 1);
  struct Counter : engines::MultiCrashChecker {
    std::size_t after_sync = 0;
    void check(const MultiCrashState& s, std::vector<std::string>&) override {
      if (s.point < 2) return;
      ++after_sync;
      EXPECT_EQ((*s.images)[0].size(), 512u) << "a's synced write is durable at point " << s.point;
    }
  } counter;
  const CrashStats s = engines::enumerate_multi_crash_states(h.log, CrashStateOptions{}, counter);
  EXPECT_EQ(s.unique, 5u);
  EXPECT_EQ(counter.after_sync, 3u);
  EXPECT_EQ(s.violations, 0u);
}

}  // namespace
}  // namespace tai::test

// tai/controller.hpp - tai::Controller: the workers, the rounds, the quota; opens tai::Files.
//
//     tai::ControllerOptions opts;                              // defaults; set only what differs
//     opts.workers = 2;
//     tai::Controller ctl(opts);
//     auto f = ctl.open<tai::BTreeDefault>("out.dat", tai::Open::write | tai::Open::create);
//     if (!f) { std::cerr << f.error().message << '\n'; return 1; }
//     f->write(0, buf, n);
//     ctl.submit([] { compress_next_chunk(); });                // any function, on a worker
//
// How it works (DESIGN section 3, the TAI paper sections 2.5.4-2.5.7). Each worker has a Pending
// queue (Boost.Lockfree, bounded, multi-producer): external requests enter there only, and every
// request of one file goes to the same worker (the file's home), which starts them on the file's
// tree in order. The tree turns a request into node-local steps. Steps are queued by lane (a hash
// of the node): in round r a worker runs the steps queued for its lanes in round r-1 (Ready) and
// the steps they emit are queued for round r+1 (Waiting); between rounds the master runs a
// barrier and Ready and Waiting swap. A lane is run by one worker per round, so two steps of the
// same node never run at once and each node sees its steps in emission order; a worker that
// finishes its lanes steals unclaimed ones (a whole lane at a time, which keeps that true).
// Round kinds: normal; recycle (normal plus evicting the oldest cache blocks until the quota is
// back under its weak limit); flush (when idle for flush_idle_ns: write back the files holding
// the most dirty data, at least half of it each time); idle (the master sleeps on an eventfd, the
// others on the barrier's futex: no CPU used); close (the destructor: write back everything, stop).
// Synchronous engines run inside the step that issues the request; asynchronous engines (libaio,
// uring) are submitted to at the end of a worker's round part and reaped inside the rounds.
// Waits spin for spin_ns, then sleep.
//
// Thread-safety: open, submit, flush and stats are safe from any thread at once. The destructor
// (and shutdown()) must not race with other calls on the controller itself; Files and Receipts
// may outlive it (their later operations are rejected).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tai/btree.hpp"
#include "tai/controller_stats.hpp"
#include "tai/engine.hpp"
#include "tai/error.hpp"
#include "tai/file.hpp"
#include "tai/receipt.hpp"

namespace tai {

struct ControllerOptions {
  /// Worker threads (0: std::thread::hardware_concurrency()).
  unsigned workers = 0;
  /// Cache quota in bytes, shared by every file of this controller (DESIGN "Quota"). Above the
  /// weak limit recycle rounds write back and evict the oldest blocks; the strict limit is
  /// never exceeded (requests that would need more go to the engine uncached).
  /// weak_quota must not exceed strict_quota: when it does (say only strict_quota was lowered
  /// and the default weak_quota stayed), the constructor uses strict_quota / 2 (the defaults'
  /// ratio), prints one line on stderr naming both values and the one used, and options()
  /// returns the corrected value.
  std::uint64_t weak_quota = std::uint64_t{256} << 20;
  std::uint64_t strict_quota = std::uint64_t{512} << 20;
  /// Clean budget (tai/quota.hpp): while the cache holds more than this many bytes of clean
  /// blocks, clean blocks whose bytes are synced go back to the quota's pool (at each good fsync),
  /// and the next blocks reuse their memory. Quota::kUnlimited: clean blocks stay to the weak limit.
  /// Measured in docs/results/cache-cost.md ("Clean budget and huge-page chunks").
  std::uint64_t clean_budget = std::uint64_t{16} << 20;
  /// Carve cache blocks of 4 KiB to 1 MiB from 2 MiB chunks advised for transparent huge pages
  /// (tai/quota.hpp, "Huge-page chunks"; used only when the weak quota is at least 2 MiB), and
  /// map the arena that holds large write copies the same way.
  bool huge_pages = true;
  /// How long a waiting thread spins before it sleeps (workers at the barrier, receipts'
  /// wait() and wait_any()). Spinning costs CPU the application might want; sleeping costs a
  /// wake-up, paid by the worker that finishes the task (docs/controller_options.md).
  std::int64_t spin_ns = 20'000;
  /// Run the master and the workers under SCHED_BATCH (Linux): the same share of the CPU as
  /// SCHED_OTHER, but a worker that wakes while every CPU runs the program's threads does not
  /// preempt one of them; it runs when a CPU goes idle (a thread that waits for TAI leaves its
  /// CPU idle) or at the running thread's next scheduling point, a few milliseconds at most. For
  /// programs whose compute threads fill every core and must not be interrupted (an OpenMP team
  /// waits at its barrier for the thread a worker preempted). Off by default: in the image
  /// workload on 2 cores it cut the involuntary context switches by 10-25 % and left the
  /// throughput where it was (docs/controller_options.md). Best effort: a refusal leaves the
  /// workers with the policy of the thread that made the controller, as does false.
  bool batch_scheduling = false;
  /// How late a write of the program may wake a sleeping master (0: at once; default 2 ms, a
  /// few records of a compute loop, short beside any fsync interval). Within this delay
  /// a write's submission arms a timer instead of waking the master, so a stream of writes
  /// costs one wake-up per delay, not one per write; an fsync, a read, a task, a receipt's
  /// wait() or wait_any(), a full queue and a full write-copy budget still wake it at once. A
  /// write therefore reaches its engine at most this much later when nothing else wakes the
  /// master (a CompletionQueue's wait does not: its writes finish within the delay).
  std::int64_t write_wake_delay_ns = 2'000'000;
  /// How long the master spins for completions of asynchronous engines before it sleeps on
  /// their eventfds. Short by default: device latencies are tens of microseconds and more, and
  /// spinning takes the CPU the application and the kernel's completion work need.
  std::int64_t io_spin_ns = 2'000;
  /// The most requests a round hands to an asynchronous engine in one submit() call (one
  /// io_uring_enter or io_submit): small batches reach the device sooner. 0 is taken as 1.
  /// Why 4: docs/controller_options.md.
  unsigned engine_submit_batch = 4;
  /// Idle this long with dirty data in the cache: start flush rounds (each writes back at least
  /// half of what is dirty). Negative: never flush while idle (only fsync, close, flush(),
  /// recycling and shutdown write back).
  std::int64_t flush_idle_ns = 2'000'000;
  /// The engine of open() calls that name none, or "auto": posix for buffered files and the
  /// best asynchronous engine for O_DIRECT files (uring, else libaio, else posix). A buffered
  /// write is a copy into the page cache that the workers already overlap with the program, so
  /// an asynchronous engine only adds its submissions and wake-ups there; name "uring" (or
  /// "libaio") to use it for every file.
  std::string engine = "auto";
  /// Options for the engines the controller makes (depth = requests in flight per engine).
  EngineOptions engine_options = [] {
    EngineOptions o;
    o.depth = 256;
    return o;
  }();
  /// Tree options for open() calls that give none. Their write-around rule is on (a write of a
  /// page or more over a range the tree holds nothing of goes to the engine uncached,
  /// BTreeOptions::write_around_bytes); 0 there caches every write the quota allows. A write
  /// sent around is in the kernel, not in TAI: its engine error comes back on its own receipt,
  /// and after a failed fsync TAI has no copy to write again, so the file's later fsyncs fail
  /// (as they would without TAI); cached data is written again and can recover.
  BTreeOptions tree_options;
  /// Lanes of steps per worker (stealing moves one lane at a time).
  unsigned lanes_per_worker = 8;
  /// Capacity of each worker's queue from each submitting thread; a submitter finding it full
  /// waits (back-pressure). The workers' own pushes and the submitters past the 64th share a
  /// smaller queue per worker (at most 1,024 entries; a worker that finds it full never waits).
  unsigned pending_capacity = 16384;
  /// The most bytes of write data held for writes not yet finished: File::write's copies (as
  /// allocated: writes up to 4 KiB round up to 4 KiB, up to 16 KiB to 16 KiB) and moved-in
  /// Buffers, each counted from submission until its operation ends (done, failed or
  /// refused). A thread whose write would pass the budget waits in File::write (spin, then
  /// sleep) until finished writes make room.
  /// A write is always admitted when nothing is held (a write larger than the budget goes
  /// alone); a worker thread of this controller never waits (it would hold up the rounds that
  /// make room). 0 admits one write at a time. Under a budget of 4 MiB or more, each submitting
  /// thread counts its small writes (up to 32 KiB) against a credit of at most 32 KiB it takes
  /// from the budget ahead (the credits of all threads at most a sixteenth of the budget, and a
  /// write is admitted when nothing but credit is held): a small write then costs no shared
  /// atomic operation. The copies of finished writes above 16 KiB are
  /// kept for the next large writes (their pages stay resident: no fault per write) while the
  /// kept bytes plus those of unfinished writes fit this budget. stats(): write_copy_bytes,
  /// write_copy_waits, write_copy_pooled, write_copy_reuses, write_copy_allocations.
  /// Why 32 MiB: docs/controller_options.md.
  std::uint64_t write_copy_budget = std::uint64_t{32} << 20;
  /// Caller writes: a write of at least the tree's write-around size (BTreeOptions::
  /// write_around_bytes; on BTreeTrivial any write) to a buffered file (not O_DIRECT) on a
  /// synchronous engine (posix, cstdio, fstream, null; so "auto" for buffered files) whose tree
  /// holds nothing, while no operation of the file but fsyncs is pending or running, is carried
  /// out by the submitting thread inside File::write(offset, src, n): from the caller's buffer
  /// straight to the engine, as the worker would send it, without the copy, the hand-off and
  /// the wake-up. Its receipt is finished when write() returns, with the engine's result.
  /// Never from one of the controller's own threads (a continuation or task function: those
  /// must not block). Every promise holds as on the workers' path: order (it begins only when
  /// every earlier operation of the file but fsyncs has finished; a later one waits for it),
  /// durability (the sync epoch stamp of an uncached write), errors (on its receipt, the
  /// engine's errno; a short write is EIO). What changes: write() takes as long as the
  /// engine's write (a copy into the page cache, which the kernel may throttle when dirty
  /// pages pile up), which a program with idle cores might rather give to a worker: set false
  /// to hand every write over. stats().caller_writes counts them.
  /// Taken only once at least caller_write_threads threads have submitted to the controller
  /// (see there). Measured in docs/results/cache-cost.md ("Caller writes").
  bool caller_writes = true;
  /// Caller writes are taken only once at least this many threads have submitted operations to
  /// the controller; 0: as many as the CPUs the process may run on (sched_getaffinity) at the
  /// controller's start. Why: with a CPU to spare, handing a write to a worker overlaps it with
  /// the program's computing, which is worth more than the copy and the wake-up it costs (the
  /// image workload at 1 compute thread on 2 CPUs: tai-def 1.04x posix with caller writes,
  /// more without); when the program's threads fill every CPU, the worker's copy and wake-up
  /// take a compute thread's time, and the caller's write is cheaper. The count is of threads
  /// that ever submitted, not of those busy now: a program whose threads come and go (one
  /// that submitted once still counts) may take caller writes with a CPU idle. 1: always.
  unsigned caller_write_threads = 0;
  /// Keep per-kind latency histograms (two clock reads per timed request).
  bool latency_histograms = true;
  /// Time one request in this many, per submitting thread (1: every request); flushes and
  /// closes are always timed. Why 8: docs/controller_options.md.
  unsigned latency_sample_every = 8;
};

/// What shutdown found: one line per failure (a file whose data could not be written back,
/// closed with an error, ...). Empty means nothing was lost.
struct ShutdownReport {
  std::vector<std::string> failures;
  bool ok() const noexcept { return failures.empty(); }
  std::string to_string() const;
};

namespace detail {
class ControllerCore;
using TreeFactory = TreePtr (*)(EngineFile* file, Quota& quota, const BTreeOptions& options);
// A file's tree is a TreeCore the controller owns directly (FileCore::tree), not a BTree handle:
// its rounds call the core with no forwarding. Tree's shape is all this needs from the template
// (tai/btree.hpp's factory takes it at run time), so this header never sees the tree's state.
template <class Tree>
TreePtr make_tree(EngineFile* file, Quota& quota, const BTreeOptions& options) {
  return make_tree_core(Tree::kLevels, Tree::kBits.data(), file, quota, options);
}
template <unsigned... Bits>
std::string tree_name(const BTree<Bits...>*) {
  std::string s = "BTree<";
  const char* sep = "";
  for (unsigned b : {Bits...}) {
    s += sep;
    s += std::to_string(b);
    sep = ",";
  }
  return s + ">";
}
struct OpenRequest {
  const std::string* path;
  OpenMode mode;
  std::string_view engine;
  const BTreeOptions* tree_options;
  TreeFactory factory;
  std::string tree;
};
Receipt controller_submit(ControllerCore& core, Task* t);
}  // namespace detail

/// What Controller::open() may be told besides the path and the mode. C++17 has no designated
/// initializers: set the members you need on a default-constructed value.
///
///     tai::OpenOptions how;
///     how.engine = "uring";
///     how.tree_options = tai::BTreeOptions{};
///     how.tree_options->inline_path = false;            // for example
struct OpenOptions {
  /// The engine, by name (empty or "auto": ControllerOptions::engine).
  std::string engine;
  /// This file's tree options (unset: ControllerOptions::tree_options).
  std::optional<BTreeOptions> tree_options;
};

/// Thread-safety: see the file comment.
class Controller {
 public:
  explicit Controller(const ControllerOptions& options = {});
  /// shutdown(), then prints its report to stderr when it is not ok(). Files still open are
  /// closed (their data written back) first. Destroyed from one of its own tasks (a submitted
  /// function, a continuation or a hook), the shutdown cannot join the worker it runs on: it says
  /// so on stderr and goes on on a thread of its own, which frees the controller's state after
  /// that task has returned (the destructor itself returns at once).
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  /// Opens `path` with `mode` under a cache tree of shape Tree, on the engine and with the tree
  /// options `how` names (unset: the controller's, ControllerOptions::engine and
  /// ControllerOptions::tree_options). The engine's open runs on the calling thread, so a bad
  /// path, a refused mode or an unavailable engine is an Error right here (with the reason).
  /// Opening a path that is still open or closing in this controller is allowed: operations of
  /// the new handle wait until the earlier handle's close has written its data back, so they
  /// see all of it. A truncating open (Open::truncate) of a path whose earlier handle is still
  /// closing blocks until that close has finished, so the old bytes cannot land after the
  /// truncation; from a task of this controller, where that wait could deadlock, it is an Error
  /// (resource_deadlock_would_occur). Thread-safe.
  template <class Tree = BTreeDefault>
  Result<File> open(const std::string& path, OpenMode mode, const OpenOptions& how) {
    detail::OpenRequest req{&path,
                            mode,
                            how.engine,
                            how.tree_options ? &*how.tree_options : nullptr,
                            &detail::make_tree<Tree>,
                            detail::tree_name(static_cast<const Tree*>(nullptr))};
    return open_file(req);
  }
  /// The short forms: the controller's default engine, or the engine named `engine` ("posix",
  /// "uring", a name given to add_engine, ...), with the controller's tree options.
  template <class Tree = BTreeDefault>
  Result<File> open(const std::string& path, OpenMode mode) {
    return open<Tree>(path, mode, OpenOptions{});
  }
  template <class Tree = BTreeDefault>
  Result<File> open(const std::string& path, OpenMode mode, std::string_view engine) {
    OpenOptions how;
    how.engine = std::string(engine);
    return open<Tree>(path, mode, how);
  }

  /// Runs fn() on a worker (as soon as one takes it from its Pending queue). fn must fit 64
  /// bytes; an exception thrown by it fails the receipt. Rejected after shutdown began.
  template <class F>
  Receipt submit(F&& fn) {
    detail::Task* t = detail::acquire_task();
    t->kind = detail::TaskKind::function;
    t->fn = detail::InplaceFunction<void(), 64>(std::forward<F>(fn));
    return detail::controller_submit(*core_, t);
  }

  /// Registers `engine` under `name` for this controller's open() calls: test engines (fault,
  /// recording) or an engine made with special options. The controller owns it; an engine that
  /// is asynchronous is driven by the rounds like the built-in ones. False when `name` is taken
  /// (every built-in name counts as taken once used).
  bool add_engine(std::string name, std::unique_ptr<Engine> engine);

  /// Writes back every dirty block of every open file; the receipt finishes when all of it has
  /// reached the engines (not an fsync) and fails with the first error.
  Receipt flush();

  /// Closes every open file (writing its data back), waits for every task, stops the workers.
  /// Returns what failed. Later calls return an empty report; later submissions are rejected.
  /// Called from a task of this controller it is refused (the workers cannot be joined from one
  /// of them): the report says so and the controller keeps running.
  ShutdownReport shutdown();

  /// A snapshot of the counters (see ControllerStats). Thread-safe.
  ControllerStats stats() const;
  /// The number of worker threads. Thread-safe.
  unsigned workers() const noexcept;
  /// The options in use: as given to the constructor, with the corrections it made (a weak
  /// quota above the strict one, pending_capacity clamped to [64, 65534]). Thread-safe (never
  /// changes after construction).
  const ControllerOptions& options() const noexcept;
  /// How the default engines were chosen, e.g. "auto: posix for buffered files, for O_DIRECT
  /// files auto -> uring (the best engine; available here)"; the engine's name when one was named.
  const std::string& engine_note() const noexcept;

 private:
  Result<File> open_file(const detail::OpenRequest& req);
  std::unique_ptr<detail::ControllerCore> core_;
};

}  // namespace tai

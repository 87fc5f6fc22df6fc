// src/controller/core.hpp - the controller's private parts (not installed).
//
// tai/controller.hpp explains the design; this header names its parts and says who touches
// what. The sources beside it each hold one concern:
//   api.cpp         tai::Controller and ShutdownReport: the public handle over ControllerCore
//   file.cpp        tai::File: submission checks, copies, the closed check
//   registry.cpp    FileRegistry (open files, home worker, reopen predecessor, retirement) and
//                   the per-thread file-reference reserve
//   engine_table.cpp EngineTable: the controller's engines, found by name or by file
//   submit.cpp      opening, inboxes, push, the doorbell, submission stamps
//   copy_budget.cpp CopyBudget: back-pressure on write copies
//   gates.cpp       admission, begin, the per-file gates (hook, barrier, close) and their progress
//   completion.cpp  what happens when an operation or task finishes: results, statistics,
//                   flush aggregates, batched file releases
//   engine_io.cpp   the engine driver: inline execution, async submission and reaping
//   rounds.cpp      a worker's part of a round, lanes and stealing, the master's decisions, the
//                   follower and master loops
//   lifecycle.cpp   construction, flush, close, shutdown, statistics
//
// Who touches what:
//  * Worker::inbox[p] (Boost.Lockfree spsc_queue): application thread p's Pending queue for
//    that worker; pushed by that thread only, popped by the worker. One per (thread, worker), so
//    a submission costs no compare-and-swap and each thread's requests stay in its order.
//  * Worker::pending (Boost.Lockfree queue, MPMC): the Pending queue for worker threads (tasks
//    submitted by tasks and continuations) and for application threads beyond kMaxProducers.
//  * Worker::out[parity][lane]: the steps a worker emitted for a lane. Written only by that
//    worker during a round; in the next round read and cleared by whichever worker claimed the
//    lane. The round barrier orders the two (release by RoundState::arrive(), acquire by the
//    master, release by the master's store of Worker::go, acquire by the followers).
//  * FileCore gate/held/close state: the file's home worker only (and the master while every
//    worker is parked at the barrier, in decide()).
//  * EngineSlot (async engines): submit/reap under its mutex, by any worker.
//  * FileRegistry (files, by path, by tree) and tree destruction: under the registry's mutex.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tai/controller.hpp"
#include "src/btree/tree_core.hpp"
#include "src/detail/futex.hpp"
#include "src/detail/lockfree_queue.hpp"
#include "src/controller/copy_arena.hpp"
#include "src/detail/task_pool.hpp"

namespace tai::detail {

enum class RoundKind : std::uint8_t { normal, recycle, flush, close, stop };

/// A counter with one writer (its worker) and any number of readers (stats()): a relaxed load
/// and store, no read-modify-write, so counting costs no locked instruction.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void raise_to(std::uint64_t n) noexcept {
    if (n > v.load(std::memory_order_relaxed)) v.store(n, std::memory_order_relaxed);
  }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

inline unsigned log2_bucket(std::uint64_t ns) noexcept {
  if (ns == 0) return 0;
  const unsigned b = 63u - static_cast<unsigned>(__builtin_clzll(ns));
  return std::min<unsigned>(b, LatencyHistogram::kBuckets - 1);
}

/// Spins (cpu_relax) until done() holds or spin_ns have passed; true when done() held. The spin
/// half of the controller's own spin-then-sleep waits (followers on `go`, the master on
/// `arrived`, writers on the copy budget): never yields, the waits are between TAI's threads.
template <class Done>
bool spin_until(std::int64_t spin_ns, Done&& done) {
  const std::int64_t until = monotonic_ns() + spin_ns;
  return spin_until_time(until, until, std::forward<Done>(done));
}

extern const char* const kClosedReason;
extern const char* const kShutdownReason;
/// Why an fsync or a close fails with the tree's sync error (TreeCore::sync_error).
extern const char* const kUnrecoveredSync;
/// Why a flush fails when one of its files' write-back did.
extern const char* const kFlushPartFailed;

class Worker;
class ControllerCore;

// ---------------------------------------------------------------------------------------------
// Engines

/// One engine instance of a controller, with what the rounds need to drive it.
struct EngineSlot {
  std::string name;
  std::unique_ptr<Engine> engine;
  SyncEngine* sync = nullptr;  // execute() inline, from any worker, no lock
  bool async = false;          // submitted and reaped inside the rounds, under mu
  std::mutex mu;               // async engines; and engines that are neither (driven inline)
  std::vector<Step> conts;     // continuation of each request in flight, indexed by user_data
  std::vector<std::uint32_t> free_conts;
  // Requests at the engine. Written under mu; read by the master in decide() after the barrier
  // (every worker's writes happen-before it) or under mu. Relaxed.
  std::atomic<std::uint64_t> in_flight{0};
};

/// The controller's engines: a fixed table, so that the rounds read it without a lock.
/// Thread-safety: add() and find_or_make() are safe from any thread (under the table's mutex);
/// count(), operator[] and owning() take no lock: a slot is published by the release store of
/// the count (acquire loads pair with it) and never moves or goes before the controller does.
class EngineTable {
 public:
  static constexpr unsigned kMax = 32;
  /// The engines `open()` uses when the caller names none (or "auto"), for buffered files and
  /// for O_DIRECT ones. Set at construction; the same name unless the controller's engine is
  /// "auto" (see ControllerOptions::engine).
  std::string default_name;
  std::string default_direct_name;

  /// Adds an engine under `name`; false when the name is taken, the table is full or engine is
  /// null.
  bool add(std::string name, std::unique_ptr<Engine> engine);
  /// The slot of `name` (empty or "auto": the default for a buffered or, `direct`, an O_DIRECT
  /// file), made with `options` on first use.
  Result<EngineSlot*> find_or_make(std::string_view name, const EngineOptions& options, bool direct = false);
  /// The slot whose engine opened f (nullptr: none).
  EngineSlot* owning(const EngineFile& f) const noexcept;
  unsigned count() const noexcept { return count_.load(std::memory_order_acquire); }
  EngineSlot& operator[](unsigned i) const noexcept { return *slots_[i]; }
  /// Requests at the asynchronous engines (relaxed loads: see EngineSlot::in_flight).
  std::uint64_t async_in_flight() const noexcept;

 private:
  EngineSlot* find_locked(const std::string& name) const noexcept;
  alignas(64) mutable std::mutex mu_;
  std::array<std::unique_ptr<EngineSlot>, kMax> slots_;
  std::atomic<unsigned> count_{0};
};

// ---------------------------------------------------------------------------------------------
// Files

/// A file's traffic word (FileCore::traffic): its tasks in flight and its caller writes in
/// progress, in one atomic word, so that a submitter's check and a worker's wait are each one
/// read-modify-write or load on it, with no lock.
///
/// Caller writes (ControllerOptions::caller_writes): a large write to a file on a synchronous
/// engine whose tree holds nothing goes from the submitting thread's buffer straight to the
/// engine, as the worker would send it (the write-around rule), without the copy, the hand-off
/// and the wake-up. That is safe only while no other operation of the file is pending or
/// running, except fsyncs (a write submitted after an fsync may reach the file before that
/// fsync's engine sync; the fsync then covers more, never less). So:
///  * every task of the file but fsync/fdatasync (writes, reads, hooks, barriers, close, the
///    internal write-back, evict and collect) is counted from before its push until
///    ControllerCore::finish; fsyncs are not counted (nothing waits for them here);
///  * a caller write begins with a compare-and-swap that adds one caller only while the task
///    count is zero and neither kClosing nor kReopening is set (acquire: every finished task's
///    effects on the tree, and the tree pointer itself, are visible), and only then looks at
///    the tree; it ends with a release subtraction;
///  * a worker that admits a counted task first waits until no caller write is in
///    progress (acquire loads, pairing with that subtraction). The count was raised before the
///    push that gave the worker the task, so no caller write can begin after the worker's wait.
///    The wait is one buffered engine write at most (caller writes are never made to direct
///    files), and it holds that worker's other files too: the price of not parking the task.
///    Past a short spin the worker sleeps on FileCore::caller_ends (a kernel throttling dirty
///    pages can hold a write for hundreds of milliseconds, which a spin would take from the
///    program's threads); a caller write that ends while a worker sleeps or is about to wakes it.
///    The handshake is Dekker's: the worker adds itself to caller_sleepers and then loads the
///    word, the caller subtracts from the word and then loads caller_sleepers, all seq_cst, so
///    at least one of the two sees the other.
/// kClosing is set for good when the file starts closing (its close task then waits for the
/// caller writes in progress before the tree is retired). kReopening is set when the file was
/// opened while an earlier handle of its path was still closing, and cleared by the home
/// worker once it replaced the tree (Worker::progress).
/// The task count has the top 46 bits: tasks in flight cannot wrap it.
struct FileTraffic {
  static constexpr std::uint64_t kCallerOne = 1;
  static constexpr std::uint64_t kCallerMask = 0xFFFF;  // bits 0-15: caller writes in progress
  static constexpr std::uint64_t kClosing = std::uint64_t{1} << 16;
  static constexpr std::uint64_t kReopening = std::uint64_t{1} << 17;
  static constexpr std::uint64_t kOtherOne = std::uint64_t{1} << 18;  // bits 18-63: counted tasks
  static constexpr std::uint64_t kOtherMask = ~((std::uint64_t{1} << 18) - 1);
};

/// One open (or closing) file: the handle's target and the home worker's state for it.
class FileCore {
 public:
  ~FileCore();
  std::string path;  // as given to open()
  std::string key;   // canonical path: the registry key (reopen detection)
  std::string tree_name;
  std::string engine_name;  // a copy: status() may outlive the controller (and its engines)
  OpenMode mode;            // as given to open(): submissions check reads and writes against it
  ControllerCore* ctl = nullptr;
  EngineSlot* slot = nullptr;
  std::unique_ptr<EngineFile> efile;  // reset by the close, before the controller can go
  TreePtr tree;                       // reset by the close, under the registry's mutex
  TreeFactory factory = nullptr;      // to remake the tree once a predecessor has closed
  BTreeOptions tree_options;
  std::uint64_t tree_id = 0;
  unsigned home = 0;

  // References: the handle, the registry (until fully closed), every task of the file in
  // flight, and the unused ones in submitting threads' reserves (FileRefReserve). acq_rel on
  // release: the last releaser deletes.
  alignas(64) std::atomic<std::uint32_t> refs{0};
  // close()/detach() happened (or shutdown closed it). acq_rel exchange: one close task only;
  // acquire loads in submissions (a submission that sees it false may still race with the
  // close: the home worker then rejects it, see Worker::begin()).
  alignas(64) std::atomic<bool> closed{false};
  // The close finished: tree and engine file are gone. Release store by the home worker,
  // acquire loads (a successor file's gate; status()).
  std::atomic<bool> fully_closed{false};
  // errno of the tree's unrecovered engine-sync failure (TreeCore::sync_error, which decides
  // fsync results and close), mirrored at each fsync's completion for status(), which may come
  // after the tree is gone. Relaxed: informational.
  std::atomic<int> sticky{0};
  bool detached = false;  // written before the close task is pushed (the queue publishes it)
  // See FileTraffic. Its own line: submitting threads and workers both write it.
  alignas(64) std::atomic<std::uint64_t> traffic{0};
  // The futex a worker sleeps on while it waits for caller writes (FileTraffic): bumped by a
  // caller write that ends while caller_sleepers is not 0 (which a worker raises before it
  // checks the word, and lowers after it woke). On traffic's line: the caller's end reads it.
  std::atomic<std::uint32_t> caller_ends{0};
  std::atomic<std::uint32_t> caller_sleepers{0};
  // ControllerOptions::caller_writes and a synchronous engine: set at open, before the handle
  // is returned, never changed; with the smallest write that may be a caller write
  // (TreeCore::caller_write_min_bytes, the same for every tree the factory makes), so that a
  // submitter decides without looking at the tree, which it may do only inside a caller write.
  SyncEngine* caller_engine = nullptr;
  std::uint64_t caller_min_bytes = ~std::uint64_t{0};

  // --- home worker only (and the master in decide(), with every worker parked) ---
  Task* gate = nullptr;  // the hook / barrier / close that later tasks wait behind
  Task* held_head = nullptr;
  Task* held_tail = nullptr;
  FileCore* predecessor = nullptr;  // an earlier handle of the same path, still closing
  bool listed = false;              // in the home worker's gated list
  bool tree_gone = false;
  int close_phase = 0;  // 0: waiting for the tree to go idle, 1: write-back in flight
};

/// Whether submissions to f are still taken: the one closed check of the submission paths.
/// Acquire: pairs with the acq_rel exchange of close()/detach()/shutdown.
inline bool file_accepts(const FileCore* f) noexcept {
  return f != nullptr && !f->closed.load(std::memory_order_acquire);
}

/// Takes n references (the caller holds one: no ordering needed) / drops n at once (a worker's
/// batch, a thread's unused reserve); the last one deletes. (The one-reference forms, which
/// tai::File's destructor calls too, are declared in tai/file.hpp.)
inline void file_retain(FileCore* f, std::uint32_t n) noexcept { f->refs.fetch_add(n, std::memory_order_relaxed); }
inline void file_release(FileCore* f, std::uint32_t n) noexcept {
  if (f->refs.fetch_sub(n, std::memory_order_acq_rel) == n) delete f;
}

/// References to the file a thread last submitted to, taken kBatch at a time, so that a
/// submission takes its task's file reference without a locked read-modify-write (whose
/// store-buffer drain waited for every store the submission had just made to the task; see
/// registry.cpp). A thread keeps up to kBatch - 1 unused references to the last file it
/// submitted to, until it submits to another file, calls status() on that one, or exits. They
/// keep the FileCore (not the tree, the engine file or the controller) alive that long;
/// File::status() subtracts them (unused_references) so that in_flight counts operations only.
/// Thread-safety: one writer, the owning thread (relaxed loads and stores: no locked
/// instruction); unused_references() reads every thread's reserve under the list's mutex.
class FileRefReserve {
 public:
  static constexpr std::uint32_t kBatch = 64;
  /// One reference to f for a task; the caller holds another (its handle, or a task's).
  void take(FileCore* f) noexcept {
    const std::uint32_t left = left_.load(std::memory_order_relaxed);
    if (f == file_.load(std::memory_order_relaxed) && left != 0) {
      left_.store(left - 1, std::memory_order_relaxed);
      return;
    }
    take_batch(f);
  }
  /// Gives the unused references back (status() calls it for its file).
  void drop_if(const FileCore* f) noexcept {
    if (f == file_.load(std::memory_order_relaxed)) drop();
  }
  void drop() noexcept;
  /// The references to f that every thread's reserve holds unused. A snapshot: a thread
  /// submitting to f meanwhile may or may not be counted.
  static std::uint32_t unused_references(const FileCore* f) noexcept;

 private:
  void take_batch(FileCore* f) noexcept;
  struct ExitGuard {
    ExitGuard();   // lists the thread's reserve
    ~ExitGuard();  // gives its references back and unlists it
  };
  std::atomic<FileCore*> file_{nullptr};
  std::atomic<std::uint32_t> left_{0};
  bool gone_ = false;
};
static_assert(std::is_trivially_destructible_v<FileRefReserve>, "see FileRefReserve::take_batch");
// Inline with a constant initializer: every source reads it directly, with no thread-local
// wrapper call on the submission path.
inline thread_local FileRefReserve t_file_refs;

/// The controller's open files.
/// Thread-safety: every member is safe from any thread (under the registry's mutex); trees are
/// destroyed only under it, so a caller inside with_lock() may read a listed file's tree.
class FileRegistry {
 public:
  /// Lists f, whose `refs` already count the registry's reference: its home worker (a path keeps
  /// the home of its earlier handle; a new path goes to the least loaded of `workers`) and, when
  /// an earlier handle of the path is still closing, its predecessor.
  void add(FileCore* f, unsigned workers);
  /// Swaps f's tree for `fresh` (a reopen whose predecessor has closed).
  void replace_tree(FileCore& f, TreePtr fresh);
  /// The close: keeps the tree's counters for stats() and destroys it (its blocks go back to
  /// the quota).
  void retire_tree(FileCore& f);
  /// f leaves the registry (the path's entry too, if it is still f's).
  void remove(FileCore& f);
  /// Every listed file (with_tree: only those whose tree still exists), each retained once;
  /// the caller releases them.
  std::vector<FileCore*> retain_all(bool with_tree);
  /// The file whose tree has this id, retained, with the bytes of a block at `depth`
  /// (nullptr: the tree is gone, or has no such level).
  FileCore* retain_by_tree(std::uint64_t tree_id, unsigned depth, std::uint64_t& block_bytes);
  /// The handle of the path with this key whose close is under way (closed, not yet fully
  /// closed), retained; nullptr when there is none.
  FileCore* retain_closing(const std::string& key);
  /// Files with dirty bytes, each retained, with their dirty bytes; `total` gets the sum.
  std::vector<std::pair<std::uint64_t, FileCore*>> retain_dirty(std::uint64_t& total);
  bool empty() const;
  bool any_dirty() const;
  /// Tree counters of the open trees (`open`) and of every tree since the start (`all`), from
  /// one moment; returns the number of files listed then.
  std::size_t sum_stats(BTreeStats& open, BTreeStats& all) const;
  /// Runs fn() under the registry's mutex (status() reads a tree there).
  template <class F>
  auto with_lock(F&& fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    return fn();
  }

 private:
  mutable std::mutex mu_;
  std::vector<FileCore*> files_;  // not yet fully closed; each holds a registry reference
  std::unordered_map<std::string, FileCore*> by_path_;
  std::unordered_map<std::uint64_t, FileCore*> by_tree_;
  BTreeStats retired_{};  // summed stats of closed trees (stats() uses only their counters)
};

// ---------------------------------------------------------------------------------------------
// Waking the master, the round barrier, write copies

/// The master's doorbell: an eventfd, so that the master can also wait on engines' eventfds; and,
/// when writes may wake the master late (ControllerOptions::write_wake_delay_ns), a timerfd.
/// Thread-safety: ring() from any thread; sleep() by the master only.
class Doorbell {
 public:
  /// lazy_ns > 0: a write's ring() only arms the timer (see ring()); 0: every ring() wakes.
  explicit Doorbell(std::int64_t lazy_ns = 0);  // throws std::system_error when no eventfd can be made
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  int fd() const noexcept { return fd_; }
  /// The timer a lazy ring arms (-1: none); the master polls it beside fd().
  int timer_fd() const noexcept { return timer_fd_; }

  /// After a push: wakes the master if it sleeps. Only the first submitter after the master fell
  /// asleep rings (the exchange): one system call per sleep, not one per request; a submitter
  /// that finds the master awake (running rounds or spinning) costs it nothing. The handshake is
  /// Dekker's, with a seq_cst fence on each side: the submitter pushed, fences, loads
  /// `sleeping_`; the master stores `sleeping_`, fences, re-checks the queues; by the fences'
  /// total order one of them sees the other (no lost wake-up). The submitter pays one fence
  /// instruction per request. (An asymmetric fence, a compiler barrier here and
  /// membarrier(PRIVATE_EXPEDITED) on the sleeping side, makes every sleep of the master an
  /// inter-processor interrupt to every CPU running the process, a VM exit each on a virtual
  /// machine; the drop-in's system time fell by a third without it: docs/results/cache-cost.md.)
  ///
  /// `lazy` (a program's write, with a timer): the master is not woken now; the first lazy ring
  /// of a sleep arms the timer (`armed_` exchange: one timerfd_settime per sleep), and the
  /// master wakes when it fires, or sooner for anything else: a read, an fsync, a receipt's
  /// wait, a full queue. A stream of writes then costs the master one wake-up per delay rather
  /// than one per write, and the program's thread one system call per delay rather than one
  /// eventfd write per write. No write waits longer than the delay. The same Dekker argument
  /// holds for `armed_`: the master clears it after a sleep, fences, then re-checks the queues;
  /// a submitter that still sees it set pushed before that fence in their total order.
  void ring(bool lazy = false) noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!sleeping_.load(std::memory_order_relaxed)) return;
    if (lazy && timer_fd_ >= 0) {
      if (!armed_.load(std::memory_order_relaxed) && !armed_.exchange(true, std::memory_order_seq_cst)) arm();
      return;
    }
    if (sleeping_.exchange(false, std::memory_order_seq_cst)) signal();
  }
  /// Makes the master's next (or current) sleep return, whether or not it sleeps (shutdown).
  void signal() noexcept;
  /// The master's side, written once: says it sleeps, fences, then calls check_then_sleep(),
  /// which re-checks for work and sleeps (polling fd()) only when there is none; then says it is
  /// awake. The eventfd is read only when the poll reported it readable (drain()): a ring that
  /// lands after the poll returned leaves a count that makes the next poll return at once, one
  /// spare round of checks and no lost wake-up.
  template <class F>
  void sleep(F&& check_then_sleep) {
    sleeping_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    check_then_sleep();
    sleeping_.store(false, std::memory_order_relaxed);
    if (timer_fd_ >= 0 && armed_.load(std::memory_order_relaxed)) {
      // Writes pushed before this point are seen by the master's next check of the queues
      // (after the fence); later ones arm the timer again. A timer still pending wakes the
      // master once for nothing.
      armed_.store(false, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  }
  /// Resets the eventfd's count; the master calls it when a poll found fd() readable.
  void drain() noexcept;
  /// Consumes the timer's expirations; the master calls it when a poll found timer_fd() readable.
  void drain_timer() noexcept;

 private:
  void arm() noexcept;
  int fd_ = -1;
  int timer_fd_ = -1;
  std::int64_t lazy_ns_ = 0;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> armed_{false};
};

/// The round barrier and what the master tells the followers.
/// Thread-safety: `kind`/`number` are written by the master before it tells followers to go
/// (Worker::go, seq_cst) and read by them after (acquire); `arrived` and `master_sleeping` as
/// their comments say; lane_claim by any worker (acq_rel exchange).
struct RoundState {
  std::atomic<std::uint32_t> arrived{0};  // followers done with the round (seq_cst adds; master acquires)
  std::atomic<bool> master_sleeping{false};
  RoundKind kind = RoundKind::normal;
  std::uint64_t number = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> lane_claim;  // round that claimed each lane

  /// A follower is done with its part. Seq_cst add: publishes the part's writes to the master's
  /// acquire; then the master_sleeping check pairs with the master's seq_cst store before it
  /// sleeps (no lost wake-up).
  void arrive() noexcept {
    arrived.fetch_add(1, std::memory_order_seq_cst);
    if (master_sleeping.load(std::memory_order_seq_cst)) futex_wake(arrived);
  }
  /// The master waits until `expected` followers arrived: spin, then sleep on `arrived` (each
  /// sleep counted in `sleeps`); then resets the count.
  void wait_arrivals(std::uint32_t expected, std::int64_t spin_ns, Counter& sleeps) noexcept;
};

/// Back-pressure on write copies (ControllerOptions::write_copy_budget): the bytes of write data
/// held for unfinished writes.
/// Thread-safety: every member is safe from any thread. See copy_budget.cpp for the protocol.
class CopyBudget {
 public:
  CopyBudget(std::uint64_t budget, std::int64_t spin_ns, unsigned producers)
      : budget_(budget),
        spin_ns_(spin_ns),
        credit_chunk_(budget < (std::uint64_t{4} << 20) ? 0 : std::min<std::uint64_t>(std::uint64_t{32} << 10, budget / 16 / producers)),
        credit_slack_(credit_chunk_ * producers) {}
  /// Counts n bytes. may_wait: the caller waits for room (spin, then sleep) when over the
  /// budget, after ringing `wake` (the writes that make room may be waiting for a lazy ring's
  /// timer); a worker of the controller passes false (the writes that would make room finish
  /// only in the rounds it holds up).
  void charge(std::uint64_t n, bool may_wait, Doorbell* wake = nullptr);
  /// Counts `want` bytes ahead for one submitting thread's later small writes (its credit,
  /// ControllerCore::charge_copy) if they fit now, without waiting: `want`, or 0 when they do
  /// not fit. The caller charges its write alone (charge()) on 0.
  std::uint64_t try_reserve(std::uint64_t want) noexcept;
  /// The most credit a submitting thread keeps: at most 32 KiB, and the credits of every
  /// producer (ControllerCore::kMaxProducers) a sixteenth of the budget at most; 0 (no credit,
  /// every write charged alone) under a budget below 4 MiB.
  std::uint64_t credit_chunk() const noexcept { return credit_chunk_; }
  /// Uncounts n bytes and wakes the waiters, if any.
  void release(std::uint64_t n) noexcept;
  /// Bytes a worker may finish before it gives them back (Worker::copy_release): at most 1 MiB
  /// and a quarter of the budget shared by the workers. Set once, before the workers start.
  void set_release_batch(unsigned workers) noexcept;
  std::uint64_t release_batch() const noexcept { return release_batch_; }
  /// Whether a submitter waits for room (spinning or asleep): the workers then give back what
  /// they finished at the end of their part instead of batching it. Relaxed: a hint; a waiter
  /// that a worker does not see yet is woken by that worker's next give-back (its batch filled,
  /// or before it sleeps).
  bool wanted() const noexcept { return wanting_.load(std::memory_order_relaxed) != 0; }
  std::uint64_t held() const noexcept { return bytes_.load(std::memory_order_relaxed); }  // a snapshot
  std::uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }
  std::uint64_t budget() const noexcept { return budget_; }

 private:
  /// Whether n more bytes fit next to `held`: always when nothing is held but, perhaps, the
  /// submitting threads' credits (a thread that stopped writing keeps its credit, and a write
  /// larger than the budget must not wait for it for ever).
  bool fits(std::uint64_t held, std::uint64_t n) const noexcept {
    return held <= credit_slack_ || (held <= budget_ && n <= budget_ - held);
  }
  void wait_for_room(std::uint64_t n);
  const std::uint64_t budget_;
  const std::int64_t spin_ns_;
  const std::uint64_t credit_chunk_;
  const std::uint64_t credit_slack_;  // every producer's credit at its most
  std::uint64_t release_batch_ = 0;
  // On a cache line of its own: every submission adds to it. The workers subtract once per
  // batch (release_batch_), so the line stays with the submitting thread between batches.
  alignas(64) std::atomic<std::uint64_t> bytes_{0};
  // The waiters' counts on another line: the workers read them at the end of every part, and
  // they change only on the slow path, so that line stays shared in every cache.
  // Submitters asleep (or about to sleep) on cv_. Incremented and decremented under mu_.
  alignas(64) std::atomic<std::uint32_t> waiters_{0};
  // Submitters inside wait_for_room (spinning or asleep). Relaxed increments and decrements.
  std::atomic<std::uint32_t> wanting_{0};
  // Submissions that had to wait for room (relaxed counter, slow path only).
  std::atomic<std::uint64_t> waits_{0};
  alignas(64) std::mutex mu_;  // the sleeping side of the wait, used on the slow path only
  std::condition_variable cv_;
};

/// Large write copies (above Task::kKeepDataBytes), in pages the controller keeps
/// (ControllerOptions::write_copy_budget). Through the allocator, a copy allocated for its write
/// and freed when the write ended had its pages returned to the kernel and faulted in again
/// (about one fault per 4 KiB written), and the churn made the allocator return the program's
/// own pages too. The pool takes copies from a CopyArena (copy_arena.hpp): chunks mapped once,
/// at most the budget in all, page runs carved best-fit and merged when given back, never
/// returned to the kernel while the controller lives. A copy the arena cannot hold (larger than
/// the budget, or no run fits while the budget is mapped) is allocated as before and freed when
/// its write ends. Memory stays bounded as before: the arena's mapping by the budget, the copies
/// in flight by the budget's back-pressure.
/// Thread-safety: every member is safe from any thread; the statistics are snapshots.
class CopyPool {
 public:
  /// huge_pages: the arena's chunks are advised MADV_HUGEPAGE (CopyArena::create).
  explicit CopyPool(std::uint64_t budget, bool huge_pages = false);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;
  /// A page-aligned buffer of at least n bytes (n > Task::kKeepDataBytes), rounded up to whole
  /// pages: from the arena, else from the allocator; empty when memory is out.
  AlignedBuffer take(std::size_t n) noexcept;
  /// Ends the use of a finished write's copy: the arena's pages go back to it, the allocator's
  /// memory is freed.
  void give(AlignedBuffer&& b) noexcept;
  /// Bytes mapped by the arena and not lent (ready for the next copies).
  std::uint64_t pooled_bytes() const noexcept;
  /// Bytes the arena has mapped (at most the budget).
  std::uint64_t mapped_bytes() const noexcept;
  std::uint64_t reuses() const noexcept { return reuses_.load(std::memory_order_relaxed); }
  std::uint64_t allocations() const noexcept { return allocations_.load(std::memory_order_relaxed); }

 private:
  CopyArena* arena_;  // one reference owned here; may be null (no memory for it)
  // Counters: relaxed, nothing is published through them.
  std::atomic<std::uint64_t> reuses_{0};       // copies from pages the arena had mapped already
  std::atomic<std::uint64_t> allocations_{0};  // copies that needed a new chunk or the allocator
};

// ---------------------------------------------------------------------------------------------
// The controller

class ControllerCore {
 public:
  explicit ControllerCore(const ControllerOptions& o);
  ~ControllerCore();

  // --- the public API (any thread) ---
  Result<File> open(const OpenRequest& req);
  /// The registry key of a path: its realpath, or the path itself when that fails.
  static std::string registry_key(const std::string& path);
  /// Waits until no earlier handle of `path` (registry key `key`) is closing (see open()); an
  /// Error when waiting could deadlock (called from one of this controller's workers).
  std::optional<Error> wait_for_closing_handle(const std::string& path, const std::string& key);
  Receipt submit_task(Task* t);
  Receipt submit_file_task(FileCore* f, Task* t);
  /// Counts t.data against the write-copy budget before t is pushed, waiting for room when
  /// needed. Called by the submitting thread.
  void charge_copy(Task& t);
  /// The caller-write path of File::write (FileTraffic): when the file, its engine, its tree and
  /// its traffic allow, writes `n` bytes of `src` at `offset` on this thread, finishes t with
  /// the result and returns true; otherwise returns false having changed nothing. Called by the
  /// submitting thread after File::write's checks, before any copy.
  bool try_caller_write(FileCore& f, Task* t, std::uint64_t offset, const void* src, std::size_t n);
  /// Counts t in its file's traffic word (before the push that publishes it; t.file is set).
  static void count_file_task(FileCore& f, Task& t) noexcept;
  /// A worker about to start a counted task: waits until no caller write of the
  /// file is in progress (acquire: their effects on the tree are visible after it).
  static void wait_for_caller_writes(FileCore& f) noexcept;
  Receipt flush();
  ShutdownReport shutdown();
  ControllerStats stats() const;
  void close_file(FileCore* f, Task* t);  // t == nullptr: detach

  /// Whether the calling thread is one of this controller's workers.
  bool on_own_worker() const noexcept;

  // --- called by workers ---
  void push(unsigned worker, Task* t);
  /// Whether t's push may leave the master asleep until the doorbell's timer (Doorbell::ring):
  /// a write of the program. Everything a caller may be waiting for wakes it at once.
  static bool lazy_wake(const Task& t) noexcept { return t.kind == TaskKind::tree_op && t.op.kind == TreeOp::write; }
  void on_op_complete(Task& t);
  /// Every task a worker ends passes here: uncounts its write copy, then publishes the result.
  void finish(Task& t, TaskState s, int error = 0, const char* reason = nullptr);
  /// One part of an aggregate (a flush) ended, with error `err` (0: none): the aggregate
  /// finishes with its parts' first error when its last part ends.
  void finish_part(Task& parent, int err);
  void add_failure(std::string what);

  ControllerOptions opt;
  unsigned n = 1;
  unsigned lanes = 1;
  Quota quota;
  std::vector<std::unique_ptr<Worker>> workers;
  std::string engine_note;
  EngineTable engines;
  FileRegistry registry;
  RoundState rounds;
  // On a cache line of its own: every submission reads it, and the round fields change every
  // round (a miss per round for the submitting thread when they shared a line).
  alignas(64) Doorbell doorbell;
  CopyBudget copies;
  CopyPool copy_pool;  // large write copies for reuse, within the same budget

  // --- shutdown ---
  std::atomic<bool> accepting{true};  // acquire loads by submitters, release store by shutdown()
  std::atomic<bool> closing{false};
  bool shut_down = false;
  std::mutex report_mu;
  std::vector<std::string> failures;
  std::atomic<std::uint64_t> rejected_outside{0};  // rejections on application threads (RMW: many writers)
  std::atomic<std::uint64_t> flushes{0};           // Controller::flush() calls (relaxed counter)
  // Caller writes done and their bytes (RMW: many writers; relaxed counters). Own line: the
  // submitting threads write them at every caller write.
  alignas(64) std::atomic<std::uint64_t> caller_writes{0};
  std::atomic<std::uint64_t> caller_write_bytes{0};
  std::atomic<std::uint64_t> caller_write_failures{0};

  // --- master state (master thread only) ---
  std::int64_t idle_since = -1;
  std::atomic<std::uint32_t> evictions_in_flight{0};  // +1 by the master, -1 on completion (relaxed counter)
  Counter rounds_normal, rounds_recycle, rounds_flush, rounds_idle, rounds_close;

  // --- per-thread Pending queues (Worker::inbox) ---
  static constexpr unsigned kMaxProducers = 64;
  std::mutex producers_mu;
  unsigned producers = 0;  // inboxes handed out (under producers_mu)
  // Threads that have submitted (producer_index), for the caller-write rule: stored under
  // producers_mu, read relaxed by try_caller_write (a late view only delays the first caller
  // write). And the count of them from which caller writes are taken
  // (ControllerOptions::caller_write_threads, 0 resolved at construction).
  std::atomic<unsigned> submitting_threads{0};
  unsigned caller_write_threads = 1;
  // Each submitting thread's credit of write-copy bytes counted ahead in `copies` (charge_copy):
  // its small writes then take no locked instruction, which made the submitting thread wait for
  // every store the request had made (the task's lines and the copy, last held by the worker
  // that ended the task before): about a quarter of the framework's CPU per 512 B request on a
  // 2-vCPU AMD host (docs/results/cache-cost.md). Indexed by producer_index(); written by that
  // thread alone (relaxed loads and stores), read by stats() (a snapshot). A thread that stops
  // writing leaves its credit counted: at most credit_chunk() each, a sixteenth of the budget in all.
  struct alignas(64) ProducerCredit {
    std::atomic<std::uint64_t> bytes{0};
  };
  std::array<ProducerCredit, kMaxProducers> credits{};
  const std::uint64_t serial = next_serial();  // tells controllers apart in thread-local caches
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> s{0};  // relaxed: only uniqueness matters
    return s.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  /// The calling application thread's inbox index (made on its first submission), or -1 when
  /// every inbox is taken (it then uses the shared queue).
  int producer_index();
  /// Stamps t (Task::stamp) for the latency histograms on one request in latency_sample_every.
  void stamp_submit(Task& t) const noexcept;

  // --- rounds (rounds.cpp) ---
  void master_loop();
  void follower_loop(Worker& w);
  bool needs(const Worker& w, std::uint64_t input_steps) const;
  RoundKind decide();
  bool something_runnable();
  bool has_local_work(const Worker& w) const;
  bool gate_can_progress(const FileCore& f) const noexcept;
  void issue_evictions();
  bool issue_flush();
  void master_sleep(bool with_engines, std::int64_t timeout_ns);
  std::vector<std::thread> threads;
};

/// A worker thread's state; it is also the StepSink its steps emit into.
class Worker final : public StepSink {
 public:
  Worker(ControllerCore& core, unsigned index);
  ~Worker() override;

  ControllerCore& c;
  const unsigned index;
  // The workers' own pushes and the submitting threads past kMaxProducers. Boost's fixed-size
  // queue builds every node (a cache line each) when constructed: at the full pending_capacity
  // (16,384) that was 1 MiB touched per worker, 484 of the 781 page faults a controller with two
  // workers took before its first request. A worker that finds it full pushes to `overflow`, and
  // a submitter past the 64th waits for room, so a small one loses nothing.
  static constexpr unsigned kSharedPendingMax = 1024;
  boost::lockfree::queue<Task*, boost::lockfree::fixed_sized<true>> pending;
  using Inbox = boost::lockfree::spsc_queue<Task*>;
  // inbox[p]: application thread p's queue to this worker. Published once (release store) by
  // producer_index() before `inboxes` is raised (release); the worker loads `inboxes`, then the
  // pointers (acquire). Owned here.
  std::array<std::atomic<Inbox*>, ControllerCore::kMaxProducers> inbox{};
  std::atomic<unsigned> inboxes{0};
  // Tasks pushed from a worker thread when `pending` was full (a worker must not wait for
  // itself). has_overflow: release store after the push, acquire load before taking.
  std::mutex overflow_mu;
  std::deque<Task*> overflow;
  std::atomic<bool> has_overflow{false};

  // Admission in submission order across the submitting threads' queues (DESIGN: an fsync
  // covers every write submitted before it, from any thread). Each submitting thread has its own
  // queue, so pop order alone cannot say which of two tasks in two queues came first. An
  // ordering task (one that must follow every earlier operation on its file: fsync, fdatasync,
  // write-back, drop, close, barrier, hook) takes the next number n of this clock (key 2n-1);
  // any other task reads the clock (key 2v, v = numbers given out so far). A task that happened
  // before another thus has the smaller key, and one thread's keys never decrease. Relaxed:
  // only the clock's own modification order matters (coherence: an increment that happens
  // before a read is seen by it, a read that happens before an increment is not).
  alignas(64) std::atomic<std::uint64_t> order_clock{0};
  /// Sets t's admit_key; called right before the push that cannot fail, so that every number
  /// taken reaches this worker (admission waits for the numbers below a key).
  void stamp_admission(Task& t) noexcept {
    if (orders_across_threads(t))
      t.admit_key = 2 * order_clock.fetch_add(1, std::memory_order_relaxed) + 1;
    else
      t.admit_key = 2 * order_clock.load(std::memory_order_relaxed);
  }
  static bool orders_across_threads(const Task& t) noexcept {
    switch (t.kind) {
      case TaskKind::tree_op: return t.op.kind != TreeOp::read && t.op.kind != TreeOp::write;
      case TaskKind::hook:
      case TaskKind::barrier:
      case TaskKind::close: return true;
      default: return false;
    }
  }
  /// Popped tasks not yet admitted (worker only): admission waits for every ordering number
  /// below a task's key, and an ordering task also for one full pass over the queues after its
  /// pop (what was submitted before it is visible by then). See take_new() in rounds.cpp.
  bool has_staged() const noexcept { return !staged_.empty(); }

  // Followers: the round this worker is told to run (low 32 bits of the round number; a futex
  // word). The master writes the round's number and kind, then stores `go` (seq_cst); the
  // follower loads it (acquire) and then reads them. A follower the round does not need is not
  // told (it sleeps on).
  std::atomic<std::uint32_t> go{0};
  // The follower sleeps on `go` (or is about to): seq_cst store, then it re-reads `go`; the
  // master stores `go`, then loads this (seq_cst) and wakes it when set. No lost wake-up.
  std::atomic<bool> asleep{false};

  std::array<std::vector<std::vector<Step>>, 2> out;  // [parity][lane]
  unsigned parity_out = 1;
  struct AsyncIo {
    EngineSlot* slot;
    Request request;
    Step cont;
  };
  std::vector<AsyncIo> backlog;  // async requests to submit at the end of this worker's part
  std::vector<FileCore*> gated;  // files of this home worker with a gate or held tasks

  // Per-worker statistics (single writer).
  std::array<Counter, kRequestKinds> requests;
  std::array<std::array<Counter, LatencyHistogram::kBuckets>, kRequestKinds> latency;
  Counter failed, bytes_read, bytes_written, steps, steals, sleeps, max_pending, max_ready, engine_syncs, evictions,
      engine_submit_calls;
  /// Counts the time since t's submission in kind k's histogram, when t was stamped.
  void record_latency(RequestKind k, const Task& t) noexcept {
    if (!t.timed) return;
    const auto now = static_cast<std::uint64_t>(monotonic_ns());
    latency[static_cast<std::size_t>(k)][log2_bucket(now > t.submit_ns ? now - t.submit_ns : 0)].add();
  }

  /// A step for a lane this worker holds in this round runs in this round (queued in now_);
  /// otherwise it waits for the next round. See own_lane() for why that keeps each node's order.
  void emit(const Step& s) override {
    const unsigned lane = lane_of(s.node);
    if (in_round_ && own_lane(lane)) {
      now_.push_back(s);
    } else {
      out[parity_out][lane].push_back(s);
      deferred_[parity_out][lane] = 1;
    }
  }
  // deferred_[parity][lane]: this worker queued steps for the lane for the next round. Written
  // by this worker in round r (cleared at the start of its part in round r+1 for the other
  // parity), read by every worker in round r+1 to find lanes with input without touching the
  // vectors (which the lane's holder empties meanwhile). The round barrier orders all of it.
  std::array<std::vector<std::uint8_t>, 2> deferred_;
  bool own_lane(unsigned lane);
  void drain();
  // File references of finished tasks, dropped with one atomic subtraction per file for many
  // tasks: at the end of a part for a file with kReleaseBatch or more (or for every file when
  // kReleaseFiles files wait), and all of them before the worker sleeps or stops. Releasing at
  // the end of every part instead cost 15 ns per request with two submitting threads on the
  // Null engine (tai-bench overhead, 10 interleaved pairs, medians 197.5 against 182.5 CPU ns):
  // the workers' subtractions then moved the count's cache line between them every part.
  // The entries are atomics (one writer, this worker; relaxed) so that File::status() can
  // subtract the finished tasks they hold (deferred_references).
  static constexpr std::uint32_t kReleaseBatch = 64;
  static constexpr std::size_t kReleaseFiles = 16;
  struct DeferredRelease {
    std::atomic<FileCore*> file{nullptr};
    std::atomic<std::uint32_t> count{0};
  };
  std::array<DeferredRelease, kReleaseFiles> releases_;
  std::size_t nreleases_ = 0;  // entries in use (this worker only)
  void release_later(FileCore* f);
  void flush_releases(bool all = true);
  /// References to f held by this worker's deferred releases. Any thread (relaxed loads: a
  /// snapshot).
  std::uint32_t deferred_references(const FileCore* f) const noexcept {
    std::uint32_t n = 0;
    for (const DeferredRelease& r : releases_)
      if (r.file.load(std::memory_order_relaxed) == f) n += r.count.load(std::memory_order_relaxed);
    return n;
  }
  // Write-copy bytes of writes this worker finished, not yet given back to the controller's
  // count (see ControllerCore::finish): given back at the end of a part once they reach
  // CopyBudget::release_batch() or a submitter waits for room, and always before sleeping or
  // stopping (flush_releases), so a waiting submitter is never left behind an idle worker.
  // Written by this worker only; an atomic so that stats() can leave it out of the count
  // (relaxed: a snapshot).
  std::atomic<std::uint64_t> copy_release{0};
  void add_copy_release(std::uint64_t n) noexcept {
    copy_release.store(copy_release.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  /// Gives back copy_release. `batched`: only when it reached the batch or somebody waits.
  void give_back_copies(bool batched = false) noexcept;
  DeferredWakes wakes_;  // waiters to wake after the part's completions and at its end (t_deferred_wakes)
  bool in_round_ = false;
  std::uint64_t round_ = 0;
  unsigned parity_in_ = 0;
  std::vector<std::uint64_t> claimed_;  // claimed_[lane] == round_: this worker holds the lane
  std::vector<Step> now_;               // steps to run in this round, FIFO from now_head_
  // Completions of synchronous engine requests, run right after the step that issued them
  // (io_done may run in any order relative to visits): the node's set of uncached requests in
  // flight then stays small instead of growing with every visit queued ahead in now_.
  std::vector<Step> urgent_;
  // Admission state (take_new): popped tasks in pop order per queue, each with the pass that
  // popped it; every ordering number <= seen_ has been popped, those in ahead_ (sorted) too.
  struct Staged {
    Task* task;
    std::uint64_t pass;
  };
  std::vector<Staged> staged_;
  std::uint64_t seen_ = 0;
  std::vector<std::uint64_t> ahead_;
  std::uint64_t pass_ = 1;       // the number of the next pass
  std::uint64_t full_pass_ = 0;  // the last pass that saw every queue to its end
  /// One pass over every queue of this worker: pops at most `limit` tasks (all visible ones
  /// when limit is SIZE_MAX) into staged_; true when one of them is an ordering task.
  bool pop_pass(std::size_t limit, std::size_t& taken);
  /// Stages t; true when it is an ordering task.
  bool note_popped(Task* t);
  std::size_t now_head_ = 0;
  std::uint64_t ran_ = 0;
  void io(const Request& r, const Step& cont) override;
  /// The trees' inline path (called from begin(), by this home worker): a synchronous engine
  /// executes the request now; anything else goes through io() as steps.
  bool io_now(const Request& r, Operation& op, std::int64_t& result) override;

  void part(std::uint64_t round);
  void admit(Task* t);
  /// Step 3 of a part: pops new tasks (at most `cap` in the first pass) and admits, in key
  /// order, those whose predecessors are known; returns how many were popped.
  std::size_t take_new(std::size_t cap);
  void begin(Task* t);
  /// Starts t's tree operation on its file, then a collection when the tree asks for one.
  void start_op(FileCore& f, Task* t);
  void gate_on(FileCore& f, Task* t);
  void progress_gates();
  bool progress(FileCore& f);
  /// The close gate's last step: the write-back is done; report, destroy tree and engine file.
  void finish_close(FileCore& f, Task* g);
  void drive_async();
  void reap_slot(EngineSlot& s);
  void run_function(Task& t);
  void count_request(const Task& t);
  void reject(Task& t, int error, const char* reason);

  unsigned lane_of(const Node* node) const noexcept {
    if (node == nullptr) return index;  // node-less steps run anywhere: keep them here
    const auto h = (reinterpret_cast<std::uintptr_t>(node) >> 4) * 0x9E3779B97F4A7C15ull;
    return static_cast<unsigned>((h >> 32) % c.lanes);
  }
};

// Inline with a constant initializer (see t_file_refs).
inline thread_local Worker* t_worker = nullptr;

inline bool ControllerCore::on_own_worker() const noexcept { return t_worker != nullptr && &t_worker->c == this; }

RequestKind kind_of(const Task& t) noexcept;
/// Operation::on_complete of every task's tree operation: on to ControllerCore::on_op_complete.
void op_complete_trampoline(Operation&, void* ctx);
/// Rejects t at once, on the submitting thread (nothing was pushed).
Receipt reject_now(Task* t, int err, const char* reason);

}  // namespace tai::detail

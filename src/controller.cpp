// The controller: workers, Pending queues, lanes of steps, rounds, gates, engines, shutdown.
// tai/controller.hpp explains the design; this file keeps the rules close to the code.
//
// Who touches what:
//  * Worker::inbox[p] (Boost.Lockfree spsc_queue): application thread p's Pending queue for
//    that worker; pushed by that thread only, popped by the worker. One per (thread, worker), so
//    a submission costs no compare-and-swap and each thread's requests stay in its order.
//  * Worker::pending (Boost.Lockfree queue, MPMC): the Pending queue for worker threads (tasks
//    submitted by tasks and continuations) and for application threads beyond kMaxProducers.
//  * Worker::out[parity][lane]: the steps a worker emitted for a lane. Written only by that
//    worker during a round; in the next round read and cleared by whichever worker claimed the
//    lane. The round barrier orders the two (release by arrive(), acquire by the master, release
//    by the master's store of Worker::go, acquire by the followers).
//  * FileCore gate/held/close state: the file's home worker only (and the master while every
//    worker is parked at the barrier, in decide()).
//  * EngineSlot (async engines): submit/reap under its mutex, by any worker.
//  * The registry (files, by_path, by_tree) and tree destruction: under files_mu_.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "tai/controller.hpp"
#include "tai/detail/futex.hpp"
#include "tai/engine_selector.hpp"

namespace tai {
namespace detail {

namespace {

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

unsigned log2_bucket(std::uint64_t ns) noexcept {
  if (ns == 0) return 0;
  const unsigned b = 63u - static_cast<unsigned>(__builtin_clzll(ns));
  return std::min<unsigned>(b, LatencyHistogram::kBuckets - 1);
}

const char* const kClosedReason = "the file is closed";
const char* const kShutdownReason = "the controller is shutting down";

}  // namespace

class Worker;

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

/// One open (or closing) file: the handle's target and the home worker's state for it.
class FileCore {
 public:
  ~FileCore() {
    if (predecessor) file_release(predecessor);
  }
  std::string path;  // as given to open()
  std::string key;   // canonical path: the registry key (reopen detection)
  std::string tree_name;
  std::string engine_name;  // a copy: status() may outlive the controller (and its engines)
  OpenMode mode;            // as given to open(): submissions check reads and writes against it
  ControllerCore* ctl = nullptr;
  EngineSlot* slot = nullptr;
  std::unique_ptr<EngineFile> efile;  // reset by the close, before the controller can go
  std::unique_ptr<TreeCore> tree;     // reset by the close, under files_mu_
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
  // close: the home worker then rejects it, see begin()).
  alignas(64) std::atomic<bool> closed{false};
  // The close finished: tree and engine file are gone. Release store by the home worker,
  // acquire loads (a successor file's gate; status()).
  std::atomic<bool> fully_closed{false};
  // errno of the tree's unrecovered engine-sync failure (TreeCore::sync_error, which decides
  // fsync results and close), mirrored at each fsync's completion for status(), which may come
  // after the tree is gone. Relaxed: informational.
  std::atomic<int> sticky{0};
  bool detached = false;  // written before the close task is pushed (the queue publishes it)

  // --- home worker only (and the master in decide(), with every worker parked) ---
  Task* gate = nullptr;  // the hook / barrier / close that later tasks wait behind
  Task* held_head = nullptr;
  Task* held_tail = nullptr;
  FileCore* predecessor = nullptr;  // an earlier handle of the same path, still closing
  bool listed = false;              // in the home worker's gated list
  bool tree_gone = false;
  int close_phase = 0;  // 0: waiting for the tree to go idle, 1: write-back in flight
};

/// Why an fsync or a close fails with the tree's sync error (TreeCore::sync_error).
constexpr const char* kUnrecoveredSync =
    "an engine sync of this file failed and the data it covered has not been written again and synced since";

/// Takes n references (the caller holds one: no ordering needed) / drops n at once (a worker's
/// batch, a thread's unused reserve); the last one deletes.
void file_retain(FileCore* f, std::uint32_t n) noexcept { f->refs.fetch_add(n, std::memory_order_relaxed); }
void file_release(FileCore* f, std::uint32_t n) noexcept {
  if (f->refs.fetch_sub(n, std::memory_order_acq_rel) == n) delete f;
}
void file_retain(FileCore* f) noexcept { file_retain(f, 1); }
void file_release(FileCore* f) noexcept { file_release(f, 1); }

/// References to the file a thread last submitted to, taken kBatch at a time, so that a
/// submission takes its task's file reference without a locked read-modify-write. That
/// instruction cost more than its own work: it drains the store buffer, so it waited for every
/// store the submission had just made to the task (cache lines a worker read last: an
/// invalidation each); perf put a quarter of the submitting thread's samples on it.
/// What it costs: a thread keeps up to kBatch - 1 unused references to the last file it
/// submitted to, until it submits to another file, calls status() on that one, or exits. They
/// keep the FileCore (not the tree, the engine file or the controller) alive that long, and
/// another thread's status().in_flight counts them (documented there).
/// Thread-safety: thread-local; the file's count is atomic as ever (relaxed increments, the
/// acq_rel decrement of file_release deletes).
class FileRefReserve {
 public:
  static constexpr std::uint32_t kBatch = 64;
  /// One reference to f for a task; the caller holds another (its handle, or a task's).
  void take(FileCore* f) noexcept {
    if (f == file_ && left_ != 0) {
      --left_;
      return;
    }
    if (gone_) {  // a thread_local destructor submitting after ours ran: no reserve any more
      file_retain(f);
      return;
    }
    drop();
    // The first batch makes the guard whose destructor, at the thread's exit, gives the
    // reserve back. This object itself has no destructor, so that a thread_local destroyed
    // after the guard may still submit (it then takes single references, see gone_).
    thread_local ExitGuard guard;
    file_retain(f, kBatch);
    file_ = f;
    left_ = kBatch - 1;
  }
  /// Gives the unused references back (status() calls it for its file).
  void drop_if(const FileCore* f) noexcept {
    if (f == file_) drop();
  }
  void drop() noexcept {
    FileCore* f = std::exchange(file_, nullptr);
    const std::uint32_t n = std::exchange(left_, 0u);
    if (f != nullptr && n != 0) file_release(f, n);
  }

 private:
  struct ExitGuard {
    ~ExitGuard();
  };
  FileCore* file_ = nullptr;
  std::uint32_t left_ = 0;
  bool gone_ = false;
};
static_assert(std::is_trivially_destructible_v<FileRefReserve>, "see FileRefReserve::take");
thread_local FileRefReserve t_file_refs;
FileRefReserve::ExitGuard::~ExitGuard() {
  t_file_refs.drop();
  t_file_refs.gone_ = true;
}

thread_local Worker* t_worker = nullptr;

const char* const kWaitOnOwnWorkerReason =
    "a wait for an unfinished receipt on a worker thread of the same controller (inside a continuation, "
    "a submitted function or a hook) would never end: the worker holds up the rounds that would finish "
    "it; chain the work with then() instead";

class ControllerCore {
 public:
  explicit ControllerCore(const ControllerOptions& o);
  ~ControllerCore();

  Result<File> open(const OpenRequest& req);
  bool add_engine(std::string name, std::unique_ptr<Engine> engine);
  Receipt submit_task(Task* t);
  /// Stamps t (Task::stamp) for the latency histograms on one request in latency_sample_every.
  void stamp_submit(Task& t) const noexcept;
  Receipt submit_file_task(FileCore* f, Task* t);
  Receipt flush();
  ShutdownReport shutdown();
  ControllerStats stats() const;
  void close_file(FileCore* f, Task* t);  // t == nullptr: detach

  // Called by workers.
  void push(unsigned worker, Task* t);
  void on_op_complete(Task& t);
  void finish(Task& t, TaskState s, int error = 0, const char* reason = nullptr);
  void add_failure(std::string what);
  EngineSlot* slot_owning(const EngineFile& f) const noexcept;

  ControllerOptions opt;
  unsigned n = 1;
  unsigned lanes = 1;
  Quota quota;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<std::atomic<std::uint64_t>[]> lane_claim;  // round that claimed each lane (acq_rel exchange)
  std::string engine_note;
  std::string default_engine;

  // --- rounds (see Worker::part, master_loop, follower_loop) ---
  // round_kind/round: written by the master before it tells followers to go (Worker::go).
  std::atomic<std::uint32_t> arrived{0};  // followers done with the round (seq_cst adds; master acquires)
  std::atomic<bool> master_sleeping{false};
  RoundKind round_kind = RoundKind::normal;
  std::uint64_t round = 0;

  // --- the master's doorbell: an eventfd, so that the master can also wait on engines' eventfds.
  // On a cache line of their own: every submission loads `sleeping`, and the round fields above
  // change every round (a miss per round for the submitting thread when they shared a line).
  alignas(64) int wake_fd = -1;
  // The master sleeps (or is about to). A submitter pushes, runs AsymmetricFence::light(), loads
  // it; the master stores it, runs AsymmetricFence::heavy(), re-checks the queues: one of them
  // sees the other (no lost wake-up), and the submitter's side costs no fence instruction.
  std::atomic<bool> sleeping{false};
  // Only the first submitter after the master fell asleep rings (the exchange): one system
  // call per sleep, not one per request.
  void ring() noexcept {
    AsymmetricFence::light();
    if (sleeping.load(std::memory_order_relaxed) && sleeping.exchange(false, std::memory_order_seq_cst)) {
      const std::uint64_t one = 1;
      [[maybe_unused]] ssize_t r = ::write(wake_fd, &one, sizeof one);
    }
  }

  // --- engines: a fixed table, so the rounds read it without a lock (count: release/acquire).
  static constexpr unsigned kMaxEngines = 32;
  alignas(64) mutable std::mutex engines_mu;
  std::array<std::unique_ptr<EngineSlot>, kMaxEngines> slots;
  std::atomic<unsigned> slot_count{0};
  Result<EngineSlot*> slot_for(std::string_view name);

  // --- files ---
  mutable std::mutex files_mu;
  std::vector<FileCore*> files;  // not yet fully closed; each holds a registry reference
  std::unordered_map<std::string, FileCore*> by_path;
  std::unordered_map<std::uint64_t, FileCore*> by_tree;
  BTreeStats retired{};  // summed stats of closed trees (stats() uses only their counters)

  // --- shutdown ---
  std::atomic<bool> accepting{true};  // acquire loads by submitters, release store by shutdown()
  std::atomic<bool> closing{false};
  bool shut_down = false;
  std::mutex report_mu;
  std::vector<std::string> failures;
  std::atomic<std::uint64_t> rejected_outside{0};  // rejections on application threads (RMW: many writers)
  std::atomic<std::uint64_t> flushes{0};           // Controller::flush() calls (relaxed counter)

  // --- write copies (ControllerOptions::write_copy_budget) ---
  // Bytes of write data held for unfinished writes (Task::copy_charge summed), on a cache line
  // of its own with the waiters count, which every completion reads after its subtraction.
  alignas(64) std::atomic<std::uint64_t> copy_bytes{0};
  // Submitters asleep (or about to sleep) on copy_cv. Incremented and decremented under copy_mu.
  std::atomic<std::uint32_t> copy_waiters{0};
  // Submissions that had to wait for room (relaxed counter, slow path only).
  std::atomic<std::uint64_t> copy_waits{0};
  // The sleeping side of the wait, used on the slow path only.
  alignas(64) std::mutex copy_mu;
  std::condition_variable copy_cv;
  /// Counts t.data against the budget before t is pushed, waiting for room when needed (see
  /// ControllerOptions::write_copy_budget). Called by the submitting thread.
  void charge_copy(Task& t);
  /// Uncounts n bytes and wakes the waiters, if any. Called on the worker finishing a write.
  void release_copy(std::uint64_t n) noexcept;
  /// Whether n more bytes fit next to `held` (always when nothing is held).
  bool copy_fits(std::uint64_t held, std::uint64_t n) const noexcept {
    const std::uint64_t budget = opt.write_copy_budget;
    return held == 0 || (held <= budget && n <= budget - held);
  }
  void wait_for_copy_room(std::uint64_t n);

  // --- master state (master thread only) ---
  std::int64_t idle_since = -1;
  std::atomic<std::uint32_t> evictions_in_flight{0};  // +1 by the master, -1 on completion (relaxed counter)
  Counter rounds_normal, rounds_recycle, rounds_flush, rounds_idle, rounds_close;

  // --- per-thread Pending queues (Worker::inbox) ---
  static constexpr unsigned kMaxProducers = 64;
  std::mutex producers_mu;
  unsigned producers = 0;  // inboxes handed out (under producers_mu)
  const std::uint64_t serial = next_serial();  // tells controllers apart in thread-local caches
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> s{0};  // relaxed: only uniqueness matters
    return s.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  /// The calling application thread's inbox index (made on its first submission), or -1 when
  /// every inbox is taken (it then uses the shared queue).
  int producer_index();

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
  Worker(ControllerCore& core, unsigned index)
      : c(core), index(index), pending(core.opt.pending_capacity) {
    for (auto& side : out) side.resize(core.lanes);
    for (auto& side : out)
      for (auto& v : side) v.reserve(64);
    claimed_.assign(core.lanes, ~std::uint64_t{0});
    for (auto& d : deferred_) d.assign(core.lanes, 0);
    now_.reserve(1024);
  }

  ControllerCore& c;
  const unsigned index;
  boost::lockfree::queue<Task*, boost::lockfree::fixed_sized<true>> pending;
  using Inbox = boost::lockfree::spsc_queue<Task*>;
  // inbox[p]: application thread p's queue to this worker. Published once (release store) by
  // producer_index() before `inboxes` is raised (release); the worker loads `inboxes`, then the
  // pointers (acquire). Owned here.
  std::array<std::atomic<Inbox*>, ControllerCore::kMaxProducers> inbox{};
  std::atomic<unsigned> inboxes{0};
  ~Worker() {
    for (auto& q : inbox) delete q.load(std::memory_order_relaxed);
  }
  // Tasks pushed from a worker thread when `pending` was full (a worker must not wait for
  // itself). has_overflow: release store after the push, acquire load before taking.
  std::mutex overflow_mu;
  std::deque<Task*> overflow;
  std::atomic<bool> has_overflow{false};

  // Followers: the round this worker is told to run (low 32 bits of the round number; a futex
  // word). The master writes round/round_kind, then stores `go` (seq_cst); the follower loads it
  // (acquire) and then reads them. A follower the round does not need is not told (it sleeps on).
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
  // requests: at the end of a part for a file with kReleaseBatch or more (or when more than
  // kReleaseFiles files wait), and all of them before the worker sleeps or stops. Each
  // subtraction takes the counter's cache line from the submitting thread, whose next
  // submission's increment then misses: once per batch rather than once per round. A deferred
  // release only keeps a FileCore alive longer (and status().in_flight counts it until then).
  static constexpr std::uint32_t kReleaseBatch = 64;
  static constexpr std::size_t kReleaseFiles = 16;
  void release_later(FileCore* f);
  void flush_releases(bool all = true);
  // Write-copy bytes of writes this worker finished, not yet given back to the controller's
  // count (see ControllerCore::finish): given back at the end of each part and before sleeping
  // or stopping (flush_releases), so a waiting submitter is never left behind an idle worker.
  std::uint64_t copy_release = 0;
  void give_back_copies() noexcept;
  DeferredWakes wakes_;  // waiters to wake after the part's completions and at its end (t_deferred_wakes)
  std::vector<std::pair<FileCore*, std::uint32_t>> releases_;
  bool in_round_ = false;
  std::uint64_t round_ = 0;
  unsigned parity_in_ = 0;
  std::vector<std::uint64_t> claimed_;  // claimed_[lane] == round_: this worker holds the lane
  std::vector<Step> now_;               // steps to run in this round, FIFO from now_head_
  // Completions of synchronous engine requests, run right after the step that issued them
  // (io_done may run in any order relative to visits): the node's set of uncached requests in
  // flight then stays small instead of growing with every visit queued ahead in now_.
  std::vector<Step> urgent_;
  std::size_t now_head_ = 0;
  std::uint64_t ran_ = 0;
  void io(const Request& r, const Step& cont) override;
  /// The trees' inline path (called from begin(), by this home worker): a synchronous engine
  /// executes the request now; anything else goes through io() as steps.
  bool io_now(const Request& r, Operation& op, std::int64_t& result) override;

  void part(std::uint64_t round);
  void admit(Task* t);
  void begin(Task* t);
  void progress_gates();
  bool progress(FileCore& f);
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

namespace {

RequestKind kind_of(const Task& t) noexcept {
  switch (t.kind) {
    case TaskKind::tree_op:
      switch (t.op.kind) {
        case TreeOp::read: return RequestKind::read;
        case TreeOp::write: return RequestKind::write;
        case TreeOp::fsync: return RequestKind::fsync;
        default: return RequestKind::fdatasync;
      }
    case TaskKind::function: return RequestKind::task;
    case TaskKind::hook: return RequestKind::hook;
    case TaskKind::barrier: return RequestKind::barrier;
    case TaskKind::close: return RequestKind::close;
    default: return RequestKind::flush;
  }
}

void op_complete_trampoline(Operation&, void* ctx) {
  Task* t = static_cast<Task*>(ctx);
  // Through the file: Task line 1, which the worker reads anyway (see Task's layout).
  t->file->ctl->on_op_complete(*t);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and engines

namespace {
/// The options with contradictions corrected, each said on stderr: a weak quota above the
/// strict one would otherwise be lowered silently by Quota, and a user who set only
/// strict_quota would not learn that the default weak_quota (256 MiB) did not fit it.
ControllerOptions corrected_options(const ControllerOptions& o) {
  ControllerOptions c = o;
  if (c.weak_quota > c.strict_quota) {
    // strict / 2: the ratio of the defaults (256 MiB / 512 MiB), so recycling starts halfway.
    c.weak_quota = c.strict_quota / 2;
    std::fprintf(stderr,
                 "tai::Controller: weak_quota (%llu bytes) is above strict_quota (%llu bytes); using weak_quota = "
                 "%llu bytes (strict_quota / 2)\n",
                 static_cast<unsigned long long>(o.weak_quota), static_cast<unsigned long long>(o.strict_quota),
                 static_cast<unsigned long long>(c.weak_quota));
  }
  return c;
}
}  // namespace

ControllerCore::ControllerCore(const ControllerOptions& o)
    : opt(corrected_options(o)), quota(opt.weak_quota, opt.strict_quota) {
  n = opt.workers ? opt.workers : std::max(1u, std::thread::hardware_concurrency());
  lanes = n * std::max(1u, opt.lanes_per_worker);
  if (opt.pending_capacity < 64) opt.pending_capacity = 64;
  if (opt.pending_capacity > 65534) opt.pending_capacity = 65534;  // Boost's fixed-size limit
  lane_claim = std::make_unique<std::atomic<std::uint64_t>[]>(lanes);
  for (unsigned i = 0; i < lanes; ++i) lane_claim[i].store(0, std::memory_order_relaxed);
  wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) throw std::system_error(errno, std::generic_category(), "tai::Controller: eventfd");

  default_engine = opt.engine.empty() ? "auto" : opt.engine;
  if (default_engine == "auto") {
    std::string note;
    auto e = make_engine("auto", opt.engine_options, &note);
    if (!e) throw std::system_error(e.error().code, "tai::Controller: " + e.error().message);
    engine_note = note;
    auto slot = std::make_unique<EngineSlot>();
    slot->name = std::string(e.value()->name());
    default_engine = slot->name;
    slot->engine = std::move(e.value());
    add_engine(slot->name, std::move(slot->engine));
  } else {
    engine_note = default_engine;
  }

  workers.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers.push_back(std::make_unique<Worker>(*this, i));
  threads.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    threads.emplace_back([this, i] {
      Worker& w = *workers[i];
      t_worker = &w;
      set_worker_task_cache();
      if (i == 0)
        master_loop();
      else
        follower_loop(w);
      t_worker = nullptr;
    });
  }
}

ControllerCore::~ControllerCore() {
  shutdown();
  if (wake_fd >= 0) ::close(wake_fd);
}

bool ControllerCore::add_engine(std::string name, std::unique_ptr<Engine> engine) {
  std::lock_guard<std::mutex> lock(engines_mu);
  const unsigned count = slot_count.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < count; ++i)
    if (slots[i]->name == name) return false;
  if (count == kMaxEngines || !engine) return false;
  auto s = std::make_unique<EngineSlot>();
  s->name = std::move(name);
  s->engine = std::move(engine);
  s->sync = dynamic_cast<SyncEngine*>(s->engine.get());
  s->async = s->sync == nullptr && s->engine->capabilities().asynchronous;
  const std::size_t depth = std::max<std::size_t>(1, s->engine->depth());
  s->conts.resize(2 * depth);
  for (std::size_t i = s->conts.size(); i-- > 0;) s->free_conts.push_back(static_cast<std::uint32_t>(i));
  slots[count] = std::move(s);
  slot_count.store(count + 1, std::memory_order_release);  // publishes the slot to slot_owning()
  return true;
}

Result<EngineSlot*> ControllerCore::slot_for(std::string_view name) {
  std::string want(name.empty() || name == "auto" ? std::string_view(default_engine) : name);
  {
    std::lock_guard<std::mutex> lock(engines_mu);
    const unsigned count = slot_count.load(std::memory_order_relaxed);
    for (unsigned i = 0; i < count; ++i)
      if (slots[i]->name == want) return slots[i].get();
  }
  auto e = make_engine(want, opt.engine_options);
  if (!e) return e.error();
  add_engine(want, std::move(e.value()));  // a concurrent open may have added it first: fine
  std::lock_guard<std::mutex> lock(engines_mu);
  const unsigned count = slot_count.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < count; ++i)
    if (slots[i]->name == want) return slots[i].get();
  return Error{std::make_error_code(std::errc::too_many_files_open),
               "tai::Controller: no room for engine '" + want + "' (at most 32 engines per controller)"};
}

EngineSlot* ControllerCore::slot_owning(const EngineFile& f) const noexcept {
  const unsigned count = slot_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < count; ++i)
    if (slots[i]->engine->owns(f)) return slots[i].get();
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Opening and submitting

Result<File> ControllerCore::open(const OpenRequest& req) {
  if (!accepting.load(std::memory_order_acquire))
    return Error{std::make_error_code(std::errc::operation_canceled),
                 "tai::Controller::open(" + *req.path + "): " + kShutdownReason};
  auto slot = slot_for(req.engine);
  if (!slot) return slot.error();
  EngineSlot* s = slot.value();
  auto ef = s->engine->open(*req.path, req.mode);
  if (!ef) return ef.error();

  auto f = std::make_unique<FileCore>();
  f->path = *req.path;
  if (char* real = ::realpath(req.path->c_str(), nullptr)) {
    f->key = real;
    std::free(real);
  } else {
    f->key = *req.path;
  }
  f->tree_name = req.tree;
  f->ctl = this;
  f->slot = s;
  f->engine_name = s->name;
  f->mode = req.mode;
  f->efile = std::move(ef.value());
  f->factory = req.factory;
  f->tree_options = req.tree_options ? *req.tree_options : opt.tree_options;
  try {
    f->tree = req.factory(f->efile.get(), quota, f->tree_options);
  } catch (const std::exception& ex) {
    s->engine->close(*f->efile);
    return Error{std::make_error_code(std::errc::not_enough_memory),
                 "tai::Controller::open(" + f->path + "): cannot make the cache tree: " + ex.what()};
  }
  f->tree_id = f->tree->id();
  f->refs.store(2, std::memory_order_relaxed);  // the handle and the registry
  FileCore* raw = f.release();
  {
    std::lock_guard<std::mutex> lock(files_mu);
    auto it = by_path.find(raw->key);
    // Home worker: a path keeps the home of its earlier handle (a reopen waits for the earlier
    // close on that worker, see `predecessor`); a new path goes to the worker with the fewest
    // files not yet closed, the master first on ties. The master runs every round anyway: a
    // single busy file homed there needs no follower at all, and no barrier wake-up per round.
    if (it != by_path.end()) {
      raw->home = it->second->home;
    } else {
      std::vector<unsigned> load(n, 0);
      for (const FileCore* o : files)
        if (!o->fully_closed.load(std::memory_order_acquire)) ++load[o->home];
      raw->home = static_cast<unsigned>(std::min_element(load.begin(), load.end()) - load.begin());
    }
    if (it != by_path.end() && it->second->closed.load(std::memory_order_acquire) &&
        !it->second->fully_closed.load(std::memory_order_acquire)) {
      raw->predecessor = it->second;  // its data must be written back before we read
      file_retain(raw->predecessor);
    }
    by_path[raw->key] = raw;
    by_tree[raw->tree_id] = raw;
    files.push_back(raw);
  }
  return File(raw);
}

int ControllerCore::producer_index() {
  struct Entry {
    std::uint64_t serial = 0;
    int index = -1;
  };
  static thread_local Entry cache[4];
  static thread_local unsigned victim = 0;
  for (const Entry& e : cache)
    if (e.serial == serial) return e.index;
  int idx = -1;
  {
    std::lock_guard<std::mutex> lock(producers_mu);
    if (producers < kMaxProducers) {
      idx = static_cast<int>(producers++);
      for (auto& w : workers) {
        w->inbox[static_cast<unsigned>(idx)].store(new Worker::Inbox(opt.pending_capacity), std::memory_order_release);
        w->inboxes.store(producers, std::memory_order_release);
      }
    }
  }
  cache[victim++ % 4] = Entry{serial, idx};
  return idx;
}

void ControllerCore::push(unsigned w, Task* t) {
  Worker& wk = *workers[w];
  const bool inside = t_worker != nullptr && &t_worker->c == this;
  if (!inside) {
    if (const int p = producer_index(); p >= 0) {
      Worker::Inbox* q = wk.inbox[static_cast<unsigned>(p)].load(std::memory_order_relaxed);  // stored by this thread
      while (!q->push(t)) {  // back-pressure: wait for room
        ring();
        std::this_thread::yield();
      }
      ring();
      return;
    }
  }
  if (!wk.pending.bounded_push(t)) {
    if (t_worker != nullptr && &t_worker->c == this) {
      // A worker must never wait for a queue that only the workers drain.
      std::lock_guard<std::mutex> lock(wk.overflow_mu);
      wk.overflow.push_back(t);
      wk.has_overflow.store(true, std::memory_order_release);
    } else {
      // Back-pressure: the application thread waits for room.
      do {
        ring();
        std::this_thread::yield();
      } while (!wk.pending.bounded_push(t));
    }
  }
  ring();
}

void ControllerCore::stamp_submit(Task& t) const noexcept {
  if (!opt.latency_histograms) return;
  static thread_local unsigned countdown = 0;  // per submitting thread: no shared counter
  if (countdown != 0 && opt.latency_sample_every > 1) {
    --countdown;
    return;
  }
  countdown = opt.latency_sample_every > 1 ? opt.latency_sample_every - 1 : 0;
  t.stamp(static_cast<std::uint64_t>(monotonic_ns()));
}

Receipt ControllerCore::submit_task(Task* t) {
  const bool inside = t_worker != nullptr && &t_worker->c == this;
  if (!inside && !accepting.load(std::memory_order_acquire)) {
    finish(*t, TaskState::rejected, ECANCELED, kShutdownReason);
    rejected_outside.fetch_add(1, std::memory_order_relaxed);
    return Receipt(t);
  }
  t->owner = this;
  stamp_submit(*t);
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  // Function tasks go to the submitting worker (a continuation's follow-up stays local), else
  // round-robin by a per-thread counter.
  static thread_local unsigned rr = 0;
  const unsigned w = inside ? t_worker->index : (rr++ % n);
  push(w, t);
  return Receipt(t);
}

Receipt ControllerCore::submit_file_task(FileCore* f, Task* t) {
  t->file = f;
  t->owner = this;
  t_file_refs.take(f);
  stamp_submit(*t);
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  push(f->home, t);
  return Receipt(t);
}

void ControllerCore::finish(Task& t, TaskState s, int error, const char* reason) {
  // Every task a worker ends passes here (completed, failed, rejected after submission), so a
  // counted write is uncounted exactly once. Before finish_task publishes the result: a thread
  // that saw the receipt finish then sees the count without this write's bytes.
  if (const std::uint64_t n = t.copy_charge) {
    t.copy_charge = 0;
    // A worker of this controller gives the bytes back once per round part (Worker::part), not
    // per write: the counter's cache line would otherwise move from the submitting thread to the
    // worker and back for every write (about 28 ns per request with the Null engine). The count
    // stays high for the rest of the part, which only delays a waiting submitter by that much.
    if (t_worker != nullptr && &t_worker->c == this)
      t_worker->copy_release += n;
    else
      release_copy(n);
  }
  finish_task(t, s, error, reason);
}

// ---------------------------------------------------------------------------------------------
// Back-pressure on write copies (ControllerOptions::write_copy_budget)
//
// The fast path is one fetch_add at submission and one fetch_sub plus one load (of the same
// cache line) at completion. No lost wake-up: a waiter increments copy_waiters and then loads
// copy_bytes, a completer subtracts from copy_bytes and then loads copy_waiters, all four
// seq_cst, so in their single total order at least one of the two sees the other's write: the
// waiter sees the room, or the completer sees the waiter and notifies it under copy_mu (which
// the waiter holds from its increment until it sleeps, so the notification cannot fall between
// its check and its sleep). On x86 a seq_cst read-modify-write is the same locked instruction
// as a relaxed one and a seq_cst load a plain load: the ordering costs nothing there.

void ControllerCore::charge_copy(Task& t) {
  const std::uint64_t n = t.data.size();
  if (n == 0) return;
  t.copy_charge = n;  // published to the worker by the push
  if (t_worker != nullptr && &t_worker->c == this) {
    // A worker of this controller never waits: the writes that would make room finish only in
    // the rounds it holds up. Relaxed: a count; the task itself is published by the push.
    copy_bytes.fetch_add(n, std::memory_order_relaxed);
    return;
  }
  // Relaxed: a count, nothing is published through it (the push publishes the task); the
  // completer's seq_cst subtraction and this addition are ordered by their atomicity alone.
  const std::uint64_t held = copy_bytes.fetch_add(n, std::memory_order_relaxed);
  if (copy_fits(held, n)) return;
  // Over the budget: take the bytes back (a waiter that saw them is woken by release_copy,
  // since copy_bytes may now have room for it) and wait.
  release_copy(n);
  wait_for_copy_room(n);
}

void ControllerCore::release_copy(std::uint64_t n) noexcept {
  // seq_cst: pairs with the waiter's seq_cst increment of copy_waiters and load of copy_bytes
  // (see above); on x86 the same instruction as relaxed.
  copy_bytes.fetch_sub(n, std::memory_order_seq_cst);
  // seq_cst: the other half of that pairing; usually 0 (nobody waits): the completion then
  // costs nothing more.
  if (copy_waiters.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(copy_mu);
    copy_cv.notify_all();
  }
}

void ControllerCore::wait_for_copy_room(std::uint64_t n) {
  copy_waits.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
  // Admission on this path is a compare-and-swap, never an addition taken back, so it never
  // shows other waiters bytes it does not keep. Relaxed loads and CAS: a count (see above).
  auto try_admit = [this, n]() noexcept {
    std::uint64_t held = copy_bytes.load(std::memory_order_relaxed);
    while (copy_fits(held, n))
      if (copy_bytes.compare_exchange_weak(held, held + n, std::memory_order_relaxed)) return true;
    return false;
  };
  // Spin first: writes into the cache finish within a round, often sooner than a sleep and a
  // wake-up would take.
  const std::int64_t until = monotonic_ns() + opt.spin_ns;
  for (unsigned i = 0;; ++i) {
    if (try_admit()) return;
    cpu_relax();
    if ((i & 63) == 63 && monotonic_ns() >= until) break;
  }
  std::unique_lock<std::mutex> lock(copy_mu);
  // seq_cst: pairs with release_copy's seq_cst load of copy_waiters (see above).
  copy_waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    // seq_cst load: the other half of the pairing with release_copy's subtraction.
    if (copy_fits(copy_bytes.load(std::memory_order_seq_cst), n) && try_admit()) break;
    copy_cv.wait(lock);
  }
  // Relaxed: under copy_mu; a completer that still sees the old value only notifies for nothing.
  copy_waiters.fetch_sub(1, std::memory_order_relaxed);
}

void ControllerCore::add_failure(std::string what) {
  std::lock_guard<std::mutex> lock(report_mu);
  failures.push_back(std::move(what));
}

// ---------------------------------------------------------------------------------------------
// Completion of tree operations (on the worker that ran the last step)

void ControllerCore::on_op_complete(Task& t) {
  Worker* w = t_worker;
  FileCore* f = t.file;
  const std::int64_t res = t.op.result();
  TaskState state = TaskState::done;
  int err = 0;
  const char* reason = nullptr;
  if (res < 0) {
    state = TaskState::failed;
    err = static_cast<int>(-res);
  }
  if (t.op.kind == TreeOp::fsync || t.op.kind == TreeOp::fdatasync) {
    // The tree failed this fsync with its unrecovered sync error, or cleared the error.
    const std::error_code se = f->tree->sync_error();
    f->sticky.store(se.value(), std::memory_order_relaxed);
    if (se && res == -se.value()) reason = kUnrecoveredSync;
  }
  t.result = res < 0 ? 0 : res;
  switch (t.kind) {
    case TaskKind::tree_op:
    case TaskKind::barrier: {
      const RequestKind k = kind_of(t);
      if (w && res > 0) {
        if (t.op.kind == TreeOp::read) w->bytes_read.add(static_cast<std::uint64_t>(res));
        if (t.op.kind == TreeOp::write) w->bytes_written.add(static_cast<std::uint64_t>(res));
      }
      if (w && state == TaskState::failed) w->failed.add();
      if (w && t.timed) {
        const auto now = static_cast<std::uint64_t>(monotonic_ns());
        w->latency[static_cast<std::size_t>(k)][log2_bucket(now > t.submit_ns ? now - t.submit_ns : 0)].add();
      }
      // A barrier's reference belongs to its gate, whose worker may release it as soon as it
      // sees the task finished, while finish() still touches the task after publishing it (the
      // deferred wake's reference, the continuation). So this worker holds a reference of its
      // own across finish(): taken while the gate's is still held (the gate waits for the
      // finish), so the count cannot be at zero, and the gate's worker sees it (it
      // happens-before the finish's release).
      if (t.kind == TaskKind::barrier) {
        retain_task(&t);
        finish(t, state, err, reason);
        release_task(&t);
        return;
      }
      finish(t, state, err, reason);
      break;
    }
    case TaskKind::write_back: {
      if (state == TaskState::done) {
        if (const std::error_code rec = f->tree->recorded_error()) {
          state = TaskState::failed;
          err = rec.value();
          reason = "an earlier write-back of this file failed";
        }
      }
      if (Task* p = t.parent) {
        if (err != 0) {
          int expected = 0;
          p->part_error.compare_exchange_strong(expected, err, std::memory_order_relaxed);
        }
        if (p->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          const int pe = p->part_error.load(std::memory_order_relaxed);
          if (w && p->timed) {
            const auto now = static_cast<std::uint64_t>(monotonic_ns());
            w->latency[static_cast<std::size_t>(RequestKind::flush)][log2_bucket(now - p->submit_ns)].add();
          }
          finish(*p, pe ? TaskState::failed : TaskState::done, pe, pe ? "a file's write-back failed" : nullptr);
          release_task(p);
        }
      }
      finish(t, state, err, reason);
      break;
    }
    case TaskKind::evict:
      if (w) w->evictions.add();
      evictions_in_flight.fetch_sub(1, std::memory_order_relaxed);
      finish(t, state, err, reason);
      break;
    default:
      finish(t, state, err, reason);
      break;
  }
  release_task(&t);
  if (w)
    w->release_later(f);
  else
    file_release(f);
}

// ---------------------------------------------------------------------------------------------
// Worker: one part of a round

void Worker::release_later(FileCore* f) {
  // Usually one file or a few: a short scan of the latest entries.
  for (std::size_t i = releases_.size(), k = 0; i-- > 0 && k < 4; ++k)
    if (releases_[i].first == f) {
      ++releases_[i].second;
      return;
    }
  releases_.emplace_back(f, 1u);
}

void Worker::give_back_copies() noexcept {
  if (copy_release == 0) return;
  c.release_copy(copy_release);
  copy_release = 0;
}

void Worker::flush_releases(bool all) {
  give_back_copies();
  if (releases_.size() > kReleaseFiles) all = true;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < releases_.size(); ++i) {
    auto [f, n] = releases_[i];
    if (!all && n < kReleaseBatch) {
      releases_[keep++] = releases_[i];
      continue;
    }
    file_release(f, n);
  }
  releases_.resize(keep);
}

void Worker::count_request(const Task& t) { requests[static_cast<std::size_t>(kind_of(t))].add(); }

void Worker::reject(Task& t, int error, const char* reason) {
  c.finish(t, TaskState::rejected, error, reason);
  FileCore* f = t.file;
  if (Task* p = t.parent) {  // a flush part of a file that closed meanwhile: nothing to do there
    if (p->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      const int pe = p->part_error.load(std::memory_order_relaxed);
      c.finish(*p, pe ? TaskState::failed : TaskState::done, pe, pe ? "a file's write-back failed" : nullptr);
      release_task(p);
    }
  }
  release_task(&t);
  if (f) file_release(f);
}

void Worker::run_function(Task& t) {
  t.phase.store(static_cast<std::uint8_t>(TaskState::running), std::memory_order_relaxed);
  TaskState s = TaskState::done;
  int err = 0;
  const char* reason = nullptr;
  // Unlike a continuation, a task may block, for instance until a thread it posted to (a
  // CompletionQueue) answers: what it posts wakes at once, not at the part's next wake point,
  // which comes only after it returns.
  DeferredWakes* const deferred = t_deferred_wakes;
  t_deferred_wakes = nullptr;
  try {
    t.fn();
  } catch (...) {
    s = TaskState::failed;
    err = ECANCELED;
    reason = "the function threw an exception";
  }
  t_deferred_wakes = deferred;
  t.fn.reset();  // destroy what it captured now, not when the task is recycled
  if (s == TaskState::failed) failed.add();
  if (t.timed) {
    const auto now = static_cast<std::uint64_t>(monotonic_ns());
    latency[static_cast<std::size_t>(kind_of(t))][log2_bucket(now - t.submit_ns)].add();
  }
  c.finish(t, s, err, reason);
}

void Worker::admit(Task* t) {
  count_request(*t);
  if (t->kind == TaskKind::function) {
    run_function(*t);
    release_task(t);
    return;
  }
  FileCore& f = *t->file;
  if (f.predecessor || f.gate || f.held_head) {
    t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
    t->next = nullptr;
    if (f.held_tail)
      f.held_tail->next = t;
    else
      f.held_head = t;
    f.held_tail = t;
    if (!f.listed) {
      f.listed = true;
      gated.push_back(&f);
    }
    return;
  }
  begin(t);
}

void Worker::begin(Task* t) {
  FileCore& f = *t->file;
  if (f.tree_gone) {
    // After the close: user operations are rejected; internal ones have nothing left to do.
    if (t->kind == TaskKind::write_back || t->kind == TaskKind::evict || t->kind == TaskKind::collect) {
      if (t->kind == TaskKind::evict) c.evictions_in_flight.fetch_sub(1, std::memory_order_relaxed);
      reject(*t, 0, nullptr);
    } else {
      reject(*t, EBADF, kClosedReason);
    }
    return;
  }
  auto start_op = [&](Task* task) {
    task->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
    // Usually already so (a recycled task keeps them): a store would take line 1 of the task
    // from the submitting thread, which writes the next request's parameters there.
    if (task->op.on_complete != &op_complete_trampoline) task->op.on_complete = &op_complete_trampoline;
    if (task->op.context != task) task->op.context = task;
    f.tree->start(task->op, *this);
    // The tree's nodes have grown past what its blocks need: a collect operation right behind
    // this one, in the file's order like any other (one at a time per tree; see
    // TreeCore::take_collect_request). Internal: no receipt, nothing to report.
    if (f.tree->take_collect_request()) {
      Task* g = acquire_task();  // refs = 1: the controller's
      g->kind = TaskKind::collect;
      g->file = &f;
      g->owner = &c;
      g->op.kind = TreeOp::collect;
      g->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
      g->op.on_complete = &op_complete_trampoline;
      g->op.context = g;
      file_retain(&f);  // the task's, dropped by its completion like every file task's
      f.tree->start(g->op, *this);
    }
  };
  auto gate_on = [&](Task* task) {
    f.gate = task;
    if (!f.listed) {
      f.listed = true;
      gated.push_back(&f);
    }
  };
  switch (t->kind) {
    case TaskKind::tree_op:
    case TaskKind::write_back:
    case TaskKind::evict:
    case TaskKind::collect:
      start_op(t);
      return;
    case TaskKind::hook:
      if (f.tree->idle()) {
        run_function(*t);
        release_task(t);
        file_release(&f);
      } else {
        t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
        gate_on(t);
      }
      return;
    case TaskKind::barrier:
      t->op.kind = TreeOp::fdatasync;
      gate_on(t);
      start_op(t);
      return;
    case TaskKind::close:
      t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
      f.close_phase = 0;
      gate_on(t);
      progress(f);
      return;
    default:
      reject(*t, EINVAL, "internal: a task of this kind has no file");
      return;
  }
}

/// Moves the file's gate forward as far as it can; true when the file has nothing gated left.
bool Worker::progress(FileCore& f) {
  for (;;) {
    if (f.predecessor) {
      if (!f.predecessor->fully_closed.load(std::memory_order_acquire)) return false;
      file_release(f.predecessor);
      f.predecessor = nullptr;
      // The tree was made at open(), when the file's size did not yet include what the
      // predecessor wrote back: make it again now (it has done nothing yet).
      try {
        std::unique_ptr<TreeCore> fresh = f.factory(f.efile.get(), c.quota, f.tree_options);
        std::lock_guard<std::mutex> lock(c.files_mu);
        c.by_tree.erase(f.tree_id);
        f.tree = std::move(fresh);
        f.tree_id = f.tree->id();
        c.by_tree[f.tree_id] = &f;
      } catch (const std::exception&) {
        // No memory for a new tree: keep the first one. Its size may be short (reads of data
        // the predecessor appended stop early), which is reported nowhere: record it.
        c.add_failure("reopen of " + f.path + ": could not refresh the file size after the earlier handle closed");
      }
    }
    if (Task* g = f.gate) {
      switch (g->kind) {
        case TaskKind::hook:
          if (!f.tree->idle()) return false;
          f.gate = nullptr;
          run_function(*g);
          release_task(g);
          file_release(&f);
          break;
        case TaskKind::barrier:
          if (!(g->word.load(std::memory_order_acquire) & Task::kFinished)) return false;
          f.gate = nullptr;
          release_task(g);  // the reference on_op_complete left for the gate
          file_release(&f);
          break;
        case TaskKind::close: {
          if (f.close_phase == 0) {
            if (!f.tree->idle()) return false;
            g->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
            g->op.kind = TreeOp::write_back;
            g->op.offset = 0;
            g->op.length = 0;
            g->op.on_complete = nullptr;  // the close finishes here, after the round (see below)
            g->op.context = g;            // Worker::io finds the file's engine through it
            f.close_phase = 1;
            f.tree->start(g->op, *this);
          }
          // The write-back's last step may still be returning in this round: the tree goes
          // only in a later round (this runs at the start of a round, after the barrier).
          if (!g->op.done() || !f.tree->idle()) return false;
          int err = g->op.result() < 0 ? static_cast<int>(-g->op.result()) : 0;
          const char* reason = err ? "writing back the file's cached data failed" : nullptr;
          if (!err) {
            if (const std::error_code rec = f.tree->recorded_error()) {
              err = rec.value();
              reason = "an earlier write-back of this file failed";
            }
          }
          if (!err) {
            if (const std::error_code se = f.tree->sync_error()) {
              err = se.value();
              reason = kUnrecoveredSync;
            }
          }
          {
            std::lock_guard<std::mutex> lock(c.files_mu);
            c.retired += f.tree->stats();
            f.tree.reset();  // its blocks go back to the quota
            c.by_tree.erase(f.tree_id);
          }
          const std::error_code ec = f.slot->engine->close(*f.efile);
          if (!err && ec) {
            err = ec.value();
            reason = "closing the engine file failed";
          }
          f.efile.reset();
          f.tree_gone = true;
          f.gate = nullptr;
          {
            std::lock_guard<std::mutex> lock(c.files_mu);
            auto it = c.by_path.find(f.key);
            if (it != c.by_path.end() && it->second == &f) c.by_path.erase(it);
            c.files.erase(std::remove(c.files.begin(), c.files.end(), &f), c.files.end());
          }
          if (err && f.detached) {
            c.add_failure("close of " + f.path + ": " + (reason ? std::string(reason) + ": " : std::string()) +
                          std::generic_category().message(err));
          }
          if (g->timed) {
            const auto now = static_cast<std::uint64_t>(monotonic_ns());
            latency[static_cast<std::size_t>(RequestKind::close)][log2_bucket(now - g->submit_ns)].add();
          }
          if (err) failed.add();
          c.finish(*g, err ? TaskState::failed : TaskState::done, err, reason);
          release_task(g);
          // Release: a successor handle of the same path (same home worker) and status() see
          // the file fully written back and closed.
          f.fully_closed.store(true, std::memory_order_release);
          file_release(&f);  // the close task's reference
          file_release(&f);  // the registry's reference (f may be gone now only if no handle,
                             // no held task and no thread's reserve refers to it)
          break;
        }
        default:
          return false;
      }
    }
    // No gate: release held tasks in order until one gates the file again.
    while (!f.gate && !f.predecessor && f.held_head) {
      Task* t = f.held_head;
      f.held_head = t->next;
      if (!f.held_head) f.held_tail = nullptr;
      t->next = nullptr;
      begin(t);
    }
    if (!f.gate && !f.predecessor && !f.held_head) return true;
  }
}

void Worker::progress_gates() {
  if (gated.empty()) return;
  // progress() may append to `gated` (begin() of a released task that gates again): index loop.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < gated.size(); ++i) {
    FileCore* f = gated[i];
    // Keep a reference across progress(): a close inside drops the registry's.
    file_retain(f);
    if (progress(*f)) {
      f->listed = false;
    } else {
      gated[keep++] = f;
    }
    file_release(f);
  }
  gated.resize(keep);
}

bool Worker::io_now(const Request& r, Operation& op, std::int64_t& result) {
  if (r.file == nullptr || op.context == nullptr) return false;
  EngineSlot* s = static_cast<Task*>(op.context)->file->slot;
  if (s == nullptr || s->sync == nullptr) return false;
  result = s->sync->execute(r).result;
  return true;
}

void Worker::io(const Request& r, const Step& cont) {
  if (r.op == Op::fsync || r.op == Op::fdatasync) engine_syncs.add();
  // The engine that opened the file: the FileCore knows it (a wrapper engine's files name
  // the inner engine as their engine(), so the file cannot tell).
  EngineSlot* s = nullptr;
  if (r.file != nullptr) {
    if (cont.op != nullptr && cont.op->context != nullptr)
      s = static_cast<Task*>(cont.op->context)->file->slot;
    else
      s = c.slot_owning(*r.file);
  }
  auto deliver = [&](std::int64_t result) {
    Step k = cont;
    k.io_result = result;
    if (in_round_ && own_lane(lane_of(k.node)))
      urgent_.push_back(k);
    else
      emit(k);
  };
  if (s == nullptr) {
    deliver(-EBADF);
    return;
  }
  if (s->sync) {
    deliver(s->sync->execute(r).result);
    return;
  }
  if (s->async) {
    backlog.push_back(AsyncIo{s, r, cont});
    return;
  }
  // Neither a SyncEngine nor asynchronous (a wrapper such as `fault` around a synchronous
  // engine): drive it inline, one request at a time, under its lock.
  std::lock_guard<std::mutex> lock(s->mu);
  Request q = r;
  q.user_data = 0;
  Completion done{};
  if (s->engine->submit(&q, 1) != 1) {
    deliver(-EAGAIN);
    return;
  }
  while (s->engine->reap(&done, 1, 1) == 0) {
  }
  deliver(done.result);
}

void Worker::reap_slot(EngineSlot& s) {
  Completion got[64];
  for (;;) {
    const std::size_t k = s.engine->reap(got, 64, 0);
    for (std::size_t i = 0; i < k; ++i) {
      const auto idx = static_cast<std::uint32_t>(got[i].user_data);
      Step step = s.conts[idx];
      s.free_conts.push_back(idx);
      step.io_result = got[i].result;
      emit(step);
    }
    s.in_flight.store(s.in_flight.load(std::memory_order_relaxed) - k, std::memory_order_relaxed);
    if (k < 64) return;
  }
}

void Worker::drive_async() {
  // Submit what this worker's steps asked for, engine by engine in order of first appearance
  // (requests of one engine keep their order), then reap every engine with requests in flight,
  // so that completions are taken inside the rounds. What an engine refuses (depth reached)
  // stays in the backlog for the next round.
  if (!backlog.empty()) {
    EngineSlot* handled[ControllerCore::kMaxEngines];
    unsigned nhandled = 0;
    for (std::size_t i = 0; i < backlog.size(); ++i) {
      EngineSlot* s = backlog[i].slot;
      if (s == nullptr || std::find(handled, handled + nhandled, s) != handled + nhandled) continue;
      handled[nhandled++] = s;
      std::lock_guard<std::mutex> lock(s->mu);
      Request batch[64];
      std::size_t pos[64];
      // Splitting a batch is safe: the controller never sets Request::link (a kernel link
      // chain would end at a call's boundary); requests of one engine keep their order.
      const std::size_t batch_max = std::clamp<std::size_t>(c.opt.engine_submit_batch, 1, 64);
      std::size_t m = 0;
      bool full = false;
      auto submit_batch = [&] {
        const std::size_t taken = s->engine->submit(batch, m);
        engine_submit_calls.add();
        for (std::size_t j = 0; j < taken; ++j) backlog[pos[j]].slot = nullptr;
        for (std::size_t j = taken; j < m; ++j) s->free_conts.push_back(static_cast<std::uint32_t>(batch[j].user_data));
        s->in_flight.store(s->in_flight.load(std::memory_order_relaxed) + taken, std::memory_order_relaxed);
        if (taken < m) full = true;
        m = 0;
      };
      for (std::size_t j = i; j < backlog.size() && !full; ++j) {
        if (backlog[j].slot != s) continue;
        if (s->free_conts.empty()) {
          full = true;
          break;
        }
        const std::uint32_t ci = s->free_conts.back();
        s->free_conts.pop_back();
        s->conts[ci] = backlog[j].cont;
        batch[m] = backlog[j].request;
        batch[m].user_data = ci;
        pos[m++] = j;
        if (m == batch_max) submit_batch();
      }
      if (m) submit_batch();
      reap_slot(*s);
    }
    backlog.erase(std::remove_if(backlog.begin(), backlog.end(), [](const AsyncIo& a) { return a.slot == nullptr; }),
                  backlog.end());
  }
  const unsigned count = c.slot_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < count; ++i) {
    EngineSlot& s = *c.slots[i];
    if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
    std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
    if (!lock.owns_lock()) continue;  // another worker is reaping it now
    reap_slot(s);
  }
}

/// Claims `lane` for this round if nobody has (exchange of the round number, acq_rel: exactly one
/// worker holds a lane per round, and it sees what the lane's previous holders wrote). Holding
/// it, this worker runs every step of the lane's nodes in this round: first the lane's input
/// (steps emitted for it in the previous round, by every worker), then the steps this worker
/// emitted for it earlier in this round before it held it, then new ones as they are emitted.
/// Per node that is emission order: a node's visits come from its parent's steps, which in one
/// round all run on the one worker holding the parent's lane (root visits: from start() on the
/// file's home worker), so no other worker can hold visits of that node for this round.
bool Worker::own_lane(unsigned lane) {
  if (claimed_[lane] == round_) return true;
  if (c.lane_claim[lane].exchange(round_, std::memory_order_acq_rel) == round_) return false;
  claimed_[lane] = round_;
  if (lane % c.n != index) steals.add();
  for (unsigned p = 0; p < c.n; ++p) {
    std::vector<Step>& v = c.workers[p]->out[parity_in_][lane];
    now_.insert(now_.end(), v.begin(), v.end());
    v.clear();
  }
  std::vector<Step>& mine = out[parity_out][lane];
  now_.insert(now_.end(), mine.begin(), mine.end());
  mine.clear();
  return true;
}

void Worker::drain() {
  for (;;) {
    while (!urgent_.empty()) {
      const Step u = urgent_.back();
      urgent_.pop_back();
      u.run(*this);
      ++ran_;
    }
    if (now_head_ == now_.size()) break;
    const Step s = now_[now_head_++];  // by value: running it may grow now_
    s.run(*this);
    ++ran_;
  }
  now_.clear();
  now_head_ = 0;
}

void Worker::part(std::uint64_t round) {
  round_ = round;
  parity_in_ = static_cast<unsigned>(round & 1);
  parity_out = parity_in_ ^ 1u;
  in_round_ = true;
  ran_ = 0;
  t_deferred_wakes = &wakes_;
  std::fill(deferred_[parity_out].begin(), deferred_[parity_out].end(), 0);

  // 1. Gates, first: every step of the previous round has returned, so a file whose tree is
  //    idle can be closed (its tree destroyed) or run its hook.
  progress_gates();
  drain();

  // 2. Ready steps: the lanes that have input, own lanes first, then others' (stealing).
  auto has_input = [&](unsigned lane) {
    for (unsigned p = 0; p < c.n; ++p)
      if (c.workers[p]->deferred_[parity_in_][lane]) return true;
    return false;
  };
  for (unsigned k = 0; k < c.n; ++k) {
    const unsigned owner = (index + k) % c.n;
    for (unsigned lane = owner; lane < c.lanes; lane += c.n)
      if (has_input(lane) && own_lane(lane)) drain();
  }
  // The waiters of what finished so far are woken now, before new work is admitted: a program
  // that resubmits on completion then gets its requests into this part's admission and its
  // engine submission (when it shares this CPU, it runs inside this wake-up call and pushes
  // them first) rather than one round later.
  if (!wakes_.empty()) wakes_.wake();

  // 3. New work from Pending (bounded per round so that a flood cannot starve the rest). Taken
  //    at the end of the part, so that what arrived while the round ran starts now.
  std::size_t taken = 0;
  const std::size_t cap = c.opt.pending_capacity;
  Task* t = nullptr;
  const unsigned ninbox = inboxes.load(std::memory_order_acquire);
  for (unsigned p = 0; p < ninbox && taken < cap; ++p) {
    Inbox* q = inbox[p].load(std::memory_order_acquire);
    // In batches: one load of the producer's index and one store of ours per batch rather than
    // per task, so the two cache lines move between the cores once per batch.
    Task* batch[64];
    for (;;) {
      const std::size_t got = q->pop(batch, std::min<std::size_t>(64, cap - taken));
      for (std::size_t i = 0; i < got; ++i) admit(batch[i]);
      taken += got;
      if (got < 64 || taken >= cap) break;
    }
  }
  while (taken < cap && pending.pop(t)) {
    admit(t);
    ++taken;
  }
  if (has_overflow.load(std::memory_order_acquire)) {
    std::deque<Task*> mine;
    {
      std::lock_guard<std::mutex> lock(overflow_mu);
      mine.swap(overflow);
      has_overflow.store(false, std::memory_order_relaxed);
    }
    for (Task* x : mine) admit(x);
    taken += mine.size();
  }
  max_pending.raise_to(taken);
  drain();

  // 4. Asynchronous engines: submit what the steps asked for, reap what completed (and run the
  //    continuations whose lanes this worker can hold), submit what those asked for.
  for (int pass = 0; pass < 2; ++pass) {
    drive_async();
    drain();
    if (backlog.empty()) break;
  }
  in_round_ = false;
  t_deferred_wakes = nullptr;
  give_back_copies();  // before the wake-ups: a woken submitter finds the room at once
  wakes_.wake();
  flush_releases(false);
  steps.add(ran_);
  max_ready.raise_to(ran_);
}

// ---------------------------------------------------------------------------------------------
// Rounds: the master decides, the followers follow

void ControllerCore::follower_loop(Worker& w) {
  std::uint32_t seen = 0;
  for (;;) {
    // Wait to be told to run a round: spin, then sleep on `go`.
    std::uint32_t g = w.go.load(std::memory_order_acquire);
    if (g == seen) {
      const std::int64_t until = monotonic_ns() + opt.spin_ns;
      for (unsigned i = 0; (g = w.go.load(std::memory_order_acquire)) == seen; ++i) {
        cpu_relax();
        if ((i & 63) == 63 && monotonic_ns() >= until) break;
      }
      while (g == seen) {
        w.asleep.store(true, std::memory_order_seq_cst);
        if (w.go.load(std::memory_order_seq_cst) == seen) {
          w.sleeps.add();
          w.flush_releases();
          futex_wait(w.go, seen);
        }
        w.asleep.store(false, std::memory_order_relaxed);
        g = w.go.load(std::memory_order_acquire);
      }
    }
    seen = g;
    const RoundKind k = round_kind;
    const std::uint64_t r = round;
    if (k == RoundKind::stop) {
      w.flush_releases();
      return;
    }
    w.part(r);
    // Arrive (seq_cst RMW: publishes this part's writes to the master's acquire; then the
    // master_sleeping check pairs with the master's seq_cst store before it sleeps).
    arrived.fetch_add(1, std::memory_order_seq_cst);
    if (master_sleeping.load(std::memory_order_seq_cst)) futex_wake(arrived);
  }
}

bool ControllerCore::gate_can_progress(const FileCore& f) const noexcept {
  if (f.predecessor) return f.predecessor->fully_closed.load(std::memory_order_acquire);
  const Task* g = f.gate;
  if (!g) return f.held_head != nullptr;
  switch (g->kind) {
    case TaskKind::hook: return f.tree->idle();
    case TaskKind::barrier: return (g->word.load(std::memory_order_acquire) & Task::kFinished) != 0;
    case TaskKind::close: return f.close_phase == 0 ? f.tree->idle() : (g->op.done() && f.tree->idle());
    default: return false;
  }
}

/// Work only worker w can do: take from its own queues, move its own gates, submit its own
/// backlog. Called by the master with every follower parked.
bool ControllerCore::has_local_work(const Worker& w) const {
  if (!w.pending.empty() || w.has_overflow.load(std::memory_order_acquire) || !w.backlog.empty()) return true;
  const unsigned ninbox = w.inboxes.load(std::memory_order_acquire);
  for (unsigned p = 0; p < ninbox; ++p)
    if (w.inbox[p].load(std::memory_order_acquire)->read_available() != 0) return true;
  for (const FileCore* f : w.gated)
    if (gate_can_progress(*f)) return true;
  return false;
}

/// Anything for a normal round to do? Called by the master with every follower parked.
bool ControllerCore::something_runnable() {
  const unsigned parity_next = static_cast<unsigned>((round + 1) & 1);
  for (auto& wp : workers) {
    if (has_local_work(*wp)) return true;
    for (const auto& v : wp->out[parity_next])
      if (!v.empty()) return true;
  }
  return false;
}

void ControllerCore::issue_evictions() {
  constexpr std::uint32_t kMaxEvictions = 64;
  std::uint64_t want = quota.over_weak_bytes();
  BlockRecord rec;
  while (want > 0 && evictions_in_flight.load(std::memory_order_relaxed) < kMaxEvictions && quota.pop_oldest(rec)) {
    FileCore* f = nullptr;
    std::uint64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(files_mu);
      auto it = by_tree.find(rec.tree_id);
      if (it == by_tree.end() || !it->second->tree) continue;  // the tree is gone: a stale record
      f = it->second;
      if (rec.depth >= f->tree->levels()) continue;
      bytes = std::uint64_t{1} << std::min(63u, f->tree->node_shift(rec.depth));
      file_retain(f);
    }
    Task* t = acquire_task();  // refs = 1: the controller's (no receipt)
    t->kind = TaskKind::evict;
    t->file = f;
    t->op.kind = TreeOp::evict;
    t->op.offset = rec.base;
    t->op.evict_seq = rec.seq;
    t->op.evict_depth = rec.depth;
    evictions_in_flight.fetch_add(1, std::memory_order_relaxed);
    push(f->home, t);
    want = want > bytes ? want - bytes : 0;
  }
}

bool ControllerCore::issue_flush() {
  // Write back whole files, most dirty first, until at least half of the dirty bytes are covered.
  std::vector<std::pair<std::uint64_t, FileCore*>> dirty;
  std::uint64_t total = 0;
  {
    std::lock_guard<std::mutex> lock(files_mu);
    for (FileCore* f : files) {
      if (!f->tree) continue;
      const std::uint64_t d = f->tree->stats().dirty_bytes;
      if (d == 0) continue;
      dirty.emplace_back(d, f);
      total += d;
      file_retain(f);
    }
  }
  if (dirty.empty()) return false;
  std::sort(dirty.begin(), dirty.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::uint64_t covered = 0;
  for (auto& [d, f] : dirty) {
    if (covered * 2 >= total) {
      file_release(f);
      continue;
    }
    covered += d;
    Task* t = acquire_task();
    t->kind = TaskKind::write_back;
    t->file = f;  // takes the reference retained above
    t->op.kind = TreeOp::write_back;
    push(f->home, t);
  }
  return true;
}

void ControllerCore::master_sleep(bool with_engines, std::int64_t timeout_ns) {
  workers[0]->flush_releases();
  pollfd fds[kMaxEngines + 1];
  nfds_t nfds = 0;
  fds[nfds++] = pollfd{wake_fd, POLLIN, 0};
  bool engine_without_fd = false;
  if (with_engines) {
    const unsigned count = slot_count.load(std::memory_order_acquire);
    for (unsigned i = 0; i < count; ++i) {
      EngineSlot& s = *slots[i];
      if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
      const int fd = s.engine->eventfd();
      if (fd >= 0)
        fds[nfds++] = pollfd{fd, POLLIN, 0};
      else
        engine_without_fd = true;
    }
  }
  if (engine_without_fd && (timeout_ns < 0 || timeout_ns > 100'000)) timeout_ns = 100'000;  // poll the engine
  timespec ts = ns_to_timespec(timeout_ns);
  timespec* tsp = timeout_ns >= 0 ? &ts : nullptr;
  workers[0]->sleeps.add();
  ::ppoll(fds, nfds, tsp, nullptr);
  // Consume the engines' counters (nonblocking eventfds; the completions themselves are reaped
  // by the next round).
  for (nfds_t i = 1; i < nfds; ++i)
    if (fds[i].revents & POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(fds[i].fd, &v, sizeof v);
    }
}

RoundKind ControllerCore::decide() {
  for (;;) {
    if (something_runnable()) {
      idle_since = -1;
      if (quota.over_weak()) {
        issue_evictions();
        rounds_recycle.add();
        return RoundKind::recycle;
      }
      if (closing.load(std::memory_order_relaxed)) {
        rounds_close.add();
        return RoundKind::close;
      }
      rounds_normal.add();
      return RoundKind::normal;
    }
    // Nothing to run now. Requests at asynchronous engines?
    std::uint64_t at_engines = 0;
    const unsigned count = slot_count.load(std::memory_order_acquire);
    for (unsigned i = 0; i < count; ++i)
      if (slots[i]->async) at_engines += slots[i]->in_flight.load(std::memory_order_relaxed);
    if (at_engines) {
      // Reap what is there (into the master's outbox for the next round), else sleep until an
      // engine's eventfd or the doorbell rings, after spinning for the spin budget.
      const std::int64_t until = monotonic_ns() + opt.io_spin_ns;
      bool got = false;
      do {
        for (unsigned i = 0; i < count && !got; ++i) {
          EngineSlot& s = *slots[i];
          if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
          std::lock_guard<std::mutex> lock(s.mu);
          const std::uint64_t before = s.in_flight.load(std::memory_order_relaxed);
          workers[0]->parity_out = static_cast<unsigned>((round + 1) & 1);
          workers[0]->reap_slot(s);
          got = s.in_flight.load(std::memory_order_relaxed) != before;
        }
        if (got || something_runnable()) break;
        cpu_relax();
      } while (monotonic_ns() < until);
      if (got) continue;
      // Dekker with the submitters (see `sleeping`).
      std::uint64_t drain;
      while (::read(wake_fd, &drain, sizeof drain) > 0) {
      }
      sleeping.store(true, std::memory_order_seq_cst);
      AsymmetricFence::heavy();
      if (!something_runnable()) master_sleep(true, -1);
      sleeping.store(false, std::memory_order_relaxed);
      continue;
    }
    if (quota.over_weak() && evictions_in_flight.load(std::memory_order_relaxed) == 0) {
      issue_evictions();
      if (something_runnable()) continue;
    }
    // Quiet. Shutting down and every file closed: stop.
    if (closing.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(files_mu);
      if (files.empty()) return RoundKind::stop;
    }
    const std::int64_t now = monotonic_ns();
    if (idle_since < 0) idle_since = now;
    std::int64_t timeout = -1;
    if (opt.flush_idle_ns >= 0) {
      bool dirty = false;
      {
        std::lock_guard<std::mutex> lock(files_mu);
        for (FileCore* f : files)
          if (f->tree && f->tree->stats().dirty_bytes) {
            dirty = true;
            break;
          }
      }
      if (dirty) {
        if (now - idle_since >= opt.flush_idle_ns) {
          if (issue_flush()) {
            idle_since = -1;
            rounds_flush.add();
            return RoundKind::flush;
          }
        } else {
          timeout = opt.flush_idle_ns - (now - idle_since);
        }
      }
    }
    // Idle. Spin for the budget first (new work usually follows soon), then the master sleeps
    // on the doorbell (the followers sleep on the barrier).
    {
      const std::int64_t until = now + opt.spin_ns;
      bool woke = false;
      for (unsigned i = 0;; ++i) {
        cpu_relax();
        if ((i & 15) == 15) {
          if (something_runnable()) {
            woke = true;
            break;
          }
          if (monotonic_ns() >= until) break;
        }
      }
      if (woke) continue;
    }
    std::uint64_t drain;
    while (::read(wake_fd, &drain, sizeof drain) > 0) {
    }
    sleeping.store(true, std::memory_order_seq_cst);
    AsymmetricFence::heavy();
    if (!something_runnable() && !(closing.load(std::memory_order_relaxed) && timeout < 0 && [&] {
          std::lock_guard<std::mutex> lock(files_mu);
          return files.empty();
        }())) {
      rounds_idle.add();
      // While closing, wake up now and then: close progress needs no doorbell, but be safe.
      master_sleep(false, closing.load(std::memory_order_relaxed) && timeout < 0 ? 1'000'000 : timeout);
    }
    sleeping.store(false, std::memory_order_relaxed);
  }
}

/// Does follower w have to take part in the next round? Only a worker can take from its own
/// queues, move its own gates and submit its own backlog; lanes of steps anyone can run, so the
/// followers join for those only when there are enough steps to share (kShareSteps). Otherwise
/// they sleep on and the master runs the round alone: a single busy file costs no barrier
/// wake-ups. Called by the master with every follower parked.
bool ControllerCore::needs(const Worker& w, std::uint64_t input_steps) const {
  constexpr std::uint64_t kShareSteps = 128;
  return input_steps >= kShareSteps || has_local_work(w);
}

void ControllerCore::master_loop() {
  Worker& m = *workers[0];
  std::uint32_t expected = 0;  // followers taking part in the current round
  for (;;) {
    // Wait for the followers of the last round: spin, then sleep on `arrived`.
    if (expected != 0) {
      std::uint32_t a = arrived.load(std::memory_order_acquire);
      if (a != expected) {
        const std::int64_t until = monotonic_ns() + opt.spin_ns;
        for (unsigned i = 0; (a = arrived.load(std::memory_order_acquire)) != expected; ++i) {
          cpu_relax();
          if ((i & 63) == 63 && monotonic_ns() >= until) break;
        }
        while (a != expected) {
          master_sleeping.store(true, std::memory_order_seq_cst);
          a = arrived.load(std::memory_order_seq_cst);
          if (a != expected) {
            m.sleeps.add();
            futex_wait(arrived, a);
          }
          master_sleeping.store(false, std::memory_order_relaxed);
          a = arrived.load(std::memory_order_acquire);
        }
      }
      arrived.store(0, std::memory_order_relaxed);
    }
    const RoundKind k = decide();
    // Steps queued for the coming round (everyone is parked: the vectors are quiet).
    std::uint64_t input = 0;
    const unsigned pn = static_cast<unsigned>((round + 1) & 1);
    for (auto& wp : workers)
      for (const auto& v : wp->out[pn]) input += v.size();
    ++round;
    round_kind = k;
    expected = 0;
    for (unsigned i = 1; i < n; ++i) {
      Worker& w = *workers[i];
      if (k != RoundKind::stop && !needs(w, input)) continue;
      ++expected;
      w.go.store(static_cast<std::uint32_t>(round), std::memory_order_seq_cst);
      if (w.asleep.load(std::memory_order_seq_cst)) futex_wake(w.go);
    }
    if (k == RoundKind::stop) {
      m.flush_releases();
      return;
    }
    m.part(round);
  }
}

// ---------------------------------------------------------------------------------------------
// Flush, close, shutdown, stats

Receipt ControllerCore::flush() {
  Task* agg = acquire_task();  // the receipt's reference
  agg->kind = TaskKind::flush;
  if (!accepting.load(std::memory_order_acquire)) {
    finish(*agg, TaskState::rejected, ECANCELED, kShutdownReason);
    return Receipt(agg);
  }
  flushes.fetch_add(1, std::memory_order_relaxed);
  agg->owner = this;
  if (opt.latency_histograms) agg->stamp(static_cast<std::uint64_t>(monotonic_ns()));
  retain_task(agg);  // the controller's, dropped by the last part
  std::vector<FileCore*> open_files;
  {
    std::lock_guard<std::mutex> lock(files_mu);
    for (FileCore* f : files)
      if (f->tree) {
        file_retain(f);
        open_files.push_back(f);
      }
  }
  agg->parts.store(static_cast<std::uint32_t>(open_files.size()) + 1, std::memory_order_relaxed);
  for (FileCore* f : open_files) {
    Task* t = acquire_task();
    t->kind = TaskKind::write_back;
    t->file = f;
    t->parent = agg;
    t->op.kind = TreeOp::write_back;
    push(f->home, t);
  }
  // The guard part: the aggregate finishes when the last real part does (or now, if none).
  if (agg->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Every part finished already (acq_rel: their part_error is visible here).
    const int pe = agg->part_error.load(std::memory_order_relaxed);
    finish(*agg, pe ? TaskState::failed : TaskState::done, pe, pe ? "a file's write-back failed" : nullptr);
    release_task(agg);
  }
  return Receipt(agg);
}

void ControllerCore::close_file(FileCore* f, Task* t) {
  if (t == nullptr) {
    t = acquire_task();  // refs 1 becomes the controller's below (no receipt)
    t->refs.store(0, std::memory_order_relaxed);
    f->detached = true;
  }
  t->kind = TaskKind::close;
  t->file = f;
  file_retain(f);
  if (opt.latency_histograms) t->stamp(static_cast<std::uint64_t>(monotonic_ns()));
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  push(f->home, t);
}

ShutdownReport ControllerCore::shutdown() {
  if (shut_down) return {};
  shut_down = true;
  accepting.store(false, std::memory_order_release);
  closing.store(true, std::memory_order_relaxed);
  std::vector<FileCore*> open_files;
  {
    std::lock_guard<std::mutex> lock(files_mu);
    for (FileCore* f : files) {
      file_retain(f);
      open_files.push_back(f);
    }
  }
  for (FileCore* f : open_files) {
    if (!f->closed.exchange(true, std::memory_order_acq_rel)) close_file(f, nullptr);
    file_release(f);
  }
  ring();
  {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd, &one, sizeof one);
  }
  for (auto& th : threads) th.join();
  threads.clear();
  ShutdownReport rep;
  std::lock_guard<std::mutex> lock(report_mu);
  rep.failures = failures;
  return rep;
}

ControllerStats ControllerCore::stats() const {
  ControllerStats s;
  s.workers = n;
  for (const auto& wp : workers) {
    const Worker& w = *wp;
    for (std::size_t k = 0; k < kRequestKinds; ++k) {
      s.requests[k] += w.requests[k].get();
      for (std::size_t b = 0; b < LatencyHistogram::kBuckets; ++b) s.latency[k].counts[b] += w.latency[k][b].get();
    }
    s.failed += w.failed.get();
    s.bytes_read += w.bytes_read.get();
    s.bytes_written += w.bytes_written.get();
    s.steps += w.steps.get();
    s.steals += w.steals.get();
    s.sleeps += w.sleeps.get();
    s.max_pending = std::max(s.max_pending, w.max_pending.get());
    s.max_ready = std::max(s.max_ready, w.max_ready.get());
    s.engine_syncs += w.engine_syncs.get();
    s.engine_submit_calls += w.engine_submit_calls.get();
    s.evictions += w.evictions.get();
  }
  s.rejected = rejected_outside.load(std::memory_order_relaxed);
  s.requests[static_cast<std::size_t>(RequestKind::flush)] += flushes.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(files_mu);
    // Counters: closed trees and open ones. "Now" values: open trees only (a closed tree's
    // are what it held when it closed).
    BTreeStats now{};
    for (const FileCore* f : files)
      if (f->tree) now += f->tree->stats();
    BTreeStats sum = retired;
    sum += now;
    s.open_files = files.size();
    s.cached_bytes = now.cached_bytes;
    s.dirty_bytes = now.dirty_bytes;
    s.blocks = now.blocks;
    s.dirty_blocks = now.dirty_blocks;
    s.nodes = now.nodes;
    s.node_bytes = now.node_bytes;
    s.engine_reads = sum.engine_reads;
    s.engine_writes = sum.engine_writes;
    s.bytes_from_engine = sum.bytes_from_engine;
    s.bytes_to_engine = sum.bytes_to_engine;
    s.cache_hits = sum.cache_hits;
    s.fills = sum.fills;
    s.merges = sum.merges;
    s.merged_bytes = sum.merged_bytes;
    s.write_throughs = sum.write_throughs;
    s.reroutes = sum.reroutes;
    s.uncached = sum.uncached;
    s.restructures = sum.restructures;
    s.quiesces = sum.quiesces;
    s.write_back_errors = sum.write_back_errors;
    s.inline_ops = sum.inline_ops;
    s.size_refreshes = sum.size_refreshes;
    s.collects = sum.collects;
  }
  s.quota_denials = quota.denials();
  s.quota_used = quota.used();
  s.quota_peak = quota.peak();
  s.quota_weak = quota.weak();
  s.quota_strict = quota.strict();
  s.write_copy_bytes = copy_bytes.load(std::memory_order_relaxed);  // relaxed: a snapshot
  s.write_copy_budget = opt.write_copy_budget;
  s.write_copy_waits = copy_waits.load(std::memory_order_relaxed);  // relaxed: a statistic
  s.rounds_normal = rounds_normal.get();
  s.rounds_recycle = rounds_recycle.get();
  s.rounds_flush = rounds_flush.get();
  s.rounds_idle = rounds_idle.get();
  s.rounds_close = rounds_close.get();
  const unsigned count = slot_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < count; ++i) s.async_in_flight += slots[i]->in_flight.load(std::memory_order_relaxed);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Free functions the public headers call

Receipt controller_submit(ControllerCore& core, Task* t) { return core.submit_task(t); }

const ControllerCore* worker_controller() noexcept { return t_worker ? &t_worker->c : nullptr; }

namespace {
Receipt reject_now(Task* t, int err, const char* reason) {
  finish_task(*t, TaskState::rejected, err, reason);
  return Receipt(t);
}
bool file_usable(FileCore* f) noexcept { return f && !f->closed.load(std::memory_order_acquire); }
}  // namespace

Receipt file_hook(FileCore* f, Task* t) {
  if (!file_usable(f)) return reject_now(t, EBADF, kClosedReason);
  return f->ctl->submit_file_task(f, t);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// tai::File

using detail::FileCore;
using detail::Task;
using detail::TaskKind;

bool File::is_open() const noexcept { return core_ && !core_->closed.load(std::memory_order_acquire); }

const std::string& File::path() const noexcept {
  static const std::string empty;
  return core_ ? core_->path : empty;
}

namespace {
// The largest end (offset + length) a transfer may have: the kernel's off_t is signed and a
// transfer must end at or below its maximum, as the engine layer checks too. The tree could cache
// a byte above it, but that byte could never be written back or read from the file, so the
// request is refused here, the same on every tree and engine.
constexpr std::uint64_t kFileOffsetLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Why a read or write cannot be submitted at all (nullptr: it can), checked before the cache so
// that every tree answers as the engines would: a cached tree must not accept what the file
// will refuse later.
const char* transfer_refusal(const FileCore& f, TreeOp kind, std::uint64_t offset, std::uint64_t length, int& err) {
  const bool write = kind == TreeOp::write;
  if (!has(f.mode.flags, write ? Open::write : Open::read)) {
    err = EBADF;
    return write ? "the file was not opened for writing (Open::write)" : "the file was not opened for reading (Open::read)";
  }
  if (length != 0 && (offset > kFileOffsetLimit || length > kFileOffsetLimit - offset)) {
    err = EOVERFLOW;
    return length - 1 > ~std::uint64_t{0} - offset ? "offset + length passes 2^64"
                                                   : "offset + length passes 2^63 - 1, the largest file offset (off_t)";
  }
  return nullptr;
}

// `checked`: the caller already ran transfer_refusal (File::write does, before its copy).
Receipt tree_op(FileCore* f, Task* t, TreeOp kind, std::uint64_t offset, std::uint64_t length, std::byte* buffer,
                bool checked = false) {
  t->kind = TaskKind::tree_op;
  t->op.kind = kind;
  t->op.offset = offset;
  t->op.length = length;
  t->op.buffer = buffer;
  if (!f || f->closed.load(std::memory_order_acquire)) return detail::reject_now(t, EBADF, detail::kClosedReason);
  if (!checked && (kind == TreeOp::read || kind == TreeOp::write)) {
    int err = 0;
    if (const char* why = transfer_refusal(*f, kind, offset, length, err)) return detail::reject_now(t, err, why);
  }
  // After every refusal above (a write refused here was never counted): from here on the task
  // is pushed, and the worker that ends it uncounts it.
  if (kind == TreeOp::write) f->ctl->charge_copy(*t);
  return f->ctl->submit_file_task(f, t);
}
}  // namespace

Receipt File::read(std::uint64_t offset, void* dst, std::size_t n) {
  return tree_op(core_, detail::acquire_task(), TreeOp::read, offset, n, static_cast<std::byte*>(dst));
}

Receipt File::read(std::uint64_t offset, std::size_t n) {
  Task* t = detail::acquire_task();
  if (n != 0) {
    t->data = detail::AlignedBuffer::try_allocate(n, Buffer::kDefaultAlignment);
    if (t->data.empty()) {
      t->kind = TaskKind::tree_op;
      t->op.kind = TreeOp::read;
      t->op.offset = offset;
      t->op.length = n;
      return detail::reject_now(t, ENOMEM, "no memory for the read's buffer");
    }
  }
  t->returns_buffer = true;
  return tree_op(core_, t, TreeOp::read, offset, n, t->data.data());
}

Receipt File::write(std::uint64_t offset, const void* src, std::size_t n) {
  Task* t = detail::acquire_task();
  if (n != 0 && src == nullptr) {
    t->kind = TaskKind::tree_op;
    t->op.kind = TreeOp::write;
    t->op.offset = offset;
    t->op.length = n;
    return detail::reject_now(t, EFAULT, "the source buffer is null");
  }
  int err = 0;
  if (const char* why = core_ ? transfer_refusal(*core_, TreeOp::write, offset, n, err) : nullptr) {
    // Before the copy: a write that cannot be applied costs no allocation.
    t->kind = TaskKind::tree_op;
    t->op.kind = TreeOp::write;
    t->op.offset = offset;
    t->op.length = n;
    return detail::reject_now(t, err, why);
  }
  if (n != 0 && t->data.size() < n) {
    // Round small copies up so that a recycled task fits the next write of a similar size.
    const std::size_t want = n <= 4096 ? 4096 : n;
    t->data = detail::AlignedBuffer::try_allocate(want, 64);
    if (t->data.empty()) {
      t->kind = TaskKind::tree_op;
      t->op.kind = TreeOp::write;
      t->op.offset = offset;
      t->op.length = n;
      return detail::reject_now(t, ENOMEM, "no memory for the write's copy");
    }
  }
  if (n != 0) std::memcpy(t->data.data(), src, n);
  return tree_op(core_, t, TreeOp::write, offset, n, t->data.data(), /*checked=*/core_ != nullptr);
}

Receipt File::write(std::uint64_t offset, Buffer&& data) {
  Task* t = detail::acquire_task();
  const std::size_t n = data.size();
  t->data = data.release_memory();
  return tree_op(core_, t, TreeOp::write, offset, n, t->data.data());
}

Receipt File::fsync() { return tree_op(core_, detail::acquire_task(), TreeOp::fsync, 0, 0, nullptr); }
Receipt File::fdatasync() { return tree_op(core_, detail::acquire_task(), TreeOp::fdatasync, 0, 0, nullptr); }

Receipt File::barrier() {
  Task* t = detail::acquire_task();
  t->kind = TaskKind::barrier;
  t->op.kind = TreeOp::fdatasync;
  if (!core_ || core_->closed.load(std::memory_order_acquire))
    return detail::reject_now(t, EBADF, detail::kClosedReason);
  return core_->ctl->submit_file_task(core_, t);
}

void File::detach() noexcept {
  if (!core_ || core_->closed.exchange(true, std::memory_order_acq_rel)) return;
  core_->ctl->close_file(core_, nullptr);
}

Receipt File::close() {
  Task* t = detail::acquire_task();
  t->kind = TaskKind::close;
  if (!core_ || core_->closed.exchange(true, std::memory_order_acq_rel))
    return detail::reject_now(t, EBADF, "the file is already closed");
  core_->ctl->close_file(core_, t);
  return Receipt(t);
}

FileStatus File::status() const {
  FileStatus s;
  if (!core_) return s;
  FileCore& f = *core_;
  s.path = f.path;
  s.engine = f.engine_name;
  s.tree = f.tree_name;
  s.open = !f.closed.load(std::memory_order_acquire);
  // refs: the handle (this), the registry until fully closed, one per task in flight, and the
  // unused ones submitting threads reserved (this thread's go back first).
  detail::t_file_refs.drop_if(&f);
  const bool registered = !f.fully_closed.load(std::memory_order_acquire);
  const std::uint32_t refs = f.refs.load(std::memory_order_acquire);
  const std::uint32_t structural = 1u + (registered ? 1u : 0u);
  s.in_flight = refs > structural ? refs - structural : 0;
  if (const int st = f.sticky.load(std::memory_order_relaxed)) s.sticky_error = std::error_code(st, std::generic_category());
  if (registered) {
    std::lock_guard<std::mutex> lock(f.ctl->files_mu);
    if (f.tree) {
      const BTreeStats t = f.tree->stats();
      s.cached_bytes = t.cached_bytes;
      s.dirty_bytes = t.dirty_bytes;
      s.node_bytes = t.node_bytes;
      s.size = f.tree->logical_size();
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// tai::Controller

Controller::Controller(const ControllerOptions& options) : core_(std::make_unique<detail::ControllerCore>(options)) {}

Controller::~Controller() {
  const ShutdownReport rep = core_->shutdown();
  if (!rep.ok()) std::fprintf(stderr, "tai::Controller: shutdown: %s\n", rep.to_string().c_str());
}

Result<File> Controller::open_file(const detail::OpenRequest& req) { return core_->open(req); }
bool Controller::add_engine(std::string name, std::unique_ptr<Engine> engine) {
  return core_->add_engine(std::move(name), std::move(engine));
}
Receipt Controller::flush() { return core_->flush(); }
ShutdownReport Controller::shutdown() { return core_->shutdown(); }
ControllerStats Controller::stats() const { return core_->stats(); }
unsigned Controller::workers() const noexcept { return core_->n; }
const ControllerOptions& Controller::options() const noexcept { return core_->opt; }
const std::string& Controller::engine_note() const noexcept { return core_->engine_note; }

std::string ShutdownReport::to_string() const {
  if (failures.empty()) return "nothing failed";
  std::string s = std::to_string(failures.size()) + " failure(s): ";
  for (std::size_t i = 0; i < failures.size(); ++i) {
    if (i) s += "; ";
    s += failures[i];
  }
  return s;
}

}  // namespace tai

// The task pool: per-thread caches of recycled tasks, so a request costs no heap allocation once
// the pool is warm. (tai::Receipt and tai::CompletionQueue, which read tasks, are in receipt.cpp.)
//
// Each thread keeps up to kLocalMax free tasks; beyond that it hands kBatch of them to a shared
// list (a mutex: taken once per kBatch releases, not per request), and a thread whose cache is
// empty takes kBatch back from it before it allocates. Tasks flow from the threads that release
// them (usually the submitting thread, when it drops the receipt; a worker when the receipt was
// dropped first) to the threads that acquire them, through the shared list.

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>

#include "src/detail/futex.hpp"
#include "src/detail/small_copy_pool.hpp"
#include "src/detail/task_pool.hpp"
#include "tai/receipt.hpp"

namespace tai {

const char* to_string(TaskState s) noexcept {
  switch (s) {
    case TaskState::pending: return "pending";
    case TaskState::waiting: return "waiting";
    case TaskState::ready: return "ready";
    case TaskState::running: return "running";
    case TaskState::done: return "done";
    case TaskState::rejected: return "rejected";
    case TaskState::failed: return "failed";
  }
  return "?";
}

namespace detail {
namespace {

// Small per-thread caches: a worker that drops the last reference of many tasks (the
// application saw them finished and let go of its receipt first) never acquires any, so what it
// caches is idle until it spills to the shared list; small caches reach the steady state (no
// allocation) after a few hundred requests. One mutex acquisition per kBatch tasks either way.
constexpr std::size_t kLocalMax = 64;
constexpr std::size_t kBatch = 32;
// Worker threads release tasks but seldom acquire any: they keep few (see set_worker_task_cache).
constexpr std::size_t kWorkerLocalMax = 8;
constexpr std::size_t kWorkerBatch = 8;
constexpr std::size_t kSharedMax = 16384;

struct SharedPool {
  std::mutex mu;
  Task* head = nullptr;
  std::size_t count = 0;
};
// Never destroyed: threads may release tasks during static destruction.
SharedPool& shared_pool() {
  static SharedPool* pool = new SharedPool;
  return *pool;
}
std::atomic<std::uint64_t> g_allocated{0};  // relaxed: a statistic

// Small copies kept by finished tasks that receipts still hold (keep_finished_copy), in bytes,
// process-wide: the tasks are not the controller's any more and may outlive it. Each thread adds
// and subtracts into its own delta and publishes it past kKeptCopyFlush either way, so a program
// that waits for every write does not move this line between the worker that finishes the write
// and the thread that recycles the task for every request. The count is then off by at most
// kKeptCopyFlush per thread, which only moves the point where copies start to be freed. Relaxed
// throughout: a count, nothing is published through it.
constexpr std::int64_t kKeptCopyLimit = std::int64_t{4} << 20;
constexpr std::int64_t kKeptCopyFlush = std::int64_t{256} << 10;
std::atomic<std::int64_t> g_kept_copy_bytes{0};
std::atomic<std::uint64_t> g_copies_dropped{0};  // relaxed: a statistic
struct KeptCopyDelta {
  std::int64_t bytes = 0;
  void add(std::int64_t n) noexcept {
    bytes += n;
    if (bytes >= kKeptCopyFlush || bytes <= -kKeptCopyFlush) flush();
  }
  void flush() noexcept {
    if (bytes != 0) g_kept_copy_bytes.fetch_add(bytes, std::memory_order_relaxed);
    bytes = 0;
  }
  ~KeptCopyDelta() { flush(); }  // a thread that ends leaves its count right
};
thread_local KeptCopyDelta t_kept_copy_delta;

struct LocalCache {
  Task* head = nullptr;
  std::size_t count = 0;
  std::size_t limit = kLocalMax;  // spill when count passes it
  std::size_t batch = kBatch;     // tasks moved per spill
  ~LocalCache() {
    SharedPool& sp = shared_pool();
    std::lock_guard<std::mutex> lock(sp.mu);
    while (head) {
      Task* t = head;
      head = t->next;
      t->next = sp.head;
      sp.head = t;
      ++sp.count;
    }
  }
};
thread_local LocalCache t_cache;

}  // namespace

void Task::recycle() noexcept {
  word.store(0, std::memory_order_relaxed);
  phase.store(static_cast<std::uint8_t>(TaskState::pending), std::memory_order_relaxed);
  cont.store(0, std::memory_order_relaxed);
  kind = TaskKind::tree_op;
  final_state = TaskState::done;
  returns_buffer = false;
  timed = false;
  traffic = false;  // already so: ControllerCore::finish clears it
  result = 0;
  op.reset();
  op.kind = TreeOp::read;
  op.offset = op.length = 0;
  op.buffer = nullptr;
  op.evict_seq = 0;
  op.evict_depth = 0;
  // op.on_complete and op.context stay: every start of the operation sets them (Worker::begin
  // compares first, so that the worker does not write line 1; see Task's layout).
  file = nullptr;
  owner = nullptr;
  copy_charge = 0;  // already 0: the controller uncounts every write it finishes
  error = 0;
  reason = nullptr;
  next = nullptr;
  parent = nullptr;
  parts.store(0, std::memory_order_relaxed);
  part_error.store(0, std::memory_order_relaxed);
  fn.reset();
  then.reset();
  if (keeps_copy) {
    keeps_copy = false;
    t_kept_copy_delta.add(-static_cast<std::int64_t>(data.size()));
  }
  // A large copy goes (its pages are the pool's); the small copy it displaced, if any, comes
  // back, also when the large one was never made (a write refused for want of memory). Memory
  // another home lent (a buffer moved in by File::write(offset, Buffer&&)) goes back there
  // whatever its size: it is not the task's to keep.
  if ((data.borrowed() && !SmallCopyPool::owns(data)) || data.size() > kKeepDataBytes || data.empty())
    data = std::move(displaced_copy);
  displaced_copy.reset();
}

bool keep_finished_copy(std::size_t bytes) noexcept {
  const auto n = static_cast<std::int64_t>(bytes);
  KeptCopyDelta& d = t_kept_copy_delta;
  if (g_kept_copy_bytes.load(std::memory_order_relaxed) + d.bytes + n > kKeptCopyLimit) {
    g_copies_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  d.add(n);
  return true;
}

Task* acquire_task() {
  LocalCache& c = t_cache;
  if (c.head == nullptr) {
    SharedPool& sp = shared_pool();
    std::lock_guard<std::mutex> lock(sp.mu);
    for (std::size_t i = 0; i < kBatch && sp.head; ++i) {
      Task* t = sp.head;
      sp.head = t->next;
      --sp.count;
      t->next = c.head;
      c.head = t;
      ++c.count;
    }
  }
  Task* t = c.head;
  if (t == nullptr) {
    g_allocated.fetch_add(1, std::memory_order_relaxed);
    t = new Task;
  } else {
    c.head = t->next;
    --c.count;
    t->next = nullptr;
  }
  t->refs.store(1, std::memory_order_relaxed);  // the caller's; published with the task itself
  return t;
}

void release_task(Task* t) noexcept {
  // The common case, a receipt dropped after its task finished, holds the only reference left:
  // no other holder exists to make a new one, so a load decides without a locked
  // read-modify-write (libstdc++'s shared_ptr does the same). Acquire pairs with the release
  // part of the other holders' fetch_sub below: their writes happen-before the recycling.
  if (t->refs.load(std::memory_order_acquire) == 1) {
    t->refs.store(0, std::memory_order_relaxed);
  } else if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;  // acq_rel: every holder's writes happen-before the recycling by the last one
  }
  t->recycle();
  LocalCache& c = t_cache;
  t->next = c.head;
  c.head = t;
  if (++c.count <= c.limit) return;
  // Hand a batch to the shared list (or free it when that is full too).
  Task* batch = nullptr;
  for (std::size_t i = 0; i < c.batch; ++i) {
    Task* x = c.head;
    c.head = x->next;
    --c.count;
    x->next = batch;
    batch = x;
  }
  SharedPool& sp = shared_pool();
  std::unique_lock<std::mutex> lock(sp.mu);
  while (batch) {
    Task* x = batch;
    batch = x->next;
    if (sp.count >= kSharedMax) {
      lock.unlock();
      delete x;
      lock.lock();
      continue;
    }
    x->next = sp.head;
    sp.head = x;
    ++sp.count;
  }
}

std::uint64_t tasks_allocated() noexcept { return g_allocated.load(std::memory_order_relaxed); }
std::uint64_t finished_copies_dropped() noexcept { return g_copies_dropped.load(std::memory_order_relaxed); }

void set_worker_task_cache() noexcept {
  t_cache.limit = kWorkerLocalMax;
  t_cache.batch = kWorkerBatch;
}

thread_local DeferredWakes* t_deferred_wakes = nullptr;

void DeferredWakes::wake() noexcept {
  for (Task* t : tasks) {
    futex_wake(t->word);
    release_task(t);
  }
  tasks.clear();
  for (const Queue& q : queues) {
    futex_wake(*q.word);
    // Release: the queue's destructor (acquire) may free the word once this reaches zero.
    q.posting->fetch_sub(1, std::memory_order_release);
  }
  queues.clear();
}

void finish_task(Task& t, TaskState final_state, int error, const char* reason) noexcept {
  t.final_state = final_state;
  if (error != 0) t.error = error;  // a recycled task has 0 (Task's layout: line 2 stays cold)
  if (reason) t.reason = reason;
  // Release: publishes the result (and a read's data, already published to this thread by the
  // tree's completion) to Receipt's acquire loads.
  const std::uint32_t prev = t.word.exchange(Task::kFinished, std::memory_order_acq_rel);
  if (prev & Task::kWaiter) {
    if (t_deferred_wakes != nullptr) {
      retain_task(&t);  // the futex word must stay this task's until the wake
      t_deferred_wakes->tasks.push_back(&t);
    } else {
      futex_wake(t.word);
    }
  }
  // acq_rel: pairs with then()'s CAS; whoever is second runs the continuation.
  if (t.cont.exchange(2, std::memory_order_acq_rel) == 1) {
    try {
      t.then(t);
    } catch (...) {
      // A continuation has no receipt of its own to fail: its exception is dropped here, as
      // documented on Receipt::then.
    }
    t.then.reset();
  }
}

}  // namespace detail

}  // namespace tai

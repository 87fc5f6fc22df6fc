// The task pool and tai::Receipt: per-thread caches of recycled tasks, so a request costs no heap
// allocation once the pool is warm.
//
// Each thread keeps up to kLocalMax free tasks; beyond that it hands kBatch of them to a shared
// list (a mutex: taken once per kBatch releases, not per request), and a thread whose cache is
// empty takes kBatch back from it before it allocates. Tasks flow from the threads that release
// them (usually the submitting thread, when it drops the receipt; a worker when the receipt was
// dropped first) to the threads that acquire them, through the shared list.
#include <mutex>
#include <string>

#include "tai/detail/futex.hpp"
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

constexpr std::size_t kLocalMax = 256;
constexpr std::size_t kBatch = 128;
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

struct LocalCache {
  Task* head = nullptr;
  std::size_t count = 0;
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
  error = 0;
  reason = nullptr;
  result = 0;
  submit_ns = 0;
  op.reset();
  op.kind = TreeOp::read;
  op.offset = op.length = 0;
  op.buffer = nullptr;
  op.evict_seq = 0;
  op.evict_depth = 0;
  op.on_complete = nullptr;
  op.context = nullptr;
  file = nullptr;
  owner = nullptr;
  next = nullptr;
  parent = nullptr;
  parts.store(0, std::memory_order_relaxed);
  part_error.store(0, std::memory_order_relaxed);
  fn.reset();
  then.reset();
  if (data.size() > kKeepDataBytes) data.reset();
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
  // acq_rel: every holder's writes happen-before the recycling by the last one.
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  t->recycle();
  LocalCache& c = t_cache;
  t->next = c.head;
  c.head = t;
  if (++c.count <= kLocalMax) return;
  // Hand a batch to the shared list (or free it when that is full too).
  Task* batch = nullptr;
  for (std::size_t i = 0; i < kBatch; ++i) {
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

void finish_task(Task& t, TaskState final_state, int error, const char* reason) noexcept {
  t.final_state = final_state;
  t.error = error;
  if (reason) t.reason = reason;
  // Release: publishes the result (and a read's data, already published to this thread by the
  // tree's completion) to Receipt's acquire loads.
  const std::uint32_t prev = t.word.exchange(Task::kFinished, std::memory_order_acq_rel);
  if (prev & Task::kWaiter) futex_wake(t.word);
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

// --- Receipt ----------------------------------------------------------------------------------

namespace {
// How long wait() spins before it sleeps: about one round trip through the rounds.
constexpr std::int64_t kReceiptSpinNs = 1500;
}  // namespace

TaskState Receipt::state() const noexcept {
  if (!task_) return TaskState::rejected;
  if (task_->word.load(std::memory_order_acquire) & detail::Task::kFinished) return task_->final_state;
  return static_cast<TaskState>(task_->phase.load(std::memory_order_relaxed));
}

bool Receipt::finished() const noexcept {
  return !task_ || (task_->word.load(std::memory_order_acquire) & detail::Task::kFinished) != 0;
}

bool Receipt::wait_ns(std::int64_t ns) const noexcept {
  if (!task_) return true;
  std::atomic<std::uint32_t>& w = task_->word;
  if (w.load(std::memory_order_acquire) & detail::Task::kFinished) return true;
  const std::int64_t start = detail::monotonic_ns();
  const std::int64_t deadline = ns < 0 ? -1 : start + ns;
  const std::int64_t spin_until = start + (ns >= 0 && ns < kReceiptSpinNs ? ns : kReceiptSpinNs);
  for (unsigned i = 0;; ++i) {
    if (w.load(std::memory_order_acquire) & detail::Task::kFinished) return true;
    detail::cpu_relax();
    if ((i & 63) == 63 && detail::monotonic_ns() >= spin_until) break;
  }
  for (;;) {
    std::uint32_t v = w.load(std::memory_order_acquire);
    if (v & detail::Task::kFinished) return true;
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - detail::monotonic_ns();
      if (left <= 0) return false;
    }
    // Announce the sleeper (acquire/release CAS; the finisher's exchange sees the bit and wakes).
    if (!(v & detail::Task::kWaiter) &&
        !w.compare_exchange_weak(v, v | detail::Task::kWaiter, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    detail::futex_wait(w, v | detail::Task::kWaiter, left);
  }
}

void Receipt::wait() const noexcept { wait_ns(-1); }

bool Receipt::ok() const noexcept {
  wait();
  return task_ && task_->final_state == TaskState::done;
}

std::error_code Receipt::error() const noexcept {
  if (!task_) return std::make_error_code(std::errc::invalid_argument);
  wait();
  if (task_->final_state == TaskState::done) return {};
  return std::error_code(task_->error != 0 ? task_->error : EIO, std::generic_category());
}

std::int64_t Receipt::bytes() const noexcept {
  if (!task_) return 0;
  wait();
  return task_->final_state == TaskState::done ? task_->result : 0;
}

Buffer Receipt::take_buffer() {
  if (!task_) return {};
  wait();
  if (!task_->returns_buffer || task_->final_state != TaskState::done) return {};
  task_->returns_buffer = false;
  return Buffer(std::move(task_->data), static_cast<std::size_t>(task_->result));
}

std::string Receipt::message() const {
  if (!task_) return "empty receipt (never submitted)";
  wait();
  const detail::Task& t = *task_;
  if (t.final_state == TaskState::done) return {};
  std::string what;
  switch (t.kind) {
    case detail::TaskKind::tree_op:
      what = std::string(to_string(t.op.kind));
      if (t.op.kind == TreeOp::read || t.op.kind == TreeOp::write)
        what += " of " + std::to_string(t.op.length) + " bytes at offset " + std::to_string(t.op.offset);
      break;
    case detail::TaskKind::function: what = "task"; break;
    case detail::TaskKind::hook: what = "hook"; break;
    case detail::TaskKind::barrier: what = "barrier"; break;
    case detail::TaskKind::close: what = "close"; break;
    case detail::TaskKind::flush: what = "flush"; break;
    case detail::TaskKind::write_back: what = "write-back"; break;
    case detail::TaskKind::evict: what = "evict"; break;
  }
  what += t.final_state == TaskState::rejected ? " rejected" : " failed";
  if (t.reason) {
    what += ": ";
    what += t.reason;
  }
  if (t.error != 0) {
    what += ": ";
    what += std::generic_category().message(t.error);
  }
  return what;
}

bool Receipt::attach(detail::InplaceFunction<void(detail::Task&), 64>&& fn) {
  detail::Task& t = *task_;
  if (t.cont.load(std::memory_order_acquire) == 1) return false;  // one continuation per task
  t.then = std::move(fn);
  std::uint8_t expected = 0;
  if (t.cont.compare_exchange_strong(expected, 1, std::memory_order_acq_rel, std::memory_order_acquire))
    return true;  // the finisher will run it
  // Already finished: run it here.
  t.then(t);
  t.then.reset();
  return true;
}

}  // namespace tai

// tai::Receipt and tai::CompletionQueue (include/tai/receipt.hpp): waiting for tasks, their
// results, continuations, and the queue of finished tags.
#include "tai/receipt.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>

#include "src/detail/futex.hpp"
#include "src/detail/lockfree_queue.hpp"
#include "src/detail/task_pool.hpp"

namespace tai {

// --- Receipt ----------------------------------------------------------------------------------

namespace {
// How long CompletionQueue::pop spins before it sleeps (it has no controller to ask). Receipts
// spin for their controller's ControllerOptions::spin_ns: with 3 us there, a program keeping 32
// writes in flight slept on nearly every wait, since the oldest write finished a few
// microseconds later, and each sleep cost the worker a futex wake-up (tai-bench overhead
// --window 32, posix Trivial: 0.43-0.44x a pwrite loop at 3 us, 0.77-0.81x at 20 us;
// docs/controller_options.md).
constexpr std::int64_t kQueueSpinNs = detail::kDefaultWaitSpinNs;

// A receipt's spin: the first kDefaultWaitSpinNs on the CPU, the rest of it yielding (a pure
// 20 us spin kept the master off the CPU where the waiting threads outnumber the CPUs: two
// submitting threads keeping 32 writes each in flight on 2 CPUs, tai-bench overhead with the
// null engine, cost 1,087-1,705 ns of CPU per request against 642-1,076 ns with 3 us).
std::int64_t yield_from(std::int64_t start, std::int64_t until) noexcept {
  return std::min(until, start + detail::kDefaultWaitSpinNs);
}
}  // namespace

TaskState Receipt::state() const noexcept {
  if (!task_) return TaskState::rejected;
  if (task_->word.load(std::memory_order_acquire) & detail::Task::kFinished) return task_->final_state;
  return static_cast<TaskState>(task_->phase.load(std::memory_order_relaxed));
}

bool Receipt::finished() const noexcept {
  return !task_ || (task_->word.load(std::memory_order_acquire) & detail::Task::kFinished) != 0;
}

namespace {
// True when the calling thread is a worker of the controller that runs `t`: it cannot wait for
// `t` (see kWaitOnOwnWorkerReason). Only asked once the task was seen unfinished.
bool wait_would_deadlock(const detail::Task* t) noexcept {
  return t->owner != nullptr && t->owner == detail::worker_controller();
}
}  // namespace

bool Receipt::wait_ns(std::int64_t ns) const noexcept {
  if (!task_) return true;
  std::atomic<std::uint32_t>& w = task_->word;
  if (w.load(std::memory_order_acquire) & detail::Task::kFinished) return true;
  if (wait_would_deadlock(task_)) return false;
  if (ns != 0) detail::wake_for_waiter(task_->owner);
  const std::int64_t start = detail::monotonic_ns();
  const std::int64_t deadline = ns < 0 ? -1 : start + ns;
  const std::int64_t spin_ns = detail::wait_spin_ns(task_->owner);
  const std::int64_t spin_until = start + (ns >= 0 && ns < spin_ns ? ns : spin_ns);
  if (detail::spin_until_time(spin_until, yield_from(start, spin_until),
                              [&w] { return (w.load(std::memory_order_acquire) & detail::Task::kFinished) != 0; }))
    return true;
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

std::ptrdiff_t Receipt::wait_any(const Receipt* rs, std::size_t n, std::int64_t timeout_ns) noexcept {
  if (n == 0) return -1;
  auto scan = [&]() -> std::ptrdiff_t {
    for (std::size_t i = 0; i < n; ++i)
      if (rs[i].finished()) return static_cast<std::ptrdiff_t>(i);
    return -1;
  };
  if (const auto i = scan(); i >= 0) return i;
  for (std::size_t i = 0; i < n; ++i)
    if (wait_would_deadlock(rs[i].task_)) return -1;
  if (timeout_ns != 0) {
    const detail::ControllerCore* woken = nullptr;
    for (std::size_t i = 0; i < n; ++i)
      if (rs[i].task_ != nullptr && rs[i].task_->owner != woken) {
        woken = rs[i].task_->owner;
        detail::wake_for_waiter(woken);
      }
  }
  // The longest spin any of their controllers asks for.
  std::int64_t spin_ns = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (rs[i].task_ != nullptr) spin_ns = std::max(spin_ns, detail::wait_spin_ns(rs[i].task_->owner));
  const std::int64_t start = detail::monotonic_ns();
  const std::int64_t deadline = timeout_ns < 0 ? -1 : start + timeout_ns;
  const std::int64_t spin_until = start + std::min<std::int64_t>(spin_ns, timeout_ns < 0 ? spin_ns : timeout_ns);
  std::ptrdiff_t found = -1;
  if (detail::spin_until_time(spin_until, yield_from(start, spin_until), [&] { return (found = scan()) >= 0; }))
    return found;
  constexpr std::size_t kMax = FUTEX_WAITV_MAX;
  static std::atomic<bool> have_waitv{true};  // relaxed: every thread computes the same answer
  for (;;) {
    if (const auto i = scan(); i >= 0) return i;
    std::int64_t now = detail::monotonic_ns();
    if (deadline >= 0 && now >= deadline) return -1;
    // Announce a sleeper on every unfinished task (the finisher wakes when it sees the bit).
    futex_waitv w[kMax];
    std::size_t m = 0;
    for (std::size_t i = 0; i < n && m < kMax; ++i) {
      detail::Task* t = rs[i].task_;
      if (!t) return static_cast<std::ptrdiff_t>(i);
      std::uint32_t v = t->word.load(std::memory_order_acquire);
      while (!(v & detail::Task::kFinished) && !(v & detail::Task::kWaiter) &&
             !t->word.compare_exchange_weak(v, v | detail::Task::kWaiter, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      }
      if (v & detail::Task::kFinished) return static_cast<std::ptrdiff_t>(i);
      w[m].val = v | detail::Task::kWaiter;
      w[m].uaddr = reinterpret_cast<std::uintptr_t>(&t->word);
      w[m].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
      w[m].__reserved = 0;
      ++m;
    }
    if (have_waitv.load(std::memory_order_relaxed)) {
      // futex_waitv takes an absolute CLOCK_MONOTONIC time
      timespec ts = detail::ns_to_timespec(deadline);
      timespec* tsp = deadline >= 0 ? &ts : nullptr;
      const long r = ::syscall(SYS_futex_waitv, w, m, 0, tsp, CLOCK_MONOTONIC);
      if (r < 0 && errno == ENOSYS) have_waitv.store(false, std::memory_order_relaxed);
      continue;
    }
    // Older kernels: sleep on the first one for at most 50 us, then look at all again.
    std::int64_t slice = 50'000;
    if (deadline >= 0) slice = std::min(slice, deadline - now);
    detail::futex_wait(*reinterpret_cast<std::atomic<std::uint32_t>*>(static_cast<std::uintptr_t>(w[0].uaddr)),
                       static_cast<std::uint32_t>(w[0].val), slice);
  }
}

// The result accessors below wait without a limit: wait_ns(-1) returns false only when the wait
// was refused (a worker of the task's own controller), and then they answer EDEADLK.

bool Receipt::ok() const noexcept {
  if (!wait_ns(-1)) return false;
  return task_ && task_->final_state == TaskState::done;
}

std::error_code Receipt::error() const noexcept {
  if (!task_) return std::make_error_code(std::errc::invalid_argument);
  if (!wait_ns(-1)) return std::error_code(EDEADLK, std::generic_category());
  if (task_->final_state == TaskState::done) return {};
  return std::error_code(task_->error != 0 ? task_->error : EIO, std::generic_category());
}

std::int64_t Receipt::bytes() const noexcept {
  if (!task_) return 0;
  if (!wait_ns(-1)) return 0;
  return task_->final_state == TaskState::done ? task_->result : 0;
}

Buffer Receipt::take_buffer() {
  if (!task_) return {};
  if (!wait_ns(-1)) return {};
  if (!task_->returns_buffer || task_->final_state != TaskState::done) return {};
  task_->returns_buffer = false;
  return Buffer(std::move(task_->data), static_cast<std::size_t>(task_->result));
}

std::string Receipt::message() const {
  if (!task_) return "empty receipt (never submitted)";
  if (!wait_ns(-1)) return detail::kWaitOnOwnWorkerReason;
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
    case detail::TaskKind::collect: what = "collect"; break;
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
  if (t.word.load(std::memory_order_acquire) & detail::Task::kFinished) {
    // Finished (the finisher may not have reached the hand-off yet: leaving `cont` at 0 keeps
    // it from running anything): run it here, as documented.
    fn(t);
    return true;
  }
  t.then = std::move(fn);
  std::uint8_t expected = 0;
  if (t.cont.compare_exchange_strong(expected, 1, std::memory_order_acq_rel, std::memory_order_acquire))
    return true;  // the finisher will run it
  // Already finished: run it here.
  t.then(t);
  t.then.reset();
  return true;
}

// --- CompletionQueue -------------------------------------------------------------------------

struct CompletionQueue::Impl {
  explicit Impl(std::size_t capacity) : tags(capacity) {}
  // Not fixed-size: a burst beyond the capacity allocates nodes (kept for reuse) instead of
  // making the posting worker wait for the consumer, which could be waiting for that worker.
  boost::lockfree::queue<std::uint64_t> tags;
  // Futex word: bumped (release) after every push; the consumer sleeps on it.
  std::atomic<std::uint32_t> posted{0};
  // The consumer sleeps (or is about to): it stores true (seq_cst), re-checks the queue, sleeps;
  // a poster pushes, bumps `posted` (seq_cst), and wakes when it takes the flag (exchange): one
  // wake-up per sleep.
  std::atomic<bool> sleeping{false};
  // Posts still touching this object (including wake-ups a worker deferred): the consumer can
  // pop a tag, and destroy the queue, before its poster has returned from push().
  std::atomic<std::uint32_t> posting{0};
};

CompletionQueue::CompletionQueue(std::size_t capacity)
    : impl_(new Impl(std::max<std::size_t>(capacity, 2))) {}

CompletionQueue::~CompletionQueue() {
  // Acquire: pairs with the posters' release decrements, after their last access.
  while (impl_->posting.load(std::memory_order_acquire) != 0) detail::cpu_relax();
  delete impl_;
}

void CompletionQueue::push(std::uint64_t tag) noexcept {
  // Relaxed: sequenced before the tag's push, whose release the consumer's pop acquires, so a
  // consumer that saw the tag sees this increment too.
  impl_->posting.fetch_add(1, std::memory_order_relaxed);
  while (!impl_->tags.push(tag)) detail::cpu_relax();  // fails only when memory is exhausted
  impl_->posted.fetch_add(1, std::memory_order_seq_cst);
  if (impl_->sleeping.load(std::memory_order_seq_cst) && impl_->sleeping.exchange(false, std::memory_order_seq_cst)) {
    if (detail::t_deferred_wakes != nullptr) {
      // Inside a worker's part: woken with the rest of the part's finished work; the list now
      // owns this post's count.
      detail::t_deferred_wakes->queues.push_back({&impl_->posted, &impl_->posting});
      return;
    }
    detail::futex_wake(impl_->posted);
  }
  impl_->posting.fetch_sub(1, std::memory_order_release);
}

std::size_t CompletionQueue::pop(std::uint64_t* out, std::size_t max, std::size_t min, std::int64_t timeout_ns) noexcept {
  std::size_t got = 0;
  auto take = [&] {
    while (got < max && impl_->tags.pop(out[got])) ++got;
  };
  take();
  if (got >= min || max == 0) return got;
  const std::int64_t start = detail::monotonic_ns();
  const std::int64_t deadline = timeout_ns < 0 ? -1 : start + timeout_ns;
  const std::int64_t spin_until = start + std::min<std::int64_t>(kQueueSpinNs, timeout_ns < 0 ? kQueueSpinNs : timeout_ns);
  detail::spin_until_time(spin_until, spin_until, [&] {
    take();
    return got >= min;
  });
  while (got < min) {
    const std::uint32_t seen = impl_->posted.load(std::memory_order_seq_cst);
    impl_->sleeping.store(true, std::memory_order_seq_cst);
    take();
    if (got >= min) break;
    std::int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - detail::monotonic_ns();
      if (left <= 0) break;
    }
    detail::futex_wait(impl_->posted, seen, left);
    take();
  }
  impl_->sleeping.store(false, std::memory_order_relaxed);
  return got;
}

}  // namespace tai

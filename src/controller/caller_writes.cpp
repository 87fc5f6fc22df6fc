// Caller writes: a large write that the submitting thread carries out itself, and the file's
// traffic word that makes it safe (FileTraffic in core.hpp).
//
// Why: a write the tree would send to the engine uncached anyway (the write-around rule, or a
// tree that never caches) gains nothing from the hand-off to a worker. On the steps' path the
// program's thread copies the record, a worker wakes and copies it again into the page cache;
// when the program's threads fill every core, that second copy and the wake-up take a compute
// thread's CPU. Done by the caller, the write is one copy into the page cache while the record
// is still in its cache, as a plain pwrite loop does it, and the workers keep what they are for:
// the fsyncs, and what the cache holds.
#include <cerrno>

#include "src/controller/core.hpp"

namespace tai::detail {

void ControllerCore::count_file_task(FileCore& f, Task& t) noexcept {
  // A file with no caller engine never has a caller write: no count, no atomic on its tasks.
  // Nor do fsyncs need one: a caller write may run beside them.
  if (t.traffic || f.caller_engine == nullptr) return;
  if (t.kind == TaskKind::tree_op && (t.op.kind == TreeOp::fsync || t.op.kind == TreeOp::fdatasync)) return;
  t.traffic = true;
  // Relaxed is enough for the count itself: the worker learns of t through the push that
  // follows (release/acquire on the queue), and its load of the word after that reads this
  // addition or a later value of the word (read-read coherence through the queue's edge). A
  // caller write's compare-and-swap is totally ordered with this addition on the one word.
  f.traffic.fetch_add(FileTraffic::kOtherOne, std::memory_order_relaxed);
}

void ControllerCore::wait_for_caller_writes(FileCore& f) noexcept {
  // Acquire: pairs with the release (seq_cst) subtraction that ends each caller write, so the
  // worker sees its effects on the tree (logical size, counters, sync epoch stamp) before it
  // starts a task.
  if ((f.traffic.load(std::memory_order_acquire) & FileTraffic::kCallerMask) == 0) return;
  // A caller write is one page-cache copy, usually microseconds: spin for a few of them first;
  // only a task submitted while another thread writes the same file around the cache waits.
  for (unsigned turns = 0; turns < 256; ++turns) {
    cpu_relax();
    if ((f.traffic.load(std::memory_order_acquire) & FileTraffic::kCallerMask) == 0) return;
  }
  // Then sleep: the write may be held by the kernel's dirty-page throttle for much longer.
  for (;;) {
    // The futex's value before the check: a caller write that ends after the check changes it,
    // so the futex_wait below returns at once instead of sleeping past the end.
    const std::uint32_t ends = f.caller_ends.load(std::memory_order_acquire);
    // seq_cst, both: Dekker's handshake with the caller's end (FileTraffic): the caller's
    // subtraction and load of caller_sleepers are seq_cst too.
    f.caller_sleepers.fetch_add(1, std::memory_order_seq_cst);
    const bool busy = (f.traffic.load(std::memory_order_seq_cst) & FileTraffic::kCallerMask) != 0;
    // 10 ms: a bound on the sleep should a wake-up ever be missed; never a correctness matter.
    if (busy) futex_wait(f.caller_ends, ends, 10'000'000);
    f.caller_sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (!busy) return;  // the seq_cst load was also an acquire of the caller writes' ends
    if ((f.traffic.load(std::memory_order_acquire) & FileTraffic::kCallerMask) == 0) return;
  }
}

bool ControllerCore::try_caller_write(FileCore& f, Task* t, std::uint64_t offset, const void* src, std::size_t n) {
  // Not from a continuation or task on one of this controller's workers: those must not block,
  // and the workers' path queues the write instead.
  if (n < f.caller_min_bytes || on_own_worker()) return false;
  // With a CPU to spare, the hand-off overlaps the write with the program's computing
  // (ControllerOptions::caller_write_threads). This write then goes through push(), which
  // counts its thread.
  if (submitting_threads.load(std::memory_order_relaxed) < caller_write_threads) return false;
  // Begin: one more caller, only while no task but fsyncs is in flight and the file is neither
  // closing nor waiting for its tree to be replaced. Acquire: every finished task's effects on
  // the tree, and the tree itself, happen-before this write (the release subtraction in
  // finish, the release that clears kReopening). Only from here on may this thread look at
  // f.tree: a close retires it only after its close task, which waits for this caller.
  std::uint64_t word = f.traffic.load(std::memory_order_relaxed);
  do {
    if ((word & (FileTraffic::kOtherMask | FileTraffic::kClosing | FileTraffic::kReopening)) != 0 ||
        (word & FileTraffic::kCallerMask) == FileTraffic::kCallerMask)
      return false;
  } while (!f.traffic.compare_exchange_weak(word, word + FileTraffic::kCallerOne, std::memory_order_acquire,
                                            std::memory_order_relaxed));
  std::int64_t result = 0;
  const bool done = f.tree->caller_write(static_cast<const std::byte*>(src), offset, n, *f.caller_engine, result);
  // End. Release (seq_cst): pairs with a worker's acquire in wait_for_caller_writes and with the
  // next caller write's compare-and-swap; seq_cst for the handshake with a sleeping worker: it
  // raised caller_sleepers before it loaded the word, this thread subtracts before it loads
  // caller_sleepers, so a worker that saw this write in progress is woken.
  f.traffic.fetch_sub(FileTraffic::kCallerOne, std::memory_order_seq_cst);
  if (f.caller_sleepers.load(std::memory_order_seq_cst) != 0) {
    f.caller_ends.fetch_add(1, std::memory_order_release);  // pairs with the sleeper's acquire load
    futex_wake(f.caller_ends);
  }
  if (!done) return false;  // the tree holds something now: the steps' path, with its copy
  caller_writes.fetch_add(1, std::memory_order_relaxed);
  t->kind = TaskKind::tree_op;
  t->op.kind = TreeOp::write;
  t->op.offset = offset;
  t->op.length = n;
  t->op.buffer = nullptr;  // the caller's memory, not the task's: nothing refers to it after this
  t->owner = this;
  if (result < 0) {
    caller_write_failures.fetch_add(1, std::memory_order_relaxed);
    finish_task(*t, TaskState::failed, static_cast<int>(-result), "the engine's write failed");
  } else {
    caller_write_bytes.fetch_add(n, std::memory_order_relaxed);
    t->result = static_cast<std::int64_t>(n);
    finish_task(*t, TaskState::done);
  }
  return true;
}

}  // namespace tai::detail

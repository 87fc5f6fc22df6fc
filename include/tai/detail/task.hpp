// tai/detail/task.hpp - the controller's unit of work: one request, task, hook or internal job.
//
// A Task carries everything one submission needs (the tree Operation, a copy of the written
// bytes, the function of a task or hook, the continuation, the result), so a request costs no
// heap allocation once the pool is warm: tasks are recycled through per-thread caches
// (src/task_pool.cpp), and a recycled task keeps its copy buffer (up to kKeepDataBytes) for the
// next write of that size.
//
// Lifetime: reference-counted. The controller holds one reference while the task is in flight,
// every tai::Receipt one more; the last release returns the task to the pool. So a receipt may
// outlive its file and its controller.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tai/btree_ops.hpp"
#include "tai/detail/aligned_buffer.hpp"
#include "tai/detail/inplace_function.hpp"

namespace tai {

/// Where a task is. Thread-safety of the enum: a value.
enum class TaskState : std::uint8_t {
  pending,   ///< queued for its worker, not yet taken
  waiting,   ///< taken, held behind an earlier hook, barrier or close of its file
  ready,     ///< started: its steps are in the rounds (or its requests at the engine)
  running,   ///< a function (task, hook, continuation's task) is executing
  done,      ///< finished successfully
  rejected,  ///< never started: closed file, controller shutting down, bad input found at submit
  failed,    ///< finished with an error
};
const char* to_string(TaskState s) noexcept;

namespace detail {

class FileCore;
class ControllerCore;

enum class TaskKind : std::uint8_t {
  tree_op,    ///< read, write, fsync, fdatasync: an Operation on the file's tree
  function,   ///< Controller::submit
  hook,       ///< File::hook: a function in the file's order
  barrier,    ///< File::barrier: an fdatasync that later operations of the file wait for
  close,      ///< File::close / detach: write back, close the engine file
  flush,      ///< Controller::flush: the aggregate; its parts are write_back tasks
  write_back, ///< internal: write back one file (flush parts, idle flush rounds)
  evict,      ///< internal: evict one block (recycle rounds)
  collect,    ///< internal: free the tree's nodes that hold nothing (TreeCore::take_collect_request)
};

// Cache-line layout (alignas(64)). A request's task moves between the submitting thread and a
// worker, and each line either of them writes that the other touched costs the writer a round
// trip between the cores. So: line 0 holds everything a worker writes for a request (the
// completion state and the tree's Operation state, which Operation puts first); line 1 what it
// only reads (the operation's parameters, the file); the rest is the submitting thread's alone
// on the normal path (errors, the latency stamp, links, functions, the write's copy).
struct alignas(64) Task {
  static constexpr std::uint32_t kFinished = 1;  // futex word bits
  static constexpr std::uint32_t kWaiter = 2;
  // The largest copy buffer a recycled task keeps; larger copies go through the controller's
  // copy pool, bounded by write_copy_budget. Why 16 KiB and not more: what free tasks keep is
  // outside the budget, and at 64 KiB the image workload's tasks kept about 38 MB of copies at
  // its peak, whose first touches were half of its page faults (docs/results/cache-cost.md).
  static constexpr std::size_t kKeepDataBytes = 16 * 1024;

  // --- line 0 ---
  // Reference count: +1 per Receipt, +1 for the controller while in flight. acq_rel on release
  // (the last releaser must see every write of the others before recycling the task).
  std::atomic<std::uint32_t> refs{0};
  // 0 while unfinished; kFinished once the result is published (release store/exchange, pairs
  // with the acquire loads of Receipt). kWaiter: a thread sleeps on the word (futex).
  std::atomic<std::uint32_t> word{0};
  // TaskState while unfinished, for Receipt::state(). Relaxed: informational only, nothing is
  // published through it.
  std::atomic<std::uint8_t> phase{0};
  // Continuation hand-off: 0 none, 1 attached, 2 finished. CAS 0->1 by then() and exchange(2) by
  // the completer, both acq_rel: whoever comes second runs the continuation and sees the other's
  // writes (the stored function, the result).
  std::atomic<std::uint8_t> cont{0};

  TaskKind kind = TaskKind::tree_op;
  TaskState final_state = TaskState::done;  // valid once word has kFinished
  bool returns_buffer = false;              // read(offset, n): the data goes to the receipt
  bool timed = false;                       // submit_ns holds the submission time (sampled)
  // The controller finished this write while a receipt held it and let it keep its small copy
  // (keep_finished_copy in src/detail/task_pool.hpp counts it until the task is recycled).
  bool keeps_copy = false;
  // Whether this task is counted in its file's traffic word (ControllerCore::count_file_task:
  // every task of a file that may have caller writes, but fsyncs). Set before the push that
  // publishes the task, cleared by ControllerCore::finish.
  bool traffic = false;
  std::int64_t result = 0;                  // bytes transferred (read/write)
  Operation op;                             // tree_op, barrier, close, write_back, evict

  // --- line 1 (from op.offset on) ---
  FileCore* file = nullptr;     // file tasks; kept alive by the controller while in flight

  // --- line 2 on ---
  // The controller that runs the task (set at submission, before the push publishes the task):
  // a wait for it from one of that controller's own workers cannot be served (see Receipt).
  const ControllerCore* owner = nullptr;
  // Bytes of `data` this write counts against the controller's write_copy_budget: set by the
  // submitter before the push (which publishes it), cleared by the controller when the task
  // finishes (ControllerCore::finish, on the worker). 0: nothing counted.
  std::uint64_t copy_charge = 0;
  int error = 0;                            // errno of a failure (0: none)
  const char* reason = nullptr;             // static text: why it was rejected / what failed
  std::uint64_t submit_ns = 0;              // for the latency histograms, when `timed`
  // Admission order across submitting threads (Worker::stamp_admission): written by the
  // submitter just before the push that publishes the task, read by the worker after its pop.
  std::uint64_t admit_key = 0;
  Task* next = nullptr;         // intrusive FIFO links (held queue, pool lists)
  Task* parent = nullptr;       // write_back parts of a flush
  std::atomic<std::uint32_t> parts{0};   // flush: parts not yet finished (acq_rel countdown)
  std::atomic<int> part_error{0};        // flush: first errno of a part (CAS from 0, relaxed:
                                         // read after the acq_rel countdown)

  InplaceFunction<void(), 64> fn;              // function, hook
  InplaceFunction<void(Task&), 64> then;       // continuation (wrapped by Receipt::then)
  AlignedBuffer data;                          // write copy, or the read's Buffer memory
  // The task's small copy, set aside while a large write's copy from the controller's pool is
  // in `data` (File::write, before the push that publishes it), put back when the write ends
  // (ControllerCore::finish, on the worker): a task that lost its copy to every large write
  // allocated again at its next small one. (Fits in the padding after `data`.)
  AlignedBuffer displaced_copy;

  /// Records the submission time for the latency histograms.
  void stamp(std::uint64_t ns) noexcept {
    submit_ns = ns;
    timed = true;
  }

  /// Reset for reuse (keeps `data` when it is small enough to be worth keeping).
  void recycle() noexcept;
};

/// Takes a task from the calling thread's cache (or the shared pool, or the heap when both are
/// empty). refs starts at 0. Thread-safe.
Task* acquire_task();
/// Drops one reference; the last one recycles the task into the calling thread's cache.
/// Thread-safe.
void release_task(Task* t) noexcept;
/// Adds one reference for a holder of one (a receipt's copy). Thread-safe. The controller's
/// other task functions are private to libtai (src/detail/task_pool.hpp).
inline void retain_task(Task* t) noexcept {
  t->refs.fetch_add(1, std::memory_order_relaxed);  // a holder already has one: no ordering needed
}

}  // namespace detail
}  // namespace tai

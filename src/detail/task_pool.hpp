// src/detail/task_pool.hpp - the side of tai::detail::Task that only libtai's sources (and
// tests) use: the controller's reference and finishing, the deferred wake-ups, the pool's
// counters. The public side (Task itself, acquire_task, retain_task, release_task, which the
// inline code of receipt.hpp, file.hpp and controller.hpp calls) stays in tai/detail/task.hpp.
// Defined in src/task_pool.cpp; worker_controller and kWaitOnOwnWorkerReason in the controller.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "tai/detail/task.hpp"

namespace tai::detail {

/// retain_task() for a task no other thread has seen yet (a submission, before the push): a
/// plain relaxed load and store, since nothing can race with it, instead of a locked
/// read-modify-write, whose store-buffer drain would wait for every store the submission has
/// just made to the task (cache lines last written by a worker: a miss each).
inline void retain_unpublished_task(Task* t) noexcept {
  t->refs.store(t->refs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
/// The controller whose worker thread this is (nullptr on any other thread). A worker inside a
/// continuation, task or hook holds up its controller's rounds: waiting there for an unfinished
/// receipt of the same controller could never end.
const ControllerCore* worker_controller() noexcept;
/// Wakes the master of `c` (null: nothing) for a thread about to wait for one of its tasks: a
/// write may have left it asleep until its doorbell's timer (ControllerOptions::
/// write_wake_delay_ns). Thread-safe.
void wake_for_waiter(const ControllerCore* c) noexcept;
/// How long a thread waiting for a task of `c` spins before it sleeps (ControllerOptions::
/// spin_ns; null: kDefaultWaitSpinNs). Thread-safe (the options never change).
std::int64_t wait_spin_ns(const ControllerCore* c) noexcept;
inline constexpr std::int64_t kDefaultWaitSpinNs = 3000;
/// Why Receipt's waits refuse to block on a worker of the task's own controller.
extern const char* const kWaitOnOwnWorkerReason;
/// Tasks ever allocated from the heap by the pool (a test counts allocations with this).
std::uint64_t tasks_allocated() noexcept;
/// Makes the calling thread keep only a few free tasks: for controller workers, which drop the
/// last reference of many tasks but acquire few, so that what they free flows back to the
/// submitting threads (through the shared list) instead of idling in their caches.
void set_worker_task_cache() noexcept;

/// A write finished while a receipt still holds its task, which is then not recycled until the
/// program lets the receipt go: may the task keep its small copy (at most Task::kKeepDataBytes)
/// for its next write? Yes while the copies so kept, process-wide, stay within a few MiB; the
/// caller frees the copy otherwise. Keeping it spares a program that waits for each request
/// (or a short window) an allocation per write; freeing it bounds a program that holds every
/// receipt of a long batch (each finished task would keep its copy, outside write_copy_budget).
/// On yes the caller sets t.keeps_copy; recycling the task uncounts it. Thread-safe.
bool keep_finished_copy(std::size_t bytes) noexcept;
/// The times keep_finished_copy said no (a test subtracts them from the copies it counts: such a
/// task allocates its next copy by design). Thread-safe; a relaxed snapshot.
std::uint64_t finished_copies_dropped() noexcept;

/// Publishes the result: sets final_state, wakes waiters, runs the continuation on this thread.
/// Called once per task, by the controller.
void finish_task(Task& t, TaskState final_state, int error = 0, const char* reason = nullptr) noexcept;

/// While a worker runs a round, the threads waiting for what it finishes are woken at points of
/// its part (after the completions it took, and at its end) rather than one by one: a thread
/// waiting for its oldest request, or sleeping in CompletionQueue::pop, is then woken once with
/// everything finished so far instead of once per request. Each wake-up is a system call on the
/// worker, and when the waiter shares the worker's CPU the woken thread preempts the worker in
/// that call: per-request wake-ups made the two threads take turns per completion (about 7 us
/// each on the development VM), so the reads a program resubmitted reached the engine in small
/// batches. The worker installs a list on its thread (t_deferred_wakes) and calls wake() on it.
/// It takes the list away while a task or hook function runs: such a function may block (a
/// continuation must not), for instance until the thread it posted to answers.
struct DeferredWakes {
  /// Receipt waiters: finish_task() holds a reference on each task here.
  std::vector<Task*> tasks;
  /// CompletionQueue consumers: the futex word to wake, and the queue's count of posts in
  /// progress, which the post incremented and wake() decrements after the system call (the
  /// queue's destructor waits for it to reach zero).
  struct Queue {
    std::atomic<std::uint32_t>* word;
    std::atomic<std::uint32_t>* posting;
  };
  std::vector<Queue> queues;
  bool empty() const noexcept { return tasks.empty() && queues.empty(); }
  /// Wakes everyone listed and clears the lists.
  void wake() noexcept;
};
extern thread_local DeferredWakes* t_deferred_wakes;

}  // namespace tai::detail

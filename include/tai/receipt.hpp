// tai/receipt.hpp - tai::Receipt, what every submission returns.
//
//     tai::Receipt r = file.write(0, data, n);         // returns at once
//     while (!r.finished()) compute_a_little();         // poll: finished() and state() never block
//     if (!r.ok()) std::cerr << r.message() << '\n';   // ok(), error(), bytes(), message() block
//                                                      // until the write finishes (here: it has)
//
// A receipt reports its task's state (tai::TaskState), lets the caller wait (spinning briefly,
// then sleeping on a futex), gives the result (bytes transferred, or a read's tai::Buffer) or the
// error, and takes one continuation. Receipts are cheap handles (one pointer, reference
// counted): copy them freely. A receipt may outlive its file and its controller; by the time a
// controller is destroyed every receipt it issued has finished.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "tai/buffer.hpp"
#include "tai/detail/task.hpp"

namespace tai {

/// Thread-safety: every const member is safe from any thread at once; take_buffer() and then()
/// from one thread at a time (they change the receipt's shared state).
class Receipt {
 public:
  /// An empty receipt: state() is rejected, error() EINVAL.
  Receipt() noexcept = default;
  /// Adopts one reference to `task` (the library's constructor).
  explicit Receipt(detail::Task* task) noexcept : task_(task) {}
  Receipt(const Receipt& o) noexcept : task_(o.task_) {
    if (task_) detail::retain_task(task_);
  }
  Receipt(Receipt&& o) noexcept : task_(std::exchange(o.task_, nullptr)) {}
  Receipt& operator=(Receipt o) noexcept {
    std::swap(task_, o.task_);
    return *this;
  }
  ~Receipt() {
    if (task_) detail::release_task(task_);
  }

  /// False for a default-constructed or moved-from receipt; never blocks.
  bool valid() const noexcept { return task_ != nullptr; }
  /// The current state; never blocks.
  TaskState state() const noexcept;
  /// done, rejected or failed; never blocks.
  bool finished() const noexcept;
  /// Blocks until finished(): spins for its controller's ControllerOptions::spin_ns (20 us by
  /// default), then sleeps.
  ///
  /// Blocking on a worker: a continuation, a submitted function or a hook runs on a worker of
  /// the controller and holds up its rounds, so a wait there for an unfinished receipt of the
  /// *same* controller could never end. Every wait of this class refuses it at once instead of
  /// hanging: wait() returns with finished() still false, wait_for() and wait_any() report
  /// nothing finished, ok() is false, error() is EDEADLK, message() says why, bytes() is 0 and
  /// take_buffer() empty (the operation itself goes on). Chain dependent work with then().
  void wait() const noexcept;
  /// Blocks at most `d`; returns finished().
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const noexcept {
    return wait_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }
  /// Blocks until finished() (as wait()), then: true when the task is done (not rejected,
  /// not failed).
  bool ok() const noexcept;
  /// Blocks as ok(), then: the error (empty when ok()). errno values use std::generic_category.
  /// EDEADLK: the wait was refused (see wait()).
  std::error_code error() const noexcept;
  /// Blocks as ok(), then: a sentence saying what failed and why ("" when ok()).
  std::string message() const;
  /// Blocks as ok(), then: bytes transferred by a read or write (a read stops at end of file); 0
  /// for other kinds and on failure.
  std::int64_t bytes() const noexcept;
  /// Blocks as ok(), then: the data of File::read(offset, n), size() = bytes(); empty for other
  /// kinds, on failure, and after the first call (the buffer moves out).
  Buffer take_buffer();

  /// Blocks until at least one of the `n` receipts has finished (empty ones count as finished)
  /// and returns its index; -1 when `timeout_ns` (>= 0) passed first or n == 0. Spins for the
  /// longest ControllerOptions::spin_ns of their controllers, then sleeps on all of their futex
  /// words at once (futex_waitv, Linux 5.16+; on older kernels it sleeps on the first unfinished
  /// one in short slices). The way to keep a fixed number of
  /// requests in flight without waiting for the oldest. Thread-safe (const on the receipts).
  static std::ptrdiff_t wait_any(const Receipt* receipts, std::size_t n, std::int64_t timeout_ns = -1) noexcept;

  /// Attaches the continuation `fn` (callable as fn(const Receipt&) or fn()). It runs once the
  /// task finishes, on the worker thread that finished it; if the task has already finished, at
  /// once on the calling thread. One continuation per task: a second then() replaces nothing and
  /// returns false. The callable must fit 64 bytes (a compile-time error says so otherwise); it
  /// must not block for long (it runs inside a round). then() itself never waits for the task.
  template <class F>
  bool then(F&& fn) {
    if (!task_) return false;
    if constexpr (std::is_invocable_v<F&, const Receipt&>) {
      return attach([f = std::forward<F>(fn)](detail::Task& t) mutable {
        detail::retain_task(&t);
        const Receipt r(&t);
        f(r);
      });
    } else {
      return attach([f = std::forward<F>(fn)](detail::Task&) mutable { f(); });
    }
  }

 private:
  bool wait_ns(std::int64_t ns) const noexcept;
  bool attach(detail::InplaceFunction<void(detail::Task&), 64>&& fn);
  detail::Task* task_ = nullptr;
};

/// Tags of finished receipts, for one consumer thread that keeps many requests in flight: the
/// controller's answer to an engine's reap(). Attach `receipt.then(cq.post(tag))` to each
/// receipt; the worker that finishes it pushes `tag` here; pop() returns tags, waiting (spin,
/// then sleep) for at least `min` of them. A sleeping consumer is woken once per sleep, not once
/// per receipt (compare Receipt::wait_any, which wakes per receipt); a worker posting inside a
/// round wakes it after the round's completions rather than at the post, so that it gets them
/// together.
///
/// pop() must not wait on a worker thread (inside a continuation, task or hook): the posts it
/// waits for may need the rounds that worker holds up. Pop there with min = 0.
///
/// Capacity: the tags it holds without allocating (size it to the requests kept in flight); a
/// burst beyond it allocates. A tag is posted after its receipt reports finished(): pop the tags
/// themselves, not the receipts' states, to know what finished. Thread-safety: post() from any
/// thread; pop() from one thread at a time. Must outlive every receipt attached to it. The
/// consumer may destroy it as soon as it has popped the last tag it expects: the destructor
/// waits for posts still in progress (a worker may still be inside push() or hold the
/// consumer's deferred wake-up).
class CompletionQueue {
 public:
  explicit CompletionQueue(std::size_t capacity = 1024);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  /// The continuation for Receipt::then that posts `tag`.
  auto post(std::uint64_t tag) noexcept {
    return [this, tag] { push(tag); };
  }
  /// Posts `tag` directly.
  void push(std::uint64_t tag) noexcept;
  /// Writes up to `max` tags to `out`, waiting at most `timeout_ns` (negative: no limit) for
  /// `min` of them; returns how many were written.
  std::size_t pop(std::uint64_t* out, std::size_t max, std::size_t min = 1, std::int64_t timeout_ns = -1) noexcept;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace tai

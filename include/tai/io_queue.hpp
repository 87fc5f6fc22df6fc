// tai/io_queue.hpp - a single-threaded asynchronous I/O queue over any engine: the shape of the
// ioqueue benchmark, pread/pwrite/fsync with a callback, reap(min), eventfd().
//
//     auto q = tai::IoQueue::create("uring", {/*depth=*/32}).value();   // or libaio, posix, ...
//     auto file = q->engine().open(path, {tai::Open::read | tai::Open::direct}).value();
//     for (auto& req : work) {
//       while (q->pread(*file, req.buf, req.len, req.off, [&req](std::int64_t r) { req.done(r); }))
//         q->reap(1);                                    // depth reached: make room first
//       q->reap(q->in_flight() < q->depth() ? 0 : 1);    // the ioqueue benchmark's loop
//     }
//     while (q->in_flight()) q->reap(1);
//     file.reset();                                      // files go before the queue (and engine)
//
// Two backends, chosen from the engine's capabilities:
//  * kernel queue (asynchronous engines: libaio, uring): requests go into a local batch that is
//    handed to the engine in one Engine::submit() at the next reap() (see
//    IoQueueOptions::submit_batch for larger batches; once eventfd() was asked for, at once, so
//    that a poll loop never waits for a request that was never submitted). Completions come back
//    from Engine::reap(); no thread is involved.
//  * thread pool (synchronous engines: posix, cstdio, fstream, null): the ioqueue benchmark's
//    "pthread" backend. `threads` workers take slot numbers from a lock-free queue, run the request with
//    SyncEngine::execute() (blocking pread/pwrite/fsync) and push the result onto a second
//    lock-free queue that reap() drains. Idle workers sleep on a futex (no spinning), and so does
//    reap(min > 0) while it waits.
//
// Callbacks run on the thread that calls reap(), never elsewhere. They receive the request's
// result: bytes transferred (>= 0; fewer than asked only at end of file) or -errno. A callback
// may submit new requests (the slot of the request it completes is already free), may throw (the
// exception leaves reap(); completions not yet run stay queued for the next reap()), and must not
// call reap() itself (a nested reap() returns 0).
//
// Memory: the queue allocates everything at construction (depth slots, each holding the
// callback inline: kCallbackCapacity bytes, checked at compile time). Submitting and reaping
// allocate nothing.
//
// THREAD-SAFETY: an IoQueue is single-threaded, like the ioqueue benchmark's queue: all of its members must
// be called from one thread at a time (normally one I/O thread owns the queue). Only the pool's
// worker threads, which are internal, run concurrently with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "tai/detail/inplace_function.hpp"
#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai {

struct IoQueueOptions {
  /// Most requests in flight. pread() & co. return errc::resource_unavailable_try_again beyond
  /// it. The engine should have been made with EngineOptions::depth >= this (requests that the
  /// engine cannot take yet wait in the queue's batch and are submitted by later reaps).
  unsigned depth = 32;
  /// Thread-pool backend only: number of worker threads; 0 = depth (one thread per request in
  /// flight, as the ioqueue benchmark's pthread backend).
  unsigned threads = 0;
  /// Kernel-queue backend only. 0 (default): the batch is submitted at every reap(). N > 1: the
  /// batch is submitted when N requests wait in it (from pread() & co.), at a reap(min > 0), or
  /// at a reap(0) that finds the engine idle; a reap(0) while earlier requests are in flight
  /// leaves a smaller batch waiting (fewer system calls, more latency). 1: every request is
  /// submitted at once, from pread() & co.
  unsigned submit_batch = 0;
};

/// A single-threaded I/O queue over one engine. Not thread-safe: see the file comment.
class IoQueue {
 public:
  /// Bytes a callback may capture; more fails to compile (capture a pointer to your state).
  static constexpr std::size_t kCallbackCapacity = 48;
  /// The callback type: called once with the result (bytes >= 0, or -errno).
  using Callback = detail::InplaceFunction<void(std::int64_t), kCallbackCapacity>;

  /// Takes ownership of `engine` (must not be null). Starts the worker threads when the engine is
  /// a synchronous SyncEngine. Files opened through engine() must be closed (or destroyed)
  /// before the queue is destroyed, since the engine goes with it; a request in flight must not
  /// outlive its file either, so call discard() (or reap everything) before closing files.
  /// Throws std::system_error if a thread cannot be started, std::invalid_argument for a null
  /// engine or a depth of 0 or above 32768.
  explicit IoQueue(std::unique_ptr<Engine> engine, IoQueueOptions options = {});
  /// Borrows `engine`, which must outlive the queue: the natural order is engine, then files,
  /// then the queue, destroyed in reverse (the queue's destructor waits for its requests, then
  /// the files close, then the engine goes). No other user may submit to or reap this engine.
  explicit IoQueue(Engine& engine, IoQueueOptions options = {});

  /// Makes the engine called `engine_name` (tai::make_engine: "uring", "libaio", "posix",
  /// "auto", ...) with EngineOptions::depth = options.depth, and a queue over it.
  /// On failure, the selector's error ("engine 'uring' unavailable: ...").
  static Result<std::unique_ptr<IoQueue>> create(std::string_view engine_name, IoQueueOptions options = {},
                                                 std::string* note = nullptr);

  /// Waits until every request taken (including those still in the local batch, which are
  /// submitted first) has completed, WITHOUT running their callbacks (they are destroyed), then
  /// stops the worker threads. After it returns no buffer handed to the queue is touched again.
  /// Writes that were accepted are therefore carried out even though nobody hears of them.
  ~IoQueue();

  /// What the destructor does, without destroying the queue: waits for every request in flight
  /// and destroys their callbacks without running them. Afterwards in_flight() == 0 and files
  /// may be closed. Not thread-safe; must not be called from a callback.
  void discard() noexcept;

  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  /// Reads `len` bytes at `offset` of `file` into `buf`; `cb(result)` runs from a later reap().
  /// `buf` stays borrowed until then. Returns errc::resource_unavailable_try_again when depth()
  /// requests are in flight (reap first), else no error: every other failure (bad file, bad
  /// range, I/O error) is reported as -errno on the callback. Not thread-safe.
  template <class F>
  std::error_code pread(EngineFile& file, void* buf, std::size_t len, std::uint64_t offset, F&& cb) {
    return submit(Request{Op::read, &file, buf, offset, len, 0, false}, std::forward<F>(cb));
  }
  /// Writes `len` bytes of `buf` at `offset`; `buf` stays borrowed until the callback ran (no
  /// copy is taken). Same errors as pread(). Not thread-safe.
  template <class F>
  std::error_code pwrite(EngineFile& file, const void* buf, std::size_t len, std::uint64_t offset, F&& cb) {
    return submit(Request{Op::write, &file, const_cast<void*>(buf), offset, len, 0, false}, std::forward<F>(cb));
  }
  /// fsync(2) of `file`, asynchronous on libaio/uring. It covers writes that COMPLETED before
  /// it was submitted; writes still in flight are not ordered before it (reap them first).
  /// Not thread-safe.
  template <class F>
  std::error_code fsync(EngineFile& file, F&& cb) {
    return submit(Request{Op::fsync, &file, nullptr, 0, 0, 0, false}, std::forward<F>(cb));
  }
  /// fdatasync(2) of `file`; same rules as fsync(). Not thread-safe.
  template <class F>
  std::error_code fdatasync(EngineFile& file, F&& cb) {
    return submit(Request{Op::fdatasync, &file, nullptr, 0, 0, 0, false}, std::forward<F>(cb));
  }

  /// Any request (its user_data is ignored; `link` is passed to the engine). `cb` is any
  /// callable taking std::int64_t that fits in kCallbackCapacity bytes, or an rvalue Callback.
  /// Not thread-safe.
  template <class F>
  std::error_code submit(const Request& request, F&& cb) {
    if (free_top_ == 0) return std::make_error_code(std::errc::resource_unavailable_try_again);
    const std::uint32_t slot = free_[--free_top_];
    try {
      if constexpr (std::is_same_v<std::decay_t<F>, Callback>)
        slots_[slot].callback = std::move(cb);  // already type-erased (an rvalue Callback)
      else
        slots_[slot].callback.emplace(std::forward<F>(cb));
    } catch (...) {
      free_[free_top_++] = slot;  // the callable's constructor threw: the slot stays free
      throw;
    }
    start(slot, request);
    return {};
  }

  /// Runs the callbacks of completed requests on this thread and returns how many ran.
  /// min == 0: only what is already done; returns 0 at once, without a system call, when nothing
  /// is in flight, or when nothing has completed (engines poll their completion ring in user
  /// space; the pool's queue is a user-space queue). min > 0: blocks until at least
  /// min(min, in_flight()) callbacks ran or `timeout` passed. Submits the batch first.
  /// Called from inside a callback: returns 0. Not thread-safe.
  std::size_t reap(std::size_t min = 0, Timeout timeout = kForever);

  /// A descriptor that becomes readable (POLLIN) when a completion is ready, for poll loops:
  /// poll it, read(2) its 8-byte counter to reset it, then reap(0). Over libaio/uring it is the
  /// engine's eventfd; over the thread pool, an eventfd the workers write after each completion
  /// (created at the first call: until then the workers make no such system call). From the
  /// first call on, requests are submitted to the engine at once rather than at the next reap.
  /// -1 when the engine has none (an asynchronous engine without Capabilities::eventfd).
  /// The descriptor belongs to the queue. Not thread-safe.
  int eventfd();

  /// Requests taken and whose callback has not run yet. Not thread-safe.
  std::size_t in_flight() const noexcept { return depth_ - free_top_; }
  /// The most requests in flight (IoQueueOptions::depth). Thread-safe.
  std::size_t depth() const noexcept { return depth_; }
  /// True when the thread-pool backend is in use. Thread-safe.
  bool uses_thread_pool() const noexcept { return pool_ != nullptr; }
  /// Worker threads (0 for the kernel-queue backend). Thread-safe.
  unsigned threads() const noexcept;
  /// The engine, to open and close files. Its submit()/reap() belong to the queue: do not call
  /// them. open()/close() are thread-safe.
  Engine& engine() noexcept { return *engine_; }
  const Engine& engine() const noexcept { return *engine_; }

 private:
  struct Slot {
    Callback callback;
    Request request;  // thread pool: what the worker runs
  };
  class Pool;

  void start(std::uint32_t slot, const Request& request);  // the non-template part of submit()
  void flush_batch();
  std::size_t reap_engine(std::size_t min, Timeout timeout);
  std::size_t reap_pool(std::size_t min, Timeout timeout);
  std::size_t run_harvested();
  void run(std::uint32_t slot, std::int64_t result);
  void init(const IoQueueOptions& options);

  std::unique_ptr<Engine> owned_engine_;  // null when the engine is borrowed
  Engine* engine_;
  std::size_t depth_;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<std::uint32_t[]> free_;  // stack of free slot numbers, free_top_ of them
  std::size_t free_top_;
  unsigned submit_batch_;
  bool reaping_ = false;  // inside reap(): a nested reap() returns 0

  // Kernel-queue backend.
  std::vector<Request> batch_;               // taken, not yet handed to the engine
  std::vector<Completion> harvested_;        // from Engine::reap, callbacks not yet run
  std::size_t harvest_head_ = 0;             // next of harvested_ to run
  std::size_t harvest_tail_ = 0;             // end of harvested_

  // Thread-pool backend.
  std::unique_ptr<Pool> pool_;
};

}  // namespace tai

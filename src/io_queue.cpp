// The single-threaded I/O queue (include/tai/io_queue.hpp): the kernel-queue backend, a thin
// batcher over Engine::submit/reap, and the thread-pool backend over SyncEngine::execute.
#include "tai/io_queue.hpp"

#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <stdexcept>
#include <system_error>
#include <string>
#include <thread>

#include "src/detail/lockfree_queue.hpp"
#include "engines/common/timespec.hpp"
#include "tai/engine_selector.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai {

namespace {

// boost::lockfree::queue with fixed_sized<true> indexes its nodes with 16 bits (at most 65535,
// one of them the queue's dummy node); depth is kept well below that.
constexpr unsigned kMaxDepth = 32768;

// Raw futex calls: the C++17 standard library has no atomic wait. Both take the address of a
// std::atomic<std::uint32_t>, which on Linux has the layout of a plain uint32_t.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, const timespec* relative) {
  // Returns on a wake, when *word != expected (EAGAIN), on a signal (EINTR) or at the timeout
  // (ETIMEDOUT): every caller re-checks its condition, so the reason does not matter.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, relative, nullptr, 0);
}
void futex_wake(std::atomic<std::uint32_t>& word, int count) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

timespec to_timespec(std::chrono::nanoseconds d) { return detail::ns_to_timespec(d.count()); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Thread pool: the ioqueue benchmark's pthread backend.
//
// Submission: the owner writes the request into its slot, pushes the slot number onto `pending_slots_`
// (MPMC: one producer, `threads` consumers), and wakes one sleeping worker if any. A worker
// pops a slot, runs SyncEngine::execute on it, and pushes {slot, result} onto `done_` (MPMC
// used as MPSC: the workers produce, the owner consumes). The slot's request is read by the
// worker only between the two pushes; the owner does not touch it until it pops the result.
// Both hand-overs are ordered by the queues themselves: boost::lockfree::queue::push publishes
// with a release CAS and pop reads with acquire loads, so everything written before a push
// (the request, or the data read into the user's buffer) is visible after the matching pop.
//
// Sleeping (no spinning: the second core belongs to the application): a Dekker-style handshake
// on each side, "announce, fence, re-check, sleep on an epoch futex":
//   sleeper: e = epoch.load; waiting = 1; fence(seq_cst); if (queue non-empty) -> go; futex_wait(epoch, e)
//   waker:   push; fence(seq_cst); if (waiting) { epoch += 1; futex_wake(epoch) }
// The two seq_cst fences guarantee that the sleeper sees the push or the waker sees `waiting`;
// the epoch makes a wake that lands between the re-check and futex_wait return at once.
class IoQueue::Pool {
 public:
  struct Done {
    std::uint32_t slot;
    std::int64_t result;
  };

  Pool(SyncEngine& engine, Slot* slots, unsigned depth, unsigned threads)
      : engine_(engine), slots_(slots), pending_slots_(depth), done_(depth) {
    workers_.reserve(threads);
    try {
      const tai::detail::SignalsBlockedScope start_blocked;  // the threads start with every signal blocked
      for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] {
        tai::detail::mark_this_thread_as_tai("tai-io-queue");
        worker_main();
      });
    } catch (...) {
      stop();
      throw;
    }
  }

  // Precondition: nothing in flight (IoQueue's destructor drains first).
  ~Pool() {
    stop();
    const int fd = eventfd_.load(std::memory_order_relaxed);  // owner-only value, see eventfd()
    if (fd >= 0) tai::detail::close_own_descriptor(fd);
  }

  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()); }

  /// Owner: hands slot `slot` (request already written) to a worker.
  void push(std::uint32_t slot) {
    if (!pending_slots_.bounded_push(slot)) fatal("the request queue is full");  // holds depth entries
    // seq_cst fence: pairs with the fence in worker_main() between `idle_workers_` += 1 and the
    // re-check of pending_slots_ (the Dekker handshake in the class comment).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // relaxed: the fence above orders this load after the push.
    if (idle_workers_.load(std::memory_order_relaxed) > 0) {
      // release: pairs with the acquire load of work_epoch_ in worker_main() (not needed for
      // correctness of the data, which travels through pending_slots_, but keeps the epoch monotonic).
      work_epoch_.fetch_add(1, std::memory_order_release);
      futex_wake(work_epoch_, 1);
    }
  }

  /// Owner: takes one completion if there is one. No system call.
  bool pop(Done& out) { return done_.pop(out); }

  /// Owner: sleeps until a completion is queued or `timeout` passes (negative: no limit).
  /// Returns true if a completion is (probably) there; callers re-check with pop().
  bool wait(Timeout timeout) {
    const bool forever = timeout.count() < 0;
    const auto deadline = std::chrono::steady_clock::now() + (forever ? Timeout(0) : timeout);
    for (;;) {
      // acquire: pairs with the release fetch_add in worker_main(); the value only needs to be
      // read before the re-check below, which the seq_cst fence guarantees.
      const std::uint32_t epoch = done_epoch_.load(std::memory_order_acquire);
      // relaxed store + seq_cst fence: the owner's half of the handshake (pairs with the fence in
      // worker_main() after done_.push).
      owner_waiting_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!done_.empty()) {
        owner_waiting_.store(false, std::memory_order_relaxed);  // relaxed: only a hint to workers
        return true;
      }
      timespec ts{};
      const timespec* rel = nullptr;
      if (!forever) {
        auto left = deadline - std::chrono::steady_clock::now();
        if (left <= Timeout(0)) {
          owner_waiting_.store(false, std::memory_order_relaxed);  // relaxed: hint only
          return false;
        }
        ts = to_timespec(std::chrono::duration_cast<std::chrono::nanoseconds>(left));
        rel = &ts;
      }
      futex_wait(done_epoch_, epoch, rel);
      owner_waiting_.store(false, std::memory_order_relaxed);  // relaxed: hint only
      if (!done_.empty()) return true;
    }
  }

  /// Owner: the pool's eventfd, created at the first call.
  int eventfd() {
    // relaxed: only the owner thread stores eventfd_, so it reads its own last store.
    int fd = eventfd_.load(std::memory_order_relaxed);
    if (fd >= 0) return fd;
    fd = tai::detail::make_own_eventfd();
    if (fd < 0) return -1;
    // release: pairs with the acquire load in worker_main(); the descriptor is ready to be
    // written by then (a plain int, nothing else to publish, but it states the intent).
    eventfd_.store(fd, std::memory_order_release);
    return fd;
  }

 private:
  [[noreturn]] static void fatal(const char* what) {
    std::fprintf(stderr, "tai::IoQueue internal error: %s\n", what);
    std::abort();
  }

  void stop() noexcept {
    // release: pairs with the acquire load of stop_ in worker_main(), which happens after the
    // worker read the bumped epoch (or was woken), so it sees `true`.
    stop_.store(true, std::memory_order_release);
    // release: pairs with the acquire load of work_epoch_ in worker_main().
    work_epoch_.fetch_add(1, std::memory_order_release);
    futex_wake(work_epoch_, INT32_MAX);
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void worker_main() {
    for (;;) {
      std::uint32_t slot;
      if (!pending_slots_.pop(slot)) {
        // acquire: pairs with the release fetch_add in push()/stop(); read before the
        // announce + re-check so that a wake after the re-check makes futex_wait return.
        const std::uint32_t epoch = work_epoch_.load(std::memory_order_acquire);
        // relaxed RMW + the seq_cst fence below: the worker's half of the Dekker handshake with
        // push() (pairs with the fence there).
        idle_workers_.fetch_add(1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const bool got = pending_slots_.pop(slot);
        if (!got) {
          // acquire: pairs with the release store in stop().
          if (stop_.load(std::memory_order_acquire)) {
            idle_workers_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a count only
            return;
          }
          futex_wait(work_epoch_, epoch, nullptr);
        }
        // relaxed: a count read by push() only as a hint after its own fence; a stale value
        // costs at most one spare futex_wake.
        idle_workers_.fetch_sub(1, std::memory_order_relaxed);
        if (!got) continue;
      }
      std::int64_t result;
      try {
        result = engine_.execute(slots_[slot].request).result;
      } catch (const std::bad_alloc&) {
        result = -ENOMEM;  // a bounce buffer could not be allocated
      } catch (...) {
        result = -EIO;     // an engine must not throw; never let it end the worker
      }
      if (!done_.bounded_push(Done{slot, result})) fatal("the completion queue is full");
      // acquire: pairs with the release store in eventfd(); -1 until the owner asked for it.
      const int efd = eventfd_.load(std::memory_order_acquire);
      if (efd >= 0) {
        const std::uint64_t one = 1;
        // Can only fail with EAGAIN when the counter is about to overflow (2^64 - 2), i.e. never.
        [[maybe_unused]] ssize_t w = ::write(efd, &one, sizeof one);
      }
      // seq_cst fence: pairs with the fence in wait() between owner_waiting_ = true and its
      // re-check of done_ (the handshake in the class comment).
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // relaxed: ordered by the fence above.
      if (owner_waiting_.load(std::memory_order_relaxed)) {
        // release: pairs with the acquire load of done_epoch_ in wait().
        done_epoch_.fetch_add(1, std::memory_order_release);
        futex_wake(done_epoch_, 1);
      }
    }
  }

  SyncEngine& engine_;
  Slot* slots_;
  boost::lockfree::queue<std::uint32_t, boost::lockfree::fixed_sized<true>> pending_slots_;
  boost::lockfree::queue<Done, boost::lockfree::fixed_sized<true>> done_;
  // Futex words and flags; each on its own cache line, since workers and owner write them.
  alignas(64) std::atomic<std::uint32_t> work_epoch_{0};   // bumped to wake workers
  alignas(64) std::atomic<std::uint32_t> idle_workers_{0}; // workers about to sleep or asleep
  alignas(64) std::atomic<std::uint32_t> done_epoch_{0};   // bumped to wake the owner
  alignas(64) std::atomic<bool> owner_waiting_{false};     // the owner sleeps in wait()
  std::atomic<bool> stop_{false};                          // the pool is shutting down
  std::atomic<int> eventfd_{-1};                           // >= 0 once asked for
  std::vector<std::thread> workers_;
};

// ---------------------------------------------------------------------------------------------
// IoQueue

IoQueue::IoQueue(std::unique_ptr<Engine> engine, IoQueueOptions options)
    : owned_engine_(std::move(engine)), engine_(owned_engine_.get()), depth_(options.depth),
      submit_batch_(options.submit_batch) {
  init(options);
}

IoQueue::IoQueue(Engine& engine, IoQueueOptions options)
    : engine_(&engine), depth_(options.depth), submit_batch_(options.submit_batch) {
  init(options);
}

void IoQueue::init(const IoQueueOptions& options) {
  if (!engine_) throw std::invalid_argument("tai::IoQueue: null engine");
  if (options.depth == 0 || options.depth > kMaxDepth)
    throw std::invalid_argument("tai::IoQueue: depth must be between 1 and " + std::to_string(kMaxDepth) +
                                " (got " + std::to_string(options.depth) + ")");
  slots_ = std::make_unique<Slot[]>(depth_);
  free_ = std::make_unique<std::uint32_t[]>(depth_);
  // Lowest slot numbers on top, so that a lightly loaded queue keeps reusing the same few slots.
  for (std::size_t i = 0; i < depth_; ++i) free_[i] = static_cast<std::uint32_t>(depth_ - 1 - i);
  free_top_ = depth_;

  auto* sync = engine_->capabilities().asynchronous ? nullptr : dynamic_cast<SyncEngine*>(engine_);
  if (sync) {
    const unsigned threads = options.threads ? options.threads : options.depth;
    pool_ = std::make_unique<Pool>(*sync, slots_.get(), options.depth, threads);
  } else {
    // Kernel-queue backend (or a synchronous engine that is not a SyncEngine, e.g. a wrapper:
    // its submit() does the work on this thread, which is correct, only not concurrent).
    batch_.reserve(depth_);
    harvested_.resize(depth_);
  }
}

Result<std::unique_ptr<IoQueue>> IoQueue::create(std::string_view engine_name, IoQueueOptions options,
                                                 std::string* note) {
  if (options.depth == 0 || options.depth > kMaxDepth)
    return Error{std::make_error_code(std::errc::invalid_argument),
                 "tai::IoQueue: depth must be between 1 and " + std::to_string(kMaxDepth) + " (got " +
                     std::to_string(options.depth) + ")"};
  EngineOptions eo;
  eo.depth = options.depth;
  auto engine = make_engine(engine_name, eo, note);
  if (!engine) return engine.error();
  try {
    return std::make_unique<IoQueue>(std::move(engine.value()), options);
  } catch (const std::system_error& e) {
    return Error{e.code(), std::string("tai::IoQueue: cannot start the worker threads: ") + e.what()};
  }
}

IoQueue::~IoQueue() {
  discard();
  pool_.reset();  // joins the workers while the engine still exists
}

unsigned IoQueue::threads() const noexcept { return pool_ ? pool_->threads() : 0; }

void IoQueue::start(std::uint32_t slot, const Request& request) {
  if (pool_) {
    Slot& s = slots_[slot];
    s.request = request;
    s.request.user_data = slot;
    pool_->push(slot);
    return;
  }
  batch_.push_back(request);
  batch_.back().user_data = slot;
  if (submit_batch_ != 0 && batch_.size() >= submit_batch_) flush_batch();
}

void IoQueue::flush_batch() {
  if (batch_.empty()) return;
  const std::size_t taken = engine_->submit(batch_.data(), batch_.size());
  if (taken == batch_.size()) {
    batch_.clear();
  } else {
    // The engine is at its own depth (made with a smaller EngineOptions::depth than ours): the
    // rest waits for the next reap.
    batch_.erase(batch_.begin(), batch_.begin() + static_cast<std::ptrdiff_t>(taken));
  }
}

void IoQueue::run(std::uint32_t slot, std::int64_t result) {
  // Move the callback out and free the slot first, so that the callback can submit again even
  // when the queue was full.
  Callback cb = std::move(slots_[slot].callback);
  free_[free_top_++] = slot;
  cb(result);
}

std::size_t IoQueue::run_harvested() {
  std::size_t ran = 0;
  // harvest_head_ is advanced before the callback runs: if it throws, that completion is
  // consumed and the rest stay for the next reap().
  while (harvest_head_ < harvest_tail_) {
    const Completion& c = harvested_[harvest_head_++];
    ++ran;
    run(static_cast<std::uint32_t>(c.user_data), c.result);
  }
  return ran;
}

std::size_t IoQueue::reap(std::size_t min, Timeout timeout) {
  if (reaping_ || free_top_ == depth_) return 0;  // nested, or nothing in flight: no system call
  reaping_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{reaping_};
  min = std::min(min, in_flight());
  return pool_ ? reap_pool(min, timeout) : reap_engine(min, timeout);
}

std::size_t IoQueue::reap_engine(std::size_t min, Timeout timeout) {
  std::size_t ran = run_harvested();  // left by a callback that threw
  const bool forever = timeout.count() < 0;
  // The clock is read only for a finite timeout: reap(0) stays free of it.
  const auto deadline = forever ? std::chrono::steady_clock::time_point{} : std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // Submit what waits, unless a batch threshold is set and reap(0) finds the engine busy with
    // earlier requests: then the batch grows until the threshold, a blocking reap, or an idle
    // engine (so nothing ever waits for a submission that would not come).
    if (min > ran || submit_batch_ <= 1 || batch_.size() >= submit_batch_ || engine_->in_flight() == 0)
      flush_batch();
    std::size_t want = min > ran ? min - ran : 0;
    want = std::min(want, engine_->in_flight());
    Timeout left = timeout;
    if (!forever && want > 0) {
      left = std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = Timeout(0);
    }
    const std::size_t got = engine_->reap(harvested_.data(), harvested_.size(), want, left);
    harvest_head_ = 0;
    harvest_tail_ = got;
    ran += run_harvested();
    if (ran >= min || in_flight() == 0) return ran;
    if (got == 0 && (!forever || want == 0)) return ran;  // timed out, or the engine took nothing
  }
}

std::size_t IoQueue::reap_pool(std::size_t min, Timeout timeout) {
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? std::chrono::steady_clock::time_point{} : std::chrono::steady_clock::now() + timeout;
  std::size_t ran = 0;
  bool timed_out = false;
  for (;;) {
    // Bounded by what is in flight now, so that callbacks that keep submitting fast requests
    // cannot keep this loop going forever.
    for (std::size_t budget = in_flight(); budget > 0; --budget) {
      Pool::Done d;
      if (!pool_->pop(d)) break;
      ++ran;
      run(d.slot, d.result);
    }
    if (ran >= min || in_flight() == 0 || timed_out) return ran;
    Timeout left = kForever;
    if (!forever) {
      left = std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = Timeout(0);
    }
    timed_out = !pool_->wait(left);  // one more pass collects what arrived meanwhile
  }
}

int IoQueue::eventfd() {
  // Poll loops must never wait for a request still sitting in the local batch.
  submit_batch_ = 1;
  flush_batch();
  if (pool_) return pool_->eventfd();
  return engine_->eventfd();
}

void IoQueue::discard() noexcept {
  // Callbacks are destroyed, not run: the owner is going away and they may point into it.
  auto discard = [this](std::uint32_t slot) {
    slots_[slot].callback.reset();
    free_[free_top_++] = slot;
  };
  if (pool_) {
    while (in_flight() > 0) {
      Pool::Done d;
      while (pool_->pop(d)) discard(d.slot);
      if (in_flight() > 0) pool_->wait(kForever);
    }
    return;
  }
  while (harvest_head_ < harvest_tail_) discard(static_cast<std::uint32_t>(harvested_[harvest_head_++].user_data));
  while (in_flight() > 0) {
    flush_batch();
    const std::size_t got = engine_->reap(harvested_.data(), harvested_.size(), engine_->in_flight() ? 1 : 0);
    for (std::size_t i = 0; i < got; ++i) discard(static_cast<std::uint32_t>(harvested_[i].user_data));
    if (got == 0 && engine_->in_flight() == 0 && batch_.empty()) break;  // cannot happen; never hang
  }
}

}  // namespace tai

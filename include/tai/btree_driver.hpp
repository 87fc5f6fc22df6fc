// tai/btree_driver.hpp - running a tai::BTree's steps without threads: IoExecutor (one engine
// request on the calling thread), EngineExecutor, and SequentialDriver (a FIFO runner for tests,
// tools and benchmarks). Not part of tai/tai.hpp: the controller runs trees itself, and only code
// that drives a tree directly needs this header (it pulls in <random>).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tai/btree.hpp"

namespace tai {

/// Carries out one engine request on the calling thread.
class IoExecutor {
 public:
  virtual ~IoExecutor() = default;
  virtual Completion execute(const Request& request) = 0;
};

/// Runs a request through its file's engine: SyncEngine::execute for synchronous engines,
/// else submit() + reap(min 1) (one request at a time; the caller owns the engine's queue).
/// A request without a file completes with -EBADF. Thread-safety: as the engine's.
class EngineExecutor final : public IoExecutor {
 public:
  Completion execute(const Request& request) override;
};

/// Runs steps FIFO on the calling thread: the runner for tests, tools and benchmarks.
/// With defer_io, engine requests are not carried out when issued but later, in random order
/// (seeded), interleaved with other steps: this exercises parking and ordering as an
/// asynchronous engine would. Thread-safety: none (one thread).
class SequentialDriver final : public StepSink {
 public:
  struct Options {
    IoExecutor* executor = nullptr;  ///< nullptr: an EngineExecutor
    bool defer_io = false;
    std::uint64_t seed = 1;
    /// Let the trees' inline path execute uncached requests at once (StepSink::io_now) when
    /// I/O is not deferred. Off by default, so that tests see every request as steps.
    bool inline_io = false;
  };
  SequentialDriver();
  explicit SequentialDriver(const Options& options);

  /// tree.start(op, *this).
  void start(detail::TreeHandle& tree, Operation& op) { tree.start(op, *this); }
  /// Runs until no step is queued and no engine request is outstanding.
  void run();
  /// start() + run().
  void run_one(detail::TreeHandle& tree, Operation& op) {
    start(tree, op);
    run();
  }

  std::uint64_t steps_run() const noexcept { return steps_; }
  std::uint64_t requests_executed() const noexcept { return requests_; }

  void emit(const Step& step) override { queue_.push(step); }
  void io(const Request& request, const Step& continuation) override;
  bool io_now(const Request& request, Operation& op, std::int64_t& result) override;

 private:
  /// FIFO of steps: a power-of-two ring that grows (its memory is kept between runs).
  class StepRing {
   public:
    bool empty() const noexcept { return head_ == tail_; }
    void push(const Step& s) {
      if (tail_ - head_ == items_.size()) grow();
      items_[tail_++ & (items_.size() - 1)] = s;
    }
    Step pop() noexcept { return items_[head_++ & (items_.size() - 1)]; }

   private:
    void grow() {
      std::vector<Step> bigger(items_.empty() ? 64 : items_.size() * 2);
      for (std::size_t i = 0; head_ + i != tail_; ++i) bigger[i] = items_[(head_ + i) & (items_.size() - 1)];
      tail_ -= head_;
      head_ = 0;
      items_.swap(bigger);
    }
    std::vector<Step> items_;
    std::size_t head_ = 0, tail_ = 0;
  };

  void complete_io(const Request& request, Step continuation);
  Options options_;
  EngineExecutor engine_executor_;
  StepRing queue_;
  std::vector<std::pair<Request, Step>> deferred_;
  std::mt19937_64 rng_;
  std::uint64_t steps_ = 0;
  std::uint64_t requests_ = 0;
};

}  // namespace tai

// A progress line on stderr for long runs on a terminal: images done / total, rate, ETA, rewritten
// in place (\r) at most every `interval`, cleared at the end. Nothing at all when the stream is not
// a terminal (logs, pipes, CI), nor during the first `delay` (short runs stay quiet).
//
// advance() is called by the OpenMP threads after each image: when the line is off it is one
// relaxed atomic add; when on, also a clock read and a compare; the thread that crosses the next
// print time (and wins one compare-exchange) formats and writes the line, the others go on. No
// extra thread, so the run's context-switch counts see no progress thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace augment {

struct ProgressOptions {
  int fd = 2;                                         // where the line goes
  bool force = false;                                 // print even when fd is not a terminal (tests)
  std::chrono::milliseconds delay{2000};              // nothing before this much time has passed
  std::chrono::milliseconds interval{250};            // at most one line per interval
};

class Progress {
 public:
  // label prefixes the line, e.g. the method name ("posix r1").
  Progress(std::size_t total, std::string label, ProgressOptions options = {});
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(std::size_t n = 1);
  // Clears the line if one was printed (idempotent). Call before printing the run's result.
  void finish();

  bool enabled() const { return enabled_; }
  std::size_t done() const { return done_.load(std::memory_order_relaxed); }
  // The text of the line for `done` images after `elapsed_s` seconds (no \r): exposed for tests.
  std::string line(std::size_t done, double elapsed_s) const;

 private:
  void print(std::size_t done, std::int64_t now_ns);

  const std::size_t total_;
  const std::string label_;
  const ProgressOptions options_;
  const bool enabled_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<std::size_t> done_{0};
  std::atomic<std::int64_t> next_print_ns_;  // since start_
  std::atomic<bool> printed_{false};
  std::atomic<bool> finished_{false};
  std::atomic<bool> writing_{false};  // one writer at a time, so lines never interleave
};

}  // namespace augment

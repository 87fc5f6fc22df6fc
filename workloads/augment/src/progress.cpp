#include "progress.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace augment {

namespace {
// write() until done: a terminal may take a line in pieces. Errors are ignored (a closed terminal
// must not fail the run).
void write_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += std::size_t(n);
  }
}

std::string duration_text(double s) {
  if (!(s >= 0) || s > 99 * 3600) return "?";
  const long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}
}  // namespace

Progress::Progress(std::size_t total, std::string label, ProgressOptions options)
    : total_(total),
      label_(std::move(label)),
      options_(options),
      enabled_(options.force || ::isatty(options.fd) == 1),
      start_(std::chrono::steady_clock::now()),
      next_print_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(options.delay).count()) {}

Progress::~Progress() { finish(); }

std::string Progress::line(std::size_t done, double elapsed_s) const {
  const double rate = elapsed_s > 0 ? double(done) / elapsed_s : 0;
  const double eta = rate > 0 && total_ >= done ? double(total_ - done) / rate : -1;
  const double percent = total_ ? 100.0 * double(done) / double(total_) : 0;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu/%zu images (%.0f%%), %.1f images/s, ETA %s", done, total_, percent, rate,
                duration_text(eta).c_str());
  return label_.empty() ? std::string(buf) : label_ + ": " + buf;
}

void Progress::advance(std::size_t n) {
  const std::size_t done = done_.fetch_add(n, std::memory_order_relaxed) + n;
  if (!enabled_) return;
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  std::int64_t due = next_print_ns_.load(std::memory_order_relaxed);
  if (now_ns < due) return;
  const std::int64_t next = now_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(options_.interval).count();
  // One thread wins the right to print this interval; the losers saw it advanced and return.
  if (!next_print_ns_.compare_exchange_strong(due, next, std::memory_order_relaxed)) return;
  print(done, now_ns);
}

void Progress::print(std::size_t done, std::int64_t now_ns) {
  if (writing_.exchange(true, std::memory_order_acquire)) return;  // a slow terminal: skip this one
  if (!finished_.load(std::memory_order_acquire)) {
    // \r then "erase to end of line" (ESC [ K): a shorter line leaves no tail of the previous one.
    write_all(options_.fd, "\r" + line(done, double(now_ns) * 1e-9) + "\033[K");
    printed_.store(true, std::memory_order_relaxed);
  }
  writing_.store(false, std::memory_order_release);
}

void Progress::finish() {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  // Wait out a line being written by another thread, so the clear comes after it.
  while (writing_.exchange(true, std::memory_order_acquire)) {
  }
  if (printed_.load(std::memory_order_relaxed)) write_all(options_.fd, "\r\033[K");
  writing_.store(false, std::memory_order_release);
}

}  // namespace augment

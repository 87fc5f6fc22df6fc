// posix: pwrite(2) from every compute thread at its own offset; no lock is needed. sync() is a
// plain fsync(2)/fdatasync(2) on the compute thread, which waits for it. With --direct the files
// are O_DIRECT and the loop hands over padded, aligned records.
// posix-bgsync: the same pwrite(2) on the compute thread, and each fsync handed to one background
// thread, which the compute thread does not wait for (until the batch ends). It is the bound of
// an asynchronous library whose writes cost what pwrite costs on the caller (one copy, while the
// record is hot, no hand-off) and whose only hidden I/O is the fsync: what TAI's methods are
// measured against when the compute threads fill every CPU.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "method.hpp"

namespace augment {
namespace {
// The whole record at `offset`, short writes continued: 0 or errno.
int pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= std::size_t(w);
    offset += std::uint64_t(w);
  }
  return 0;
}

class PosixMethod final : public Method {
 public:
  explicit PosixMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    return open_descriptors(paths, config_.direct, &fds_);
  }
  std::size_t record_alignment() const override { return config_.direct ? kDirectAlignment : 1; }
  void write(std::size_t, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    if (const int e = pwrite_all(fds_[file], data, n, offset)) fail(errno_text("pwrite", e));
  }
  void sync(std::size_t, unsigned file) override {
    if (const int e = sync_fd(fds_[file], config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
  }
  void finish() override {
    for (std::size_t i = 0; i < fds_.size(); ++i)
      if (fds_[i] >= 0) sync(0, unsigned(i));
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~PosixMethod() override { close_all(fds_); }

 private:
  const MethodConfig config_;
  std::vector<int> fds_;
};

class PosixBackgroundSyncMethod final : public Method {
 public:
  explicit PosixBackgroundSyncMethod(const MethodConfig& config) : config_(config), syncer_([this] { run(); }) {}
  bool open(const std::vector<std::string>& paths) override {
    if (!open_descriptors(paths, config_.direct, &fds_)) return false;
    std::lock_guard<std::mutex> lock(mu_);
    queued_.assign(fds_.size(), false);
    return true;
  }
  std::size_t record_alignment() const override { return config_.direct ? kDirectAlignment : 1; }
  void write(std::size_t, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    if (const int e = pwrite_all(fds_[file], data, n, offset)) fail(errno_text("pwrite", e));
  }
  // An fsync already queued and not yet begun covers this one's writes too (it begins later).
  void sync(std::size_t, unsigned file) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_[file]) return;
    queued_[file] = true;
    queue_.push_back(file);
    cv_.notify_all();
  }
  void end_batch() override { drain(); }
  void finish() override {
    for (std::size_t i = 0; i < fds_.size(); ++i) sync(0, unsigned(i));
    drain();
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~PosixBackgroundSyncMethod() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    syncer_.join();
    close_all(fds_);
  }

 private:
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_, nothing left
      const unsigned file = queue_.front();
      queue_.pop_front();
      queued_[file] = false;  // a sync asked from now on needs a new fsync
      busy_ = true;
      const int fd = fds_[file];
      lock.unlock();
      if (const int e = sync_fd(fd, config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  const MethodConfig config_;
  std::vector<int> fds_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<unsigned> queue_;
  std::vector<bool> queued_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread syncer_;  // last: started once every member above is made
};
}  // namespace

std::vector<MethodInfo> posix_methods() {
  return {{"posix", "pwrite(2) from each compute thread, fsync(2) on the compute thread",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new PosixMethod(c)); }, "",
           false},
          {"posix-bgsync",
           "pwrite(2) from each compute thread, each fsync(2) handed to a background thread (waited for at batch ends): "
           "the bound of a library that hides only the fsync",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new PosixBackgroundSyncMethod(c)); },
           "", false}};
}
}  // namespace augment

// aio: glibc POSIX AIO. Each record is copied into its slot's buffer (aligned, so --direct works)
// and handed to aio_write; sync() hands an aio_fsync (O_SYNC, or O_DSYNC for --fdatasync) to the
// same queue and returns. The batch's end waits for every slot with aio_suspend and checks
// aio_error/aio_return; finish() is one aio_fsync per file, waited the same way, then close.
#include <aio.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "method.hpp"

namespace augment {
namespace {
class AioMethod final : public Method {
 public:
  explicit AioMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    return open_descriptors(paths, config_.direct, &fds_);
  }
  std::size_t record_alignment() const override { return config_.direct ? kDirectAlignment : 1; }
  void begin_batch(std::size_t ops) override {
    cbs_.assign(ops, aiocb{});
    while (bufs_.size() < ops) bufs_.emplace_back();
    kind_.assign(ops, Kind::none);
  }
  void write(std::size_t slot, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    AlignedBuffer& buf = bufs_[slot];
    if (!buf.assign(data, n)) return fail("posix_memalign failed");
    aiocb& cb = prepare(slot, file);
    cb.aio_buf = buf.data();
    cb.aio_nbytes = n;
    cb.aio_offset = off_t(offset);
    submit(slot, Kind::write, [&] { return ::aio_write(&cb); });
  }
  void sync(std::size_t slot, unsigned file) override {
    aiocb& cb = prepare(slot, file);
    submit(slot, Kind::sync, [&] { return ::aio_fsync(config_.fdatasync ? O_DSYNC : O_SYNC, &cb); });
  }
  void end_batch() override {
    for (std::size_t i = 0; i < cbs_.size(); ++i)
      if (kind_[i] != Kind::none) wait_one(cbs_[i], kind_[i]);
    kind_.assign(kind_.size(), Kind::none);
  }
  void finish() override {
    end_batch();
    for (std::size_t f = 0; f < fds_.size(); ++f) {
      begin_batch(1);
      sync(0, unsigned(f));
      end_batch();
    }
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~AioMethod() override {
    // A failed run can leave requests in flight: they must not outlive their buffers.
    for (std::size_t i = 0; i < kind_.size(); ++i)
      if (kind_[i] != Kind::none) {
        const aiocb* list[1] = {&cbs_[i]};
        while (::aio_error(&cbs_[i]) == EINPROGRESS) ::aio_suspend(list, 1, nullptr);
      }
    close_all(fds_);
  }

 private:
  enum class Kind : char { none, write, sync };
  aiocb& prepare(std::size_t slot, unsigned file) {
    aiocb& cb = cbs_[slot];
    std::memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fds_[file];
    cb.aio_sigevent.sigev_notify = SIGEV_NONE;
    return cb;
  }
  template <class Submit>
  void submit(std::size_t slot, Kind kind, Submit&& call) {
    while (call() != 0) {
      if (errno != EAGAIN) return fail(errno_text(kind == Kind::write ? "aio_write" : "aio_fsync", errno));
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // glibc's request table is full
    }
    kind_[slot] = kind;
  }
  void wait_one(aiocb& cb, Kind kind) {
    const aiocb* list[1] = {&cb};
    int e;
    while ((e = ::aio_error(&cb)) == EINPROGRESS) ::aio_suspend(list, 1, nullptr);
    const ssize_t r = ::aio_return(&cb);
    const char* what = kind == Kind::write ? "aio_write" : "aio_fsync";
    if (e != 0)
      fail(errno_text(what, e));
    else if (kind == Kind::write && r != ssize_t(cb.aio_nbytes))
      fail(std::string(what) + ": short transfer");
  }
  const MethodConfig config_;
  std::vector<int> fds_;
  std::vector<aiocb> cbs_;
  std::vector<AlignedBuffer> bufs_;
  std::vector<Kind> kind_;
};
}  // namespace

// Under ThreadSanitizer glibc's AIO cannot run: its helper threads start more threads from
// inside libc (handle_fildes_io -> pthread_create), which ThreadSanitizer never sees, and the
// new thread's first allocation crashes in the sanitizer's allocator (about 1 run in 30 here).
#if defined(__SANITIZE_THREAD__)
constexpr const char* kAioUnavailable =
    "not in a ThreadSanitizer build: glibc's AIO helper threads start threads ThreadSanitizer cannot see";
#else
constexpr const char* kAioUnavailable = "";
#endif

std::vector<MethodInfo> aio_methods() {
  return {{"aio", "glibc POSIX AIO (aio_write and aio_fsync, waited at batch ends)",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new AioMethod(c)); },
           kAioUnavailable, false}};
}
}  // namespace augment

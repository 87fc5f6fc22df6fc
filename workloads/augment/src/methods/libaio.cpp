// libaio: kernel AIO (io_submit) with O_DIRECT, the only way it is asynchronous, whatever
// --direct says. Requests must be aligned, so this method asks for records padded to 4096 bytes
// (every record then starts at an aligned offset) and copies each into an aligned buffer of its
// slot. One context (depth 256) shared under a mutex: submit at once, reap first when 256 are in
// flight, reap everything at the batch end.
// sync(): kernel AIO's fsync (IOCB_CMD_FSYNC / FDSYNC, Linux 4.18+) does not wait for writes still
// in flight, so the submitter first reaps until every earlier write completed, then submits the
// fsync and returns. A kernel that refuses the command makes sync() a plain fsync(2), said in
// note(). A filesystem that refuses O_DIRECT (tmpfs) or a kernel without AIO skips the method with
// the reason.
#include "method.hpp"

#if defined(TAI_AUGMENT_LIBAIO)
#include <fcntl.h>
#include <libaio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace augment {
namespace {
constexpr unsigned kDepth = 256;

class LibaioMethod final : public Method {
 public:
  explicit LibaioMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    if (!open_descriptors(paths, true, &fds_, ", which kernel AIO needs")) return false;
    if (const int e = io_setup(kDepth, &ctx_); e < 0) {
      ctx_ = nullptr;
      refuse(errno_text("io_setup (kernel AIO unavailable here)", -e));
      return false;
    }
    return true;
  }
  std::size_t record_alignment() const override { return kDirectAlignment; }
  std::string note() const override {
    return sync_fallback_.load(std::memory_order_relaxed) ? "kernel AIO refused fsync: fsync(2) on the compute thread"
                                                          : std::string();
  }
  void begin_batch(std::size_t ops) override {
    iocbs_.resize(ops);
    while (bufs_.size() < ops) bufs_.emplace_back();
  }
  void write(std::size_t slot, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    AlignedBuffer& buf = bufs_[slot];
    if (!buf.assign(data, n)) return fail("posix_memalign failed");
    std::lock_guard<std::mutex> lock(mutex_);
    iocb* cb = &iocbs_[slot];
    io_prep_pwrite(cb, fds_[file], buf.data(), n, static_cast<long long>(offset));
    submit(cb);
  }
  void sync(std::size_t slot, unsigned file) override {
    if (!sync_fallback_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mutex_);
      while (in_flight_ > 0 && reap(in_flight_)) {
      }
      iocb* cb = &iocbs_[slot];
      config_.fdatasync ? io_prep_fdsync(cb, fds_[file]) : io_prep_fsync(cb, fds_[file]);
      if (submit(cb, /*refusal_ok=*/true)) return;
      sync_fallback_.store(true, std::memory_order_relaxed);
    }
    if (const int e = sync_fd(fds_[file], config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
  }
  void end_batch() override {
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ > 0 && reap(in_flight_)) {
    }
  }
  void finish() override {
    end_batch();
    for (int fd : fds_)
      if (fd >= 0)
        if (const int e = sync_fd(fd, config_.fdatasync)) fail(errno_text("fsync", e));
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~LibaioMethod() override {
    if (ctx_) {
      while (in_flight_ > 0 && reap(in_flight_)) {  // the kernel must be done with the buffers
      }
      io_destroy(ctx_);
    }
    close_all(fds_);
  }

 private:
  // Submits one request (the mutex held); false when it was refused with EINVAL and refusal_ok.
  bool submit(iocb* cb, bool refusal_ok = false) {
    while (in_flight_ >= kDepth && reap(1)) {
    }
    for (;;) {
      const int r = io_submit(ctx_, 1, &cb);
      if (r == 1) break;
      if ((r == -EAGAIN || r == -EINTR) && (in_flight_ == 0 || reap(1))) continue;
      if (refusal_ok && r == -EINVAL) return false;
      fail(errno_text("io_submit", r < 0 ? -r : EIO));
      return true;
    }
    ++in_flight_;
    return true;
  }
  // Waits for at least one completion (at most `max`); false when the context failed.
  bool reap(unsigned max) {
    io_event events[64];
    int got;
    while ((got = io_getevents(ctx_, 1, long(std::min(max, 64u)), events, nullptr)) == -EINTR) {
    }
    if (got < 0) {
      fail(errno_text("io_getevents", -got));
      in_flight_ = 0;
      return false;
    }
    for (int i = 0; i < got; ++i) {
      const long res = long(events[i].res);
      const bool is_sync = events[i].obj->aio_lio_opcode == IO_CMD_FSYNC || events[i].obj->aio_lio_opcode == IO_CMD_FDSYNC;
      --in_flight_;
      if (res < 0)
        fail(errno_text(is_sync ? "kernel AIO fsync" : "kernel AIO write", int(-res)));
      else if (!is_sync && std::size_t(res) != events[i].obj->u.c.nbytes)
        fail("kernel AIO write: short transfer");
    }
    return true;
  }
  const MethodConfig config_;
  std::vector<int> fds_;
  io_context_t ctx_ = nullptr;
  std::mutex mutex_;
  unsigned in_flight_ = 0;
  std::atomic<bool> sync_fallback_{false};
  std::vector<iocb> iocbs_;
  std::vector<AlignedBuffer> bufs_;
};
}  // namespace

std::vector<MethodInfo> libaio_methods() {
  return {{"libaio", "kernel AIO with O_DIRECT, records padded to 4096 bytes, one shared context, AIO fsync",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new LibaioMethod(c)); }, "",
           false}};
}
}  // namespace augment
#else
namespace augment {
std::vector<MethodInfo> libaio_methods() {
  return {{"libaio", "kernel AIO with O_DIRECT", nullptr, "this build has no libaio (TAI_WITH_LIBAIO=OFF)", false}};
}
}  // namespace augment
#endif

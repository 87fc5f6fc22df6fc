// libaio: kernel AIO (io_submit) with O_DIRECT, the only way it is asynchronous. Requests must be
// aligned, so this method asks for records padded to 4096 bytes (every record then starts at an
// aligned offset; 4096 covers the logical block size of the usual devices) and copies each into
// an aligned buffer of its slot. One context (depth 256) shared under a mutex: submit at once,
// reap first when 256 are in flight, reap everything at the batch end; fsync(2) at the end (kernel
// AIO's fsync command is refused by most filesystems). A filesystem that refuses O_DIRECT (tmpfs)
// or a kernel without AIO skips the method with the reason.
#include "method.hpp"

#if defined(TAI_AUGMENT_LIBAIO)
#include <fcntl.h>
#include <libaio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace augment {
namespace {
constexpr unsigned kDepth = 256;
constexpr std::size_t kAlign = 4096;

struct AlignedBuffer {
  void* p = nullptr;
  std::size_t capacity = 0;
  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& o) noexcept : p(o.p), capacity(o.capacity) { o.p = nullptr, o.capacity = 0; }
  AlignedBuffer& operator=(AlignedBuffer&&) = delete;
  ~AlignedBuffer() { std::free(p); }
  bool reserve(std::size_t n) {
    if (n <= capacity) return true;
    std::free(p);
    p = nullptr;
    capacity = 0;
    if (posix_memalign(&p, kAlign, n) != 0) return false;
    capacity = n;
    return true;
  }
};

class LibaioMethod final : public Method {
 public:
  bool open(const std::string& path) override {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0) {
      if (errno == EINVAL)
        refuse("the filesystem of " + path + " refuses O_DIRECT, which kernel AIO needs");
      else
        fail(errno_text("open " + path, errno));
      return false;
    }
    if (const int e = io_setup(kDepth, &ctx_); e < 0) {
      ctx_ = nullptr;
      refuse(errno_text("io_setup (kernel AIO unavailable here)", -e));
      return false;
    }
    return true;
  }
  std::size_t record_alignment() const override { return kAlign; }
  void begin_batch(std::size_t records) override {
    iocbs_.resize(records);
    while (bufs_.size() < records) bufs_.emplace_back();
  }
  void write(std::size_t slot, std::uint64_t offset, const void* data, std::size_t n) override {
    AlignedBuffer& buf = bufs_[slot];
    if (!buf.reserve(n)) return fail("posix_memalign failed");
    std::memcpy(buf.p, data, n);
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ >= kDepth && reap(1)) {
    }
    iocb* cb = &iocbs_[slot];
    io_prep_pwrite(cb, fd_, buf.p, n, static_cast<long long>(offset));
    cb->data = reinterpret_cast<void*>(slot);
    for (;;) {
      const int r = io_submit(ctx_, 1, &cb);
      if (r == 1) break;
      if ((r == -EAGAIN || r == -EINTR) && (in_flight_ == 0 || reap(1))) continue;
      return fail(errno_text("io_submit", r < 0 ? -r : EIO));
    }
    ++in_flight_;
  }
  void end_batch() override {
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ > 0 && reap(in_flight_)) {
    }
  }
  void finish() override {
    if (fd_ < 0) return;
    end_batch();
    if (::fsync(fd_) != 0) fail(errno_text("fsync", errno));
    if (::close(fd_) != 0) fail(errno_text("close", errno));
    fd_ = -1;
  }
  ~LibaioMethod() override {
    if (ctx_) io_destroy(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }

 private:
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
      --in_flight_;
      if (res < 0)
        fail(errno_text("kernel AIO write", int(-res)));
      else if (std::size_t(res) != events[i].obj->u.c.nbytes)
        fail("kernel AIO write: short transfer");
    }
    return true;
  }
  int fd_ = -1;
  io_context_t ctx_ = nullptr;
  std::mutex mutex_;
  unsigned in_flight_ = 0;
  std::vector<iocb> iocbs_;
  std::vector<AlignedBuffer> bufs_;
};
}  // namespace

std::vector<MethodInfo> libaio_methods() {
  return {{"libaio", "kernel AIO with O_DIRECT, records padded to 4096 bytes, one shared context",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new LibaioMethod); }, "", false}};
}
}  // namespace augment
#else
namespace augment {
std::vector<MethodInfo> libaio_methods() {
  return {{"libaio", "kernel AIO with O_DIRECT", nullptr, "this build has no libaio (TAI_WITH_LIBAIO=OFF)", false}};
}
}  // namespace augment
#endif

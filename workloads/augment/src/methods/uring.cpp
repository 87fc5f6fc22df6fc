// uring: liburing used directly (buffered). One ring shared by the compute threads under a mutex,
// as a programmer adding io_uring to this loop would write it: each record is copied into its
// slot's buffer, a write SQE is submitted at once; when `depth` writes are in flight the
// submitter reaps completions first. The batch's end reaps everything; finish() is an fsync SQE,
// then close. A kernel that refuses io_uring fails open() with the reason.
#include "method.hpp"

#if defined(TAI_AUGMENT_URING)
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>

namespace augment {
namespace {
constexpr unsigned kDepth = 256;

class UringMethod final : public Method {
 public:
  bool open(const std::string& path) override {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fail(errno_text("open " + path, errno));
      return false;
    }
    if (const int e = io_uring_queue_init(kDepth, &ring_, 0); e < 0) {
      fail(errno_text("io_uring_queue_init (io_uring refused here)", -e));
      return false;
    }
    ring_ok_ = true;
    return true;
  }
  void begin_batch(std::size_t records) override { bufs_.resize(records); }
  void write(std::size_t slot, std::uint64_t offset, const void* data, std::size_t n) override {
    auto& buf = bufs_[slot];
    buf.assign(static_cast<const char*>(data), static_cast<const char*>(data) + n);
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ >= kDepth) reap_one();
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return fail("io_uring_get_sqe: submission queue full");
    io_uring_prep_write(sqe, fd_, buf.data(), unsigned(n), offset);
    io_uring_sqe_set_data64(sqe, slot);
    submit();
  }
  void end_batch() override {
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ > 0) reap_one();
  }
  void finish() override {
    if (!ring_ok_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (in_flight_ > 0) reap_one();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_fsync(sqe, fd_, 0);
      io_uring_sqe_set_data64(sqe, kFsyncTag);
      submit();
      while (in_flight_ > 0) reap_one();
    }
    if (::close(fd_) != 0) fail(errno_text("close", errno));
    fd_ = -1;
  }
  ~UringMethod() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  static constexpr std::uint64_t kFsyncTag = ~std::uint64_t{0};
  void submit() {
    int r;
    while ((r = io_uring_submit(&ring_)) == -EINTR || r == -EAGAIN || r == -EBUSY) {
      if (in_flight_ > 0) reap_one();
    }
    if (r < 0) return fail(errno_text("io_uring_submit", -r));
    ++in_flight_;
  }
  void reap_one() {
    io_uring_cqe* cqe = nullptr;
    int e;
    while ((e = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
    }
    if (e < 0) {
      fail(errno_text("io_uring_wait_cqe", -e));
      in_flight_ = 0;  // nothing more can be learnt from this ring
      return;
    }
    const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
    if (res < 0)
      fail(errno_text(tag == kFsyncTag ? "io_uring fsync" : "io_uring write", -res));
    else if (tag != kFsyncTag && std::size_t(res) != bufs_[tag].size())
      fail("io_uring write: short transfer");
  }
  int fd_ = -1;
  bool ring_ok_ = false;
  io_uring ring_{};
  std::mutex mutex_;
  unsigned in_flight_ = 0;
  std::vector<std::vector<char>> bufs_;
};
}  // namespace

std::vector<MethodInfo> uring_methods() {
  return {{"uring", "liburing directly: one shared ring under a mutex, buffered writes, fsync SQE at the end",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new UringMethod); }, "", false}};
}
}  // namespace augment
#else
namespace augment {
std::vector<MethodInfo> uring_methods() {
  return {{"uring", "liburing directly", nullptr, "this build has no liburing (TAI_WITH_URING=OFF)", false}};
}
}  // namespace augment
#endif

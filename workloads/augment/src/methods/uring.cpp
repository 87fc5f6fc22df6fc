// uring: liburing used directly. One ring shared by the compute threads under a mutex, as a
// programmer adding io_uring to this loop would write it: each record is copied into its slot's
// buffer (aligned, so --direct works) and a write SQE is submitted at once; when `depth`
// operations are in flight the submitter reaps completions first. sync() submits an fsync SQE
// (IORING_FSYNC_DATASYNC for --fdatasync) with IOSQE_IO_DRAIN: io_uring does not order an fsync
// after writes still in flight, and without the drain it could complete before them and cover
// nothing. The batch's end reaps everything; finish() is one fsync SQE per file, then close. A
// kernel that refuses io_uring fails open() with the reason.
#include "method.hpp"

#if defined(TAI_AUGMENT_URING)
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace augment {
namespace {
constexpr unsigned kDepth = 256;

class UringMethod final : public Method {
 public:
  explicit UringMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    if (!open_descriptors(paths, config_.direct, &fds_)) return false;
    if (const int e = io_uring_queue_init(kDepth, &ring_, 0); e < 0) {
      refuse(errno_text("io_uring_queue_init (io_uring refused here)", -e));
      return false;
    }
    ring_ok_ = true;
    return true;
  }
  std::size_t record_alignment() const override { return config_.direct ? kDirectAlignment : 1; }
  void begin_batch(std::size_t ops) override {
    while (bufs_.size() < ops) bufs_.emplace_back();
  }
  void write(std::size_t slot, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    AlignedBuffer& buf = bufs_[slot];
    if (!buf.assign(data, n)) return fail("posix_memalign failed");
    std::lock_guard<std::mutex> lock(mutex_);
    io_uring_sqe* sqe = next_sqe();
    if (!sqe) return;
    io_uring_prep_write(sqe, fds_[file], buf.data(), unsigned(n), offset);
    io_uring_sqe_set_data64(sqe, slot);
    submit();
  }
  void sync(std::size_t slot, unsigned file) override {
    std::lock_guard<std::mutex> lock(mutex_);
    io_uring_sqe* sqe = next_sqe();
    if (!sqe) return;
    io_uring_prep_fsync(sqe, fds_[file], config_.fdatasync ? IORING_FSYNC_DATASYNC : 0);
    sqe->flags |= IOSQE_IO_DRAIN;
    io_uring_sqe_set_data64(sqe, slot | kSyncBit);
    submit();
  }
  void end_batch() override {
    std::lock_guard<std::mutex> lock(mutex_);
    while (in_flight_ > 0) reap_one();
  }
  void finish() override {
    if (!ring_ok_) return;
    end_batch();
    for (std::size_t f = 0; f < fds_.size(); ++f) sync(0, unsigned(f));
    end_batch();
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~UringMethod() override {
    if (ring_ok_) {
      while (in_flight_ > 0) reap_one();  // the kernel must be done with the buffers
      io_uring_queue_exit(&ring_);
    }
    close_all(fds_);
  }

 private:
  static constexpr std::uint64_t kSyncBit = std::uint64_t{1} << 63;
  io_uring_sqe* next_sqe() {
    while (in_flight_ >= kDepth) reap_one();
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) fail("io_uring_get_sqe: submission queue full");
    return sqe;
  }
  // Submits until the submission queue is empty: io_uring_submit may take fewer entries than
  // are ready, and an entry left behind would never complete (reap_one would wait for good).
  void submit() {
    ++in_flight_;  // the entry just prepared
    while (io_uring_sq_ready(&ring_) > 0) {
      const int r = io_uring_submit(&ring_);
      if (r == -EINTR || r == -EAGAIN || r == -EBUSY) {
        if (in_flight_ > io_uring_sq_ready(&ring_)) reap_one();  // make room: something was submitted
        continue;
      }
      if (r < 0) {
        in_flight_ -= std::min(in_flight_, io_uring_sq_ready(&ring_));
        return fail(errno_text("io_uring_submit", -r));
      }
    }
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
    const bool is_sync = (tag & kSyncBit) != 0;
    if (res < 0)
      fail(errno_text(is_sync ? "io_uring fsync" : "io_uring write", -res));
    else if (!is_sync && std::size_t(res) != bufs_[tag].size())
      fail("io_uring write: short transfer");
  }
  const MethodConfig config_;
  std::vector<int> fds_;
  bool ring_ok_ = false;
  io_uring ring_{};
  std::mutex mutex_;
  unsigned in_flight_ = 0;
  std::vector<AlignedBuffer> bufs_;
};
}  // namespace

std::vector<MethodInfo> uring_methods() {
  return {{"uring", "liburing directly: one shared ring under a mutex, fsync SQEs with IOSQE_IO_DRAIN",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new UringMethod(c)); }, "",
           false}};
}
}  // namespace augment
#else
namespace augment {
std::vector<MethodInfo> uring_methods() {
  return {{"uring", "liburing directly", nullptr, "this build has no liburing (TAI_WITH_URING=OFF)", false}};
}
}  // namespace augment
#endif

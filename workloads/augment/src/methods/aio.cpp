// aio: glibc POSIX AIO. Each record is copied into its slot's buffer and handed to aio_write; the
// batch's end waits with aio_suspend and checks aio_error/aio_return; finish() is aio_fsync
// (O_SYNC), waited the same way, then close.
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
  bool open(const std::string& path) override {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(errno_text("open " + path, errno));
    return fd_ >= 0;
  }
  void begin_batch(std::size_t records) override {
    cbs_.assign(records, aiocb{});
    bufs_.resize(records);
    submitted_.assign(records, 0);
  }
  void write(std::size_t slot, std::uint64_t offset, const void* data, std::size_t n) override {
    auto& buf = bufs_[slot];
    buf.assign(static_cast<const char*>(data), static_cast<const char*>(data) + n);
    aiocb& cb = cbs_[slot];
    std::memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fd_;
    cb.aio_buf = buf.data();
    cb.aio_nbytes = n;
    cb.aio_offset = off_t(offset);
    cb.aio_sigevent.sigev_notify = SIGEV_NONE;
    while (::aio_write(&cb) != 0) {
      if (errno != EAGAIN) return fail(errno_text("aio_write", errno));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    submitted_[slot] = 1;
  }
  void end_batch() override {
    for (std::size_t i = 0; i < cbs_.size(); ++i)
      if (submitted_[i]) wait_one(cbs_[i], "aio_write");
  }
  void finish() override {
    if (fd_ < 0) return;
    aiocb cb;
    std::memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fd_;
    cb.aio_sigevent.sigev_notify = SIGEV_NONE;
    if (::aio_fsync(O_SYNC, &cb) != 0)
      fail(errno_text("aio_fsync", errno));
    else
      wait_one(cb, "aio_fsync", false);
    if (::close(fd_) != 0) fail(errno_text("close", errno));
    fd_ = -1;
  }
  ~AioMethod() override {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  void wait_one(aiocb& cb, const char* what, bool check_length = true) {
    const aiocb* list[1] = {&cb};
    int e;
    while ((e = ::aio_error(&cb)) == EINPROGRESS) ::aio_suspend(list, 1, nullptr);
    const ssize_t r = ::aio_return(&cb);
    if (e != 0)
      fail(errno_text(what, e));
    else if (check_length && r != ssize_t(cb.aio_nbytes))
      fail(std::string(what) + ": short transfer");
  }
  int fd_ = -1;
  std::vector<aiocb> cbs_;
  std::vector<std::vector<char>> bufs_;
  std::vector<char> submitted_;
};
}  // namespace

std::vector<MethodInfo> aio_methods() {
  return {{"aio", "glibc POSIX AIO (aio_write, waited at batch ends; aio_fsync at the end)",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new AioMethod); }, "", false}};
}
}  // namespace augment
